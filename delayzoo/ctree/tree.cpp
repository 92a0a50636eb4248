// Batched EfficientZero-style MCTS tree (see tree.hpp and ptree.py for the semantics).
#include "tree.hpp"

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

namespace delayzoo {
namespace ctree {

namespace {

constexpr double kTieEpsilon = 1e-6;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::atomic<uint64_t> next_uid{1};

std::string describe(double x) {
  if (std::isnan(x)) return "nan";
  return x > 0 ? "inf" : "-inf";
}

// Throws std::invalid_argument naming the first non-finite entry of a (rows, cols) array.
void check_finite(const double* x, int rows, int cols, const char* name) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  // A double is inf or nan iff its exponent bits are all ones; adding one to the exponent then
  // carries into the sign bit. This branch-free pass vectorises; the slow search below only
  // runs to word the error.
  constexpr uint64_t kExponent = 0x7FF0000000000000ULL;
  uint64_t carry = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    carry |= (bits & kExponent) + (1ULL << 52);
  }
  if ((carry >> 63) == 0) return;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      std::ostringstream msg;
      msg << name << "[" << i / cols;
      if (cols > 1) msg << ", " << i % cols;
      msg << "] is " << describe(x[i]) << "; all entries must be finite";
      throw std::invalid_argument(msg.str());
    }
  }
}

void check_discount(double discount) {
  if (!(discount >= 0.0 && discount <= 1.0)) {
    std::ostringstream msg;
    msg << "discount must be in [0, 1], got " << discount;
    throw std::invalid_argument(msg.str());
  }
}

inline double clamp01(double x) {
  if (x < 0.0) return 0.0;
  if (x > 1.0) return 1.0;
  return x;
}

}  // namespace

uint64_t SplitMix64::next() {
  state_ += 0x9E3779B97F4A7C15ULL;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

Roots::Roots(int num_roots, int num_actions, int max_nodes, uint64_t seed)
    : num_roots_(num_roots),
      num_actions_(num_actions),
      max_nodes_(max_nodes),
      uid_(next_uid.fetch_add(1)),
      generation_(0),
      prepared_(false),
      rng_(seed),
      factors_c_init_(std::numeric_limits<double>::quiet_NaN()),
      factors_c_base_(std::numeric_limits<double>::quiet_NaN()) {
  if (num_roots < 1) {
    throw std::invalid_argument("num_roots must be >= 1, got " + std::to_string(num_roots));
  }
  if (num_actions < 1) {
    throw std::invalid_argument("num_actions must be >= 1, got " + std::to_string(num_actions));
  }
  if (max_nodes < 1) {
    throw std::invalid_argument("max_nodes must be >= 1, got " + std::to_string(max_nodes));
  }
  const size_t nodes = static_cast<size_t>(num_roots) * max_nodes;
  num_nodes_.assign(num_roots, 0);
  root_visits_.assign(num_roots, 0);
  root_value_sum_.assign(num_roots, 0.0);
  nodes_.reset(new Node[nodes]);
  edges_.reset(new Edge[nodes * num_actions]);
  legal_.assign(static_cast<size_t>(num_roots) * num_actions, 1);
  scores_.assign(num_actions, 0.0);
  candidates_.assign(num_actions, 0);
}

const double* Roots::puct_factors(double c_init, double c_base) {
  if (!(c_init == factors_c_init_ && c_base == factors_c_base_)) {
    factors_.resize(max_nodes_);
    for (int n = 0; n < max_nodes_; ++n) {
      const double n_parent = n;
      factors_[n] = (c_init + std::log((n_parent + c_base + 1.0) / c_base)) * std::sqrt(n_parent);
    }
    factors_c_init_ = c_init;
    factors_c_base_ = c_base;
  }
  return factors_.data();
}

void Roots::expand(int64_t node, const double* logits) {
  Edge* edges = &edges_[node * num_actions_];
  for (int a = 0; a < num_actions_; ++a) edges[a] = Edge{logits[a], 0.0, 0.0, 0, -1};
  nodes_[node].has_priors = 0;
}

void Roots::softmax_priors(int64_t node, const uint8_t* legal) {
  const int A = num_actions_;
  Edge* edges = &edges_[node * A];
  double top = -kInf;
  for (int a = 0; a < A; ++a) {
    if ((legal == nullptr || legal[a]) && edges[a].prior > top) top = edges[a].prior;
  }
  double total = 0.0;
  for (int a = 0; a < A; ++a) {
    if (legal == nullptr || legal[a]) {
      edges[a].prior = std::exp(edges[a].prior - top);
      total += edges[a].prior;
    } else {
      edges[a].prior = 0.0;
    }
  }
  for (int a = 0; a < A; ++a) {
    if (legal == nullptr || legal[a]) edges[a].prior = edges[a].prior / total;
  }
  nodes_[node].has_priors = 1;
}

void Roots::prepare(const double* value_prefix, const double* logits, const double* noise,
                    double noise_fraction, const uint8_t* legal) {
  const int B = num_roots_, A = num_actions_;
  check_finite(value_prefix, B, 1, "value_prefix");
  check_finite(logits, B, A, "policy_logits");
  if (noise != nullptr) check_finite(noise, B, A, "noise");
  if (!(noise_fraction >= 0.0 && noise_fraction <= 1.0)) {
    std::ostringstream msg;
    msg << "noise_fraction must be in [0, 1], got " << noise_fraction;
    throw std::invalid_argument(msg.str());
  }
  if (legal != nullptr) {
    for (int b = 0; b < B; ++b) {
      bool any = false;
      for (int a = 0; a < A; ++a) any = any || legal[b * A + a];
      if (!any) {
        throw std::invalid_argument("legal_mask[" + std::to_string(b) +
                                    "] has no legal action; every root needs at least one");
      }
    }
  }
  ++generation_;
  prepared_ = true;
  for (int b = 0; b < B; ++b) {
    const int64_t g = static_cast<int64_t>(b) * max_nodes_;
    uint8_t* row = &legal_[static_cast<size_t>(b) * A];
    for (int a = 0; a < A; ++a) row[a] = legal == nullptr ? 1 : (legal[b * A + a] ? 1 : 0);
    num_nodes_[b] = 1;
    root_visits_[b] = 1;  // the expansion visit, as in EfficientZero: N(root) = visits - 1
    root_value_sum_[b] = 0.0;
    nodes_[g] = Node{value_prefix[b], 0, 0, 0};
    expand(g, logits + static_cast<int64_t>(b) * A);
    softmax_priors(g, row);
    if (noise != nullptr) {
      Edge* edges = &edges_[g * A];
      const double* eta = noise + static_cast<int64_t>(b) * A;
      for (int a = 0; a < A; ++a) {
        if (row[a]) {
          edges[a].prior = edges[a].prior * (1.0 - noise_fraction) + eta[a] * noise_fraction;
        }
      }
    }
  }
}

void Roots::distributions(int64_t* out) const {
  const int A = num_actions_;
  for (int b = 0; b < num_roots_; ++b) {
    const Edge* edges = &edges_[static_cast<size_t>(b) * max_nodes_ * A];
    for (int a = 0; a < A; ++a) out[static_cast<int64_t>(b) * A + a] = prepared_ ? edges[a].visits : 0;
  }
}

void Roots::values(double* out) const {
  for (int b = 0; b < num_roots_; ++b) {
    const int backups = prepared_ ? root_visits_[b] - 1 : 0;
    out[b] = backups > 0 ? root_value_sum_[b] / backups : 0.0;
  }
}

MinMaxStatsList::MinMaxStatsList(int num_roots, double value_delta_max)
    : num_roots_(num_roots),
      value_delta_max_(value_delta_max),
      cap_(0),
      bound_(false),
      uid_(0),
      generation_(0) {
  if (num_roots < 1) {
    throw std::invalid_argument("num_roots must be >= 1, got " + std::to_string(num_roots));
  }
  if (!(value_delta_max > 0.0) || !std::isfinite(value_delta_max)) {
    std::ostringstream msg;
    msg << "value_delta_max must be finite and > 0, got " << value_delta_max;
    throw std::invalid_argument(msg.str());
  }
}

void MinMaxStatsList::bind(const Roots& roots, double discount) {
  if (roots.num_roots_ != num_roots_) {
    throw std::invalid_argument("minmax has " + std::to_string(num_roots_) +
                                " roots but the tree has " + std::to_string(roots.num_roots_));
  }
  if (bound_ && uid_ == roots.uid_ && generation_ == roots.generation_) return;
  int cap = 1;
  while (cap < roots.max_nodes_) cap *= 2;
  cap_ = cap;
  lo_.assign(static_cast<size_t>(num_roots_) * 2 * cap_, kInf);
  hi_.assign(static_cast<size_t>(num_roots_) * 2 * cap_, -kInf);
  const int A = roots.num_actions_;
  for (int b = 0; b < num_roots_; ++b) {
    const int n = roots.prepared_ ? roots.num_nodes_[b] : 0;
    const Edge* edges = &roots.edges_[static_cast<size_t>(b) * roots.max_nodes_ * A];
    for (int64_t i = 0; i < static_cast<int64_t>(n) * A; ++i) {
      if (edges[i].child >= 0) set(b, edges[i].child, q_value(edges[i], discount));
    }
  }
  bound_ = true;
  uid_ = roots.uid_;
  generation_ = roots.generation_;
}

void MinMaxStatsList::set(int b, int node, double q) {
  double* lo = &lo_[static_cast<size_t>(b) * 2 * cap_];
  double* hi = &hi_[static_cast<size_t>(b) * 2 * cap_];
  size_t i = static_cast<size_t>(cap_) + node;
  lo[i] = q;
  hi[i] = q;
  for (i >>= 1; i >= 1; i >>= 1) {
    const double new_lo = lo[2 * i] < lo[2 * i + 1] ? lo[2 * i] : lo[2 * i + 1];
    const double new_hi = hi[2 * i] > hi[2 * i + 1] ? hi[2 * i] : hi[2 * i + 1];
    if (new_lo == lo[i] && new_hi == hi[i]) break;  // nothing above changes either
    lo[i] = new_lo;
    hi[i] = new_hi;
  }
}

SearchResults::SearchResults(int num_roots)
    : num_roots_(num_roots), max_nodes_(0), pending_(false), uid_(0), generation_(0) {
  if (num_roots < 1) {
    throw std::invalid_argument("num_roots must be >= 1, got " + std::to_string(num_roots));
  }
  path_len_.assign(num_roots, 0);
}

void batch_traverse(Roots& roots, double c_init, double c_base, double discount,
                    MinMaxStatsList& minmax, SearchResults& results, int64_t* parent_index,
                    int64_t* batch_index, int64_t* last_action) {
  const int B = roots.num_roots_, A = roots.num_actions_, M = roots.max_nodes_;
  if (!std::isfinite(c_init)) throw std::invalid_argument("c_init must be finite");
  if (!(c_base > 0.0) || !std::isfinite(c_base)) {
    std::ostringstream msg;
    msg << "c_base must be finite and > 0, got " << c_base;
    throw std::invalid_argument(msg.str());
  }
  check_discount(discount);
  if (!roots.prepared_) throw std::invalid_argument("call Roots.prepare before batch_traverse");
  if (roots.num_nodes_[0] >= M) {
    throw std::invalid_argument("the node pool is full: max_nodes=" + std::to_string(M) +
                                " allows " + std::to_string(M - 1) +
                                " simulations; create Roots with a larger max_nodes");
  }
  if (results.num_roots_ != B) {
    throw std::invalid_argument("results has " + std::to_string(results.num_roots_) +
                                " roots but the tree has " + std::to_string(B));
  }
  minmax.bind(roots, discount);
  if (results.max_nodes_ != M) {
    results.max_nodes_ = M;
    results.path_node_.assign(static_cast<size_t>(B) * M, 0);
    results.path_action_.assign(static_cast<size_t>(B) * M, 0);
  }
  const double* factors = roots.puct_factors(c_init, c_base);
  double* scores = roots.scores_.data();
  int* candidates = roots.candidates_.data();
  for (int b = 0; b < B; ++b) {
    const int64_t base = static_cast<int64_t>(b) * M;
    int* path_node = &results.path_node_[static_cast<size_t>(b) * M];
    int* path_action = &results.path_action_[static_cast<size_t>(b) * M];
    int len = 0;
    int node = 0;
    int visits = roots.root_visits_[b];
    double parent_q = 0.0;
    const uint8_t* legal = &roots.legal_[static_cast<size_t>(b) * A];  // roots only
    const Normalizer normalize(minmax, b);
    while (true) {
      if (!roots.nodes_[base + node].has_priors) roots.softmax_priors(base + node, nullptr);
      const Edge* edges = &roots.edges_[(base + node) * A];
      // Q of the visited children; unvisited ones get the node's mean Q.
      double total = 0.0;
      int visited = 0;
      for (int a = 0; a < A; ++a) {
        if (edges[a].visits > 0) {
          scores[a] = q_value(edges[a], discount);
          total += scores[a];
          ++visited;
        }
      }
      const double mean_q = (len == 0 && visited > 0) ? total / visited
                                                      : (parent_q + total) / (visited + 1);
      parent_q = mean_q;
      const double factor = factors[visits - 1];  // visits >= 1: the node was backed up through
      const double unvisited = clamp01(normalize(mean_q));
      double best = -kInf;
      int best_action = 0;
      for (int a = 0; a < A; ++a) {
        if (legal != nullptr && !legal[a]) {
          scores[a] = -kInf;  // below every legal (finite) score, so never best nor a tie
          continue;
        }
        const Edge& e = edges[a];
        if (e.visits > 0) {
          scores[a] = e.prior * factor / (e.visits + 1.0) + clamp01(normalize(scores[a]));
        } else {
          scores[a] = e.prior * factor + unvisited;  // x / (0 + 1.0) == x exactly
        }
        if (scores[a] > best) {
          best = scores[a];
          best_action = a;
        }
      }
      // Ties: every legal action within kTieEpsilon of the best, drawn uniformly.
      const double threshold = best - kTieEpsilon;
      int count = 0;
      for (int a = 0; a < A; ++a) count += scores[a] >= threshold;
      int action = best_action;
      if (count > 1) {
        int k = 0;
        for (int a = 0; a < A; ++a) {
          if (scores[a] >= threshold) candidates[k++] = a;
        }
        action = candidates[roots.rng_.next() % static_cast<uint64_t>(count)];
      }
      path_node[len] = node;
      path_action[len] = action;
      ++len;
      if (edges[action].child < 0) break;
      visits = edges[action].visits;
      node = edges[action].child;
      legal = nullptr;
    }
    results.path_len_[b] = len;
    parent_index[b] = roots.nodes_[base + node].latent;
    batch_index[b] = b;
    last_action[b] = path_action[len - 1];
  }
  results.pending_ = true;
  results.uid_ = roots.uid_;
  results.generation_ = roots.generation_;
}

void batch_backpropagate(Roots& roots, int64_t new_index, double discount,
                         const double* value_prefix, const double* value, const double* logits,
                         MinMaxStatsList& minmax, SearchResults& results, const uint8_t* is_reset) {
  const int B = roots.num_roots_, A = roots.num_actions_, M = roots.max_nodes_;
  if (!results.pending_ || results.uid_ != roots.uid_ ||
      results.generation_ != roots.generation_) {
    throw std::invalid_argument(
        "results hold no pending batch_traverse of the current search; call batch_traverse "
        "once before each batch_backpropagate");
  }
  if (new_index < 1) {
    throw std::invalid_argument("new_index must be >= 1 (index 0 holds the root latents), got " +
                                std::to_string(new_index));
  }
  check_discount(discount);
  check_finite(value_prefix, B, 1, "value_prefix");
  check_finite(value, B, 1, "value");
  check_finite(logits, B, A, "policy_logits");
  minmax.bind(roots, discount);
  for (int b = 0; b < B; ++b) {
    const int64_t base = static_cast<int64_t>(b) * M;
    const int* path_node = &results.path_node_[static_cast<size_t>(b) * M];
    const int* path_action = &results.path_action_[static_cast<size_t>(b) * M];
    const int len = results.path_len_[b];
    const Node& parent = roots.nodes_[base + path_node[len - 1]];
    Edge& leaf_edge = roots.edges_[(base + path_node[len - 1]) * A + path_action[len - 1]];
    const int k = roots.num_nodes_[b]++;
    const int64_t g = base + k;
    leaf_edge.child = k;
    leaf_edge.reward = parent.is_reset ? value_prefix[b] : value_prefix[b] - parent.value_prefix;
    roots.nodes_[g] = Node{value_prefix[b], new_index,
                           static_cast<uint8_t>((is_reset != nullptr && is_reset[b]) ? 1 : 0), 0};
    roots.expand(g, logits + static_cast<int64_t>(b) * A);
    double bootstrap = value[b];
    for (int i = len - 1; i >= 0; --i) {
      Edge& e = roots.edges_[(base + path_node[i]) * A + path_action[i]];
      e.value_sum += bootstrap;
      e.visits += 1;
      bootstrap = e.reward + discount * bootstrap;
    }
    roots.root_value_sum_[b] += bootstrap;
    roots.root_visits_[b] += 1;
    for (int i = 0; i < len; ++i) {
      const Edge& e = roots.edges_[(base + path_node[i]) * A + path_action[i]];
      minmax.set(b, e.child, q_value(e, discount));
    }
  }
  results.pending_ = false;
}

}  // namespace ctree
}  // namespace delayzoo
