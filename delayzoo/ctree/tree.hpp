// Batched EfficientZero-style MCTS tree: the C++ core behind delayzoo.ctree._ctree.
//
// Every root owns a preallocated pool of `max_nodes` expanded nodes (node 0 is the root);
// nothing is allocated while a search runs. Semantics are documented in delayzoo/ctree/ptree.py,
// the pure-Python twin, which performs the same floating-point operations in the same order.
#ifndef DELAYZOO_CTREE_TREE_HPP
#define DELAYZOO_CTREE_TREE_HPP

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

namespace delayzoo {
namespace ctree {

// splitmix64: a tiny seedable generator, reproduced bit for bit by ptree.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();

 private:
  uint64_t state_;
};

// Statistics of the edge (node, action), stored in the node so that scoring a node reads
// one contiguous block. `child` is the pool index of the node it leads to, -1 if unexpanded.
struct Edge {
  double prior;
  double value_sum;  // of the child node
  double reward;     // edge reward from the value prefixes
  int32_t visits;    // of the child node
  int32_t child;
};

struct Node {
  double value_prefix;
  int64_t latent;  // simulation index of the node's latent state
  uint8_t is_reset;
  uint8_t has_priors;  // 0 while the edges' `prior` still hold the logits
};

class Roots {
 public:
  Roots(int num_roots, int num_actions, int max_nodes, uint64_t seed);

  // Starts a new search: expands every root. noise and legal may be null.
  void prepare(const double* value_prefix, const double* logits, const double* noise,
               double noise_fraction, const uint8_t* legal);
  void distributions(int64_t* out) const;  // (B, A) root child visit counts
  void values(double* out) const;          // (B,) mean backed-up value of each root

  int num_roots() const { return num_roots_; }
  int num_actions() const { return num_actions_; }
  int max_nodes() const { return max_nodes_; }
  int num_nodes() const { return prepared_ ? num_nodes_[0] : 0; }

  // Flat storage: node k of root b is at b * max_nodes + k; its edges at
  // (b * max_nodes + k) * num_actions + a.
  int num_roots_, num_actions_, max_nodes_;
  uint64_t uid_, generation_;
  bool prepared_;
  std::vector<int> num_nodes_;
  std::vector<int> root_visits_;  // 1 + number of backups, as in EfficientZero
  std::vector<double> root_value_sum_;
  // The pools are left uninitialised: a node and its edges are written when it is expanded.
  std::unique_ptr<Node[]> nodes_;
  std::unique_ptr<Edge[]> edges_;
  std::vector<uint8_t> legal_;
  std::vector<double> scores_;
  std::vector<int> candidates_;
  SplitMix64 rng_;
  // pUCT exploration factor of every parent visit count n < max_nodes, for the (c_init, c_base)
  // of the last traversal: one log and sqrt per search instead of one per node descended.
  std::vector<double> factors_;
  double factors_c_init_, factors_c_base_;

  const double* puct_factors(double c_init, double c_base);

  // Writes the edges of a new node with its logits; the softmax is taken when the node is
  // first descended through (most leaves never are), by softmax_priors.
  void expand(int64_t node, const double* logits);
  void softmax_priors(int64_t node, const uint8_t* legal);
};

inline double q_value(const Edge& e, double discount) {
  return e.reward + discount * (e.value_sum / e.visits);
}

// Exact min-max of the Q values of all visited non-root nodes of each tree, kept in one
// min/max segment tree per root, so a backup updates only the nodes on its path.
class MinMaxStatsList {
 public:
  MinMaxStatsList(int num_roots, double value_delta_max);

  void reset() { bound_ = false; }
  // Makes the statistics those of `roots`' current search (rebuilt from the tree if they
  // were last used with another search).
  void bind(const Roots& roots, double discount);
  void set(int b, int node, double q);
  // +inf / -inf while no Q value is recorded.
  double minimum(int b) const {
    return bound_ ? lo_[static_cast<size_t>(b) * 2 * cap_ + 1] : std::numeric_limits<double>::infinity();
  }
  double maximum(int b) const {
    return bound_ ? hi_[static_cast<size_t>(b) * 2 * cap_ + 1] : -std::numeric_limits<double>::infinity();
  }

  int num_roots_;
  double value_delta_max_;
  int cap_;
  bool bound_;
  uint64_t uid_, generation_;
  std::vector<double> lo_, hi_;
};

// EfficientZero's normalisation of a Q value by the min-max of the tree: (q - min) / range with
// range = max(max - min, value_delta_max) when max > min, else q unchanged.
class Normalizer {
 public:
  Normalizer(const MinMaxStatsList& minmax, int b)
      : lo_(minmax.minimum(b)), delta_(minmax.maximum(b) - lo_) {
    range_ = delta_ < minmax.value_delta_max_ ? minmax.value_delta_max_ : delta_;
  }
  double operator()(double q) const { return delta_ > 0.0 ? (q - lo_) / range_ : q; }

 private:
  double lo_, delta_, range_;
};

class SearchResults {
 public:
  explicit SearchResults(int num_roots);

  int num_roots_;
  int max_nodes_;
  bool pending_;
  uint64_t uid_, generation_;
  std::vector<int> path_node_;    // (B, max_nodes) node indices, root first
  std::vector<int> path_action_;  // (B, max_nodes) action taken at each of those nodes
  std::vector<int> path_len_;     // nodes on each path = depth of the new leaf
};

void batch_traverse(Roots& roots, double c_init, double c_base, double discount,
                    MinMaxStatsList& minmax, SearchResults& results, int64_t* parent_index,
                    int64_t* batch_index, int64_t* last_action);

void batch_backpropagate(Roots& roots, int64_t new_index, double discount,
                         const double* value_prefix, const double* value, const double* logits,
                         MinMaxStatsList& minmax, SearchResults& results, const uint8_t* is_reset);

}  // namespace ctree
}  // namespace delayzoo

#endif  // DELAYZOO_CTREE_TREE_HPP
