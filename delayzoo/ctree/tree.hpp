// Batched EfficientZero-style MCTS tree: the C++ core behind delayzoo.ctree._ctree, with
// EfficientZero's pUCT search and Gumbel MuZero's root search (sequential halving).
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
  double raw_value;  // the network's value of the node (the mixed value of the Gumbel search)
  int64_t latent;  // simulation index of the node's latent state
  uint8_t is_reset;
  uint8_t has_priors;  // 0 while the edges' `prior` still hold the logits
};

class Roots {
 public:
  Roots(int num_roots, int num_actions, int max_nodes, uint64_t seed);

  // Starts a new search: expands every root. noise, legal, values and gumbel may be null
  // (values: zeros). With gumbel the roots are searched by Gumbel MuZero's method over
  // min(num_considered, legal actions) actions per root; noise must then be null.
  void prepare(const double* value_prefix, const double* logits, const double* noise,
               double noise_fraction, const uint8_t* legal, const double* values,
               const double* gumbel, int num_considered);
  void distributions(int64_t* out) const;  // (B, A) root child visit counts
  void values(double* out) const;          // (B,) mean backed-up value of each root
  bool is_gumbel() const { return prepared_ && gumbel_; }

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
  // Gumbel roots: the noise and logits of every root, its number of considered actions, and the
  // sequential-halving schedule of each such number (row m - 1: the visit count an action must
  // have to be chosen at each of the max_nodes - 1 simulations).
  bool gumbel_;
  std::vector<double> gumbel_noise_;
  std::vector<double> root_logits_;
  std::vector<int> considered_;
  std::vector<int> schedules_;
  int schedules_m_;

  // The index of the action chosen among the legal ones whose score is within kTieEpsilon of the
  // best (drawn by rng_ when two or more): the tie rule of every selection.
  int select(const double* scores, int best_action, double best);
  // V of root b: its network value and backed-up values averaged.
  double root_value(int b) const;
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
//
// With per_node (q_normalization "parent_siblings") no statistics are kept: each node normalises
// the Q values of its children by the min-max of those of its visited children and its own value.
class MinMaxStatsList {
 public:
  MinMaxStatsList(int num_roots, double value_delta_max, bool per_node);

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
  bool per_node_;
  int cap_;
  bool bound_;
  uint64_t uid_, generation_;
  std::vector<double> lo_, hi_;
};

// EfficientZero's normalisation of a Q value by the min-max of the tree: (q - min) / range with
// range = max(max - min, value_delta_max) when max > min, else q unchanged.
// The per-node normalisation uses the same rule with the node's own min and max.
class Normalizer {
 public:
  Normalizer(const MinMaxStatsList& minmax, int b)
      : Normalizer(minmax.minimum(b), minmax.maximum(b), minmax.value_delta_max_) {}
  Normalizer(double lo, double hi, double value_delta_max) : lo_(lo), delta_(hi - lo) {
    range_ = delta_ < value_delta_max ? value_delta_max : delta_;
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

// The visit count an action needs to be chosen at each of num_simulations root simulations of
// sequential halving over num_considered actions (Danihelka et al., 2022); writes num_simulations.
void halving_schedule(int num_considered, int num_simulations, int* out);

void batch_traverse(Roots& roots, double c_init, double c_base, double discount,
                    MinMaxStatsList& minmax, SearchResults& results, int64_t* parent_index,
                    int64_t* batch_index, int64_t* last_action);

void batch_traverse_gumbel(Roots& roots, double c_visit, double c_scale, double discount,
                           MinMaxStatsList& minmax, SearchResults& results, int64_t* parent_index,
                           int64_t* batch_index, int64_t* last_action);

// The Gumbel search's outcome: the selected action (B,) and the improved policy (B, A).
void gumbel_outputs(Roots& roots, double c_visit, double c_scale, double discount,
                    MinMaxStatsList& minmax, int64_t* actions, double* policy);

void batch_backpropagate(Roots& roots, int64_t new_index, double discount,
                         const double* value_prefix, const double* value, const double* logits,
                         MinMaxStatsList& minmax, SearchResults& results, const uint8_t* is_reset);

}  // namespace ctree
}  // namespace delayzoo

#endif  // DELAYZOO_CTREE_TREE_HPP
