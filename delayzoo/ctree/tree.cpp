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
constexpr double kTiny = std::numeric_limits<double>::min();  // floor of a prior in the mixed value

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

void check_gumbel_constants(double c_visit, double c_scale) {
  if (!(c_visit >= 0.0) || !std::isfinite(c_visit)) {
    std::ostringstream msg;
    msg << "c_visit must be finite and >= 0, got " << c_visit;
    throw std::invalid_argument(msg.str());
  }
  if (!(c_scale >= 0.0) || !std::isfinite(c_scale)) {
    std::ostringstream msg;
    msg << "c_scale must be finite and >= 0, got " << c_scale;
    throw std::invalid_argument(msg.str());
  }
}

// Gumbel MuZero's sigma of the completed Q values of a node's children (Danihelka et al., 2022):
// a visited child's Q, an unvisited one's the mixed value (the node's network value averaged with
// the prior-weighted Q of the visited children), normalised by the tree's min-max (tree_normalize)
// or, when that is null, the node's,
// clamped to [0, 1], times (c_visit + max child visits) * c_scale. Writes the sigma of the visited
// legal children and returns the one every unvisited child shares (computed once: most are);
// top receives the largest sigma of the legal children.
double completed_sigma(const Edge* edges, int A, const uint8_t* legal, double raw_value,
                       double node_value, double discount, const Normalizer* tree_normalize,
                       double value_delta_max, double c_visit, double c_scale, double* sigma,
                       double* top) {
  int max_visits = 0, unvisited = 0;
  int64_t total_visits = 0;
  double prior_sum = 0.0, weighted = 0.0;
  double lo = node_value, hi = node_value;
  for (int a = 0; a < A; ++a) {
    const Edge& e = edges[a];
    if (legal != nullptr && !legal[a]) continue;
    if (e.visits == 0) {
      ++unvisited;
      continue;
    }
    const double q = q_value(e, discount);
    const double p = e.prior > kTiny ? e.prior : kTiny;
    sigma[a] = q;
    prior_sum += p;
    weighted += p * q;
    total_visits += e.visits;
    if (e.visits > max_visits) max_visits = e.visits;
    if (q < lo) lo = q;
    if (q > hi) hi = q;
  }
  const double mixed = total_visits > 0
                           ? (raw_value + static_cast<double>(total_visits) * (weighted / prior_sum)) /
                                 (static_cast<double>(total_visits) + 1.0)
                           : raw_value;
  const Normalizer normalize = tree_normalize == nullptr ? Normalizer(lo, hi, value_delta_max) : *tree_normalize;
  const double scale = (c_visit + max_visits) * c_scale;
  const double shared = scale * clamp01(normalize(mixed));
  double best = unvisited > 0 ? shared : -kInf;
  for (int a = 0; a < A; ++a) {
    if ((legal == nullptr || legal[a]) && edges[a].visits > 0) {
      sigma[a] = scale * clamp01(normalize(sigma[a]));
      if (sigma[a] > best) best = sigma[a];
    }
  }
  *top = best;
  return shared;
}

}  // namespace

void halving_schedule(int num_considered, int num_simulations, int* out) {
  if (num_considered < 1) {
    throw std::invalid_argument("num_considered must be >= 1, got " + std::to_string(num_considered));
  }
  if (num_simulations < 0) {
    throw std::invalid_argument("num_simulations must be >= 0, got " + std::to_string(num_simulations));
  }
  if (num_considered == 1) {  // the one action takes every simulation
    for (int k = 0; k < num_simulations; ++k) out[k] = k;
    return;
  }
  int rounds = 0;  // ceil(log2(num_considered)) halvings
  while ((1 << rounds) < num_considered) ++rounds;
  std::vector<int> visits(num_considered, 0);
  int n = num_considered, k = 0;
  while (k < num_simulations) {
    int extra = num_simulations / (rounds * n);
    if (extra < 1) extra = 1;
    for (int r = 0; r < extra; ++r) {
      for (int i = 0; i < n && k < num_simulations; ++i) out[k++] = visits[i];
      for (int i = 0; i < n; ++i) ++visits[i];
    }
    n = n / 2 > 2 ? n / 2 : 2;
  }
}

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
      gumbel_(false),
      schedules_m_(0),
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
  considered_.assign(num_roots, 0);
}

int Roots::select(const double* scores, int best_action, double best) {
  const double threshold = best - kTieEpsilon;
  int count = 0;
  for (int a = 0; a < num_actions_; ++a) count += scores[a] >= threshold;
  if (count <= 1) return best_action;
  int k = 0;
  for (int a = 0; a < num_actions_; ++a) {
    if (scores[a] >= threshold) candidates_[k++] = a;
  }
  return candidates_[rng_.next() % static_cast<uint64_t>(count)];
}

double Roots::root_value(int b) const {
  const Node& root = nodes_[static_cast<size_t>(b) * max_nodes_];
  return (root.raw_value + root_value_sum_[b]) / root_visits_[b];
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
                    double noise_fraction, const uint8_t* legal, const double* values,
                    const double* gumbel, int num_considered) {
  const int B = num_roots_, A = num_actions_;
  check_finite(value_prefix, B, 1, "value_prefix");
  check_finite(logits, B, A, "policy_logits");
  if (noise != nullptr) check_finite(noise, B, A, "noise");
  if (values != nullptr) check_finite(values, B, 1, "values");
  if (gumbel != nullptr) {
    check_finite(gumbel, B, A, "gumbel");
    if (noise != nullptr) {
      throw std::invalid_argument("the Gumbel search takes no Dirichlet noise: pass noise or gumbel, not both");
    }
    if (num_considered < 1) {
      throw std::invalid_argument("num_considered must be >= 1, got " + std::to_string(num_considered));
    }
  }
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
  gumbel_ = gumbel != nullptr;
  if (gumbel_) {
    gumbel_noise_.assign(gumbel, gumbel + static_cast<size_t>(B) * A);
    root_logits_.assign(logits, logits + static_cast<size_t>(B) * A);
    const int m = num_considered < A ? num_considered : A;
    if (m != schedules_m_) {  // the schedules of 1..m considered actions over max_nodes - 1 simulations
      const int S = max_nodes_ - 1;
      schedules_.assign(static_cast<size_t>(m) * S, 0);
      for (int i = 1; i <= m; ++i) halving_schedule(i, S, &schedules_[static_cast<size_t>(i - 1) * S]);
      schedules_m_ = m;
    }
  }
  for (int b = 0; b < B; ++b) {
    const int64_t g = static_cast<int64_t>(b) * max_nodes_;
    uint8_t* row = &legal_[static_cast<size_t>(b) * A];
    int num_legal = 0;
    for (int a = 0; a < A; ++a) {
      row[a] = legal == nullptr ? 1 : (legal[b * A + a] ? 1 : 0);
      num_legal += row[a];
    }
    considered_[b] = num_legal < schedules_m_ ? num_legal : schedules_m_;
    num_nodes_[b] = 1;
    root_visits_[b] = 1;  // the expansion visit, as in EfficientZero: N(root) = visits - 1
    root_value_sum_[b] = 0.0;
    nodes_[g] = Node{value_prefix[b], values == nullptr ? 0.0 : values[b], 0, 0, 0};
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

MinMaxStatsList::MinMaxStatsList(int num_roots, double value_delta_max, bool per_node)
    : num_roots_(num_roots),
      value_delta_max_(value_delta_max),
      per_node_(per_node),
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
  if (per_node_ || (bound_ && uid_ == roots.uid_ && generation_ == roots.generation_)) return;
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
  if (per_node_) return;
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

namespace {

// The checks and set-up shared by both traversals.
void begin_traverse(Roots& roots, double discount, MinMaxStatsList& minmax, SearchResults& results,
                    bool gumbel) {
  const int B = roots.num_roots_, M = roots.max_nodes_;
  check_discount(discount);
  const char* name = gumbel ? "batch_traverse_gumbel" : "batch_traverse";
  if (!roots.prepared_) throw std::invalid_argument(std::string("call Roots.prepare before ") + name);
  if (roots.gumbel_ != gumbel) {
    throw std::invalid_argument(
        gumbel ? "the roots were prepared without gumbel noise: use batch_traverse (pUCT)"
               : "the roots were prepared with gumbel noise: use batch_traverse_gumbel");
  }
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
}

void end_traverse(const Roots& roots, SearchResults& results) {
  results.pending_ = true;
  results.uid_ = roots.uid_;
  results.generation_ = roots.generation_;
}

}  // namespace

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
  begin_traverse(roots, discount, minmax, results, false);
  const double* factors = roots.puct_factors(c_init, c_base);
  double* scores = roots.scores_.data();
  const bool per_node = minmax.per_node_;
  for (int b = 0; b < B; ++b) {
    const int64_t base = static_cast<int64_t>(b) * M;
    int* path_node = &results.path_node_[static_cast<size_t>(b) * M];
    int* path_action = &results.path_action_[static_cast<size_t>(b) * M];
    int len = 0;
    int node = 0;
    int visits = roots.root_visits_[b];
    double parent_q = 0.0;
    double node_value = per_node ? roots.root_value(b) : 0.0;
    const uint8_t* legal = &roots.legal_[static_cast<size_t>(b) * A];  // roots only
    const Normalizer tree_normalize(minmax, b);
    while (true) {
      if (!roots.nodes_[base + node].has_priors) roots.softmax_priors(base + node, nullptr);
      const Edge* edges = &roots.edges_[(base + node) * A];
      // Q of the visited children; unvisited ones get the node's mean Q.
      double total = 0.0, lo = node_value, hi = node_value;
      int visited = 0;
      for (int a = 0; a < A; ++a) {
        if (edges[a].visits > 0) {
          scores[a] = q_value(edges[a], discount);
          total += scores[a];
          ++visited;
          if (scores[a] < lo) lo = scores[a];
          if (scores[a] > hi) hi = scores[a];
        }
      }
      const Normalizer normalize = per_node ? Normalizer(lo, hi, minmax.value_delta_max_) : tree_normalize;
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
      const int action = roots.select(scores, best_action, best);
      path_node[len] = node;
      path_action[len] = action;
      ++len;
      if (edges[action].child < 0) break;
      visits = edges[action].visits;
      if (per_node) node_value = edges[action].value_sum / edges[action].visits;
      node = edges[action].child;
      legal = nullptr;
    }
    results.path_len_[b] = len;
    parent_index[b] = roots.nodes_[base + node].latent;
    batch_index[b] = b;
    last_action[b] = path_action[len - 1];
  }
  end_traverse(roots, results);
}

void batch_traverse_gumbel(Roots& roots, double c_visit, double c_scale, double discount,
                           MinMaxStatsList& minmax, SearchResults& results, int64_t* parent_index,
                           int64_t* batch_index, int64_t* last_action) {
  const int B = roots.num_roots_, A = roots.num_actions_, M = roots.max_nodes_;
  check_gumbel_constants(c_visit, c_scale);
  begin_traverse(roots, discount, minmax, results, true);
  double* scores = roots.scores_.data();
  const int S = M - 1;
  for (int b = 0; b < B; ++b) {
    const int64_t base = static_cast<int64_t>(b) * M;
    int* path_node = &results.path_node_[static_cast<size_t>(b) * M];
    int* path_action = &results.path_action_[static_cast<size_t>(b) * M];
    const uint8_t* legal = &roots.legal_[static_cast<size_t>(b) * A];
    const Normalizer by_tree(minmax, b);
    const Normalizer* tree_normalize = minmax.per_node_ ? nullptr : &by_tree;
    // The root: among the legal actions with the visit count the halving schedule asks for at this
    // simulation, the best g + logits + sigma(completed Q).
    const Edge* edges = &roots.edges_[base * A];
    double top = 0.0;
    const double unvisited = completed_sigma(edges, A, legal, roots.nodes_[base].raw_value, roots.root_value(b),
                                             discount, tree_normalize, minmax.value_delta_max_, c_visit,
                                             c_scale, scores, &top);
    const int want = roots.schedules_[static_cast<size_t>(roots.considered_[b] - 1) * S +
                                      (roots.root_visits_[b] - 1)];
    const double* g = &roots.gumbel_noise_[static_cast<size_t>(b) * A];
    const double* logits = &roots.root_logits_[static_cast<size_t>(b) * A];
    double best = -kInf;
    int best_action = -1;
    for (int a = 0; a < A; ++a) {
      if (!legal[a] || edges[a].visits != want) {
        scores[a] = -kInf;
        continue;
      }
      scores[a] = g[a] + logits[a] + (want > 0 ? scores[a] : unvisited);  // want == visits
      if (scores[a] > best) {
        best = scores[a];
        best_action = a;
      }
    }
    if (best_action < 0) throw std::logic_error("the halving schedule left no action to visit");
    int action = roots.select(scores, best_action, best);
    int len = 0, node = 0;
    path_node[len] = node;
    path_action[len] = action;
    ++len;
    // Below the root: argmax of pi'(a) - N(a) / (1 + sum N), pi' = softmax(logits + sigma).
    while (edges[action].child >= 0) {
      const Edge& through = edges[action];
      node = through.child;
      if (!roots.nodes_[base + node].has_priors) roots.softmax_priors(base + node, nullptr);
      edges = &roots.edges_[(base + node) * A];
      const double unvisited = completed_sigma(edges, A, nullptr, roots.nodes_[base + node].raw_value,
                                               through.value_sum / through.visits, discount, tree_normalize,
                                               minmax.value_delta_max_, c_visit, c_scale, scores, &top);
      const double shared = std::exp(unvisited - top);  // the unvisited children's exp, taken once
      double total = 0.0;
      for (int a = 0; a < A; ++a) {
        scores[a] = edges[a].prior * (edges[a].visits > 0 ? std::exp(scores[a] - top) : shared);
        total += scores[a];
      }
      const double per_weight = 1.0 / total;
      const double per_visit = 1.0 / through.visits;  // 1 / (1 + the sum of the children's visits)
      best = -kInf;
      best_action = 0;
      for (int a = 0; a < A; ++a) {
        scores[a] = scores[a] * per_weight - edges[a].visits * per_visit;
        if (scores[a] > best) {
          best = scores[a];
          best_action = a;
        }
      }
      action = roots.select(scores, best_action, best);
      path_node[len] = node;
      path_action[len] = action;
      ++len;
    }
    results.path_len_[b] = len;
    parent_index[b] = roots.nodes_[base + node].latent;
    batch_index[b] = b;
    last_action[b] = action;
  }
  end_traverse(roots, results);
}

void gumbel_outputs(Roots& roots, double c_visit, double c_scale, double discount,
                    MinMaxStatsList& minmax, int64_t* actions, double* policy) {
  const int B = roots.num_roots_, A = roots.num_actions_, M = roots.max_nodes_;
  check_gumbel_constants(c_visit, c_scale);
  check_discount(discount);
  if (!roots.is_gumbel()) {
    throw std::invalid_argument("gumbel_outputs needs roots prepared with gumbel noise");
  }
  minmax.bind(roots, discount);
  double* scores = roots.scores_.data();
  for (int b = 0; b < B; ++b) {
    const int64_t base = static_cast<int64_t>(b) * M;
    const uint8_t* legal = &roots.legal_[static_cast<size_t>(b) * A];
    const Edge* edges = &roots.edges_[base * A];
    const double* g = &roots.gumbel_noise_[static_cast<size_t>(b) * A];
    const double* logits = &roots.root_logits_[static_cast<size_t>(b) * A];
    double* pi = policy + static_cast<int64_t>(b) * A;
    const Normalizer by_tree(minmax, b);
    const Normalizer* tree_normalize = minmax.per_node_ ? nullptr : &by_tree;
    double top = 0.0;
    const double unvisited = completed_sigma(edges, A, legal, roots.nodes_[base].raw_value, roots.root_value(b),
                                             discount, tree_normalize, minmax.value_delta_max_, c_visit,
                                             c_scale, scores, &top);
    // improved policy: softmax over the legal actions of logits + sigma
    int most = 0;
    top = -kInf;
    for (int a = 0; a < A; ++a) {
      if (!legal[a]) continue;
      if (edges[a].visits == 0) scores[a] = unvisited;
      pi[a] = logits[a] + scores[a];
      if (pi[a] > top) top = pi[a];
      if (edges[a].visits > most) most = edges[a].visits;
    }
    double total = 0.0;
    for (int a = 0; a < A; ++a) {
      pi[a] = legal[a] ? std::exp(pi[a] - top) : 0.0;
      total += pi[a];
    }
    for (int a = 0; a < A; ++a) pi[a] = pi[a] / total;
    // the action: the best g + logits + sigma among the most visited (the last survivors)
    double best = -kInf;
    int best_action = 0;
    for (int a = 0; a < A; ++a) {
      if (!legal[a] || edges[a].visits != most) {
        scores[a] = -kInf;
        continue;
      }
      scores[a] = g[a] + logits[a] + scores[a];
      if (scores[a] > best) {
        best = scores[a];
        best_action = a;
      }
    }
    actions[b] = roots.select(scores, best_action, best);
  }
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
    roots.nodes_[g] = Node{value_prefix[b], value[b], new_index,
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
