#include "titan/attention/mask.h"

#include <algorithm>
#include <sstream>

#include "titan/core/error.h"
#include "titan/graph/lazy.h"

namespace titan::attention {

class Mask::Node {
 public:
  Node(int64_t batch, int64_t seq) : batch(batch), seq(seq) {}
  virtual ~Node() = default;
  virtual Visibility classify(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1) const = 0;
  virtual void fill(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1, uint8_t* out) const = 0;
  virtual std::string describe() const = 0;
  virtual graph::Value visible(const graph::Value&, const graph::Value&) const {
    TITAN_CHECK(false, "graph mode: the mask rule ", describe(),
                " has no lowering to StableHLO (causal, sliding_window, chunked_causal, document, prefix_lm "
                "and their & and | have); run this step eagerly (compile.enable = false) or lower the rule in "
                "mask.cpp");
    return {};
  }
  virtual bool lazy() const { return false; }
  // Adds this rule to `terms` (Mask::terms); false where it does not fit them.
  virtual bool add_to(MaskTerms&) const { return false; }

  const int64_t batch, seq;
};

namespace {

using Node = Mask::Node;
using graph::Value;
namespace hlo = graph::hlo;

// Query and key positions [nq], [nk] as two [1, nq, nk] grids, for rules written pair by pair.
struct Grid {
  Value q = {}, k = {};
};
Grid grid(const Value& q_pos, const Value& k_pos) {
  const Shape pairs{1, q_pos.shape.at(0), k_pos.shape.at(0)};
  return {hlo::broadcast_in_dim(q_pos, pairs, {1}), hlo::broadcast_in_dim(k_pos, pairs, {2})};
}
Value causal_pairs(const Grid& g) {
  return hlo::compare(g.k, g.q, "LE");
}
// lo <= k <= hi.
Value within(const Value& k, const Value& lo, const Value& hi) {
  return hlo::logical_and(hlo::compare(k, lo, "GE"), hlo::compare(k, hi, "LE"));
}

// Rules under which query q sees one run of keys [lo(q), hi(q)] that contains q, with lo and hi
// non-decreasing in q. Then a tile is full when its last query's run starts at or before the
// tile's first key and its first query's run ends at or after its last key, and empty when its
// last query's run ends before the first key or its first query's run starts after the last key:
// a run cannot step over the tile, because it holds its query and moves right with it.
class Interval : public Node {
 public:
  using Node::Node;
  struct Run {
    int64_t lo, hi;
  };
  virtual Run keys(int64_t b, int64_t q) const = 0;

  Visibility classify(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1) const override {
    const Run first = keys(b, q0), last = keys(b, q1 - 1);
    if (last.hi < k0 || first.lo > k1 - 1) return Visibility::none;
    if (last.lo <= k0 && first.hi >= k1 - 1) return Visibility::full;
    return Visibility::partial;
  }

  void fill(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1, uint8_t* out) const override {
    const int64_t n = k1 - k0;
    for (int64_t q = q0; q < q1; ++q, out += n) {
      const Run r = keys(b, q);
      const int64_t lo = r.lo - k0, hi = r.hi - k0;
      for (int64_t j = 0; j < n; ++j) out[j] = j >= lo && j <= hi;
    }
  }
};

class Causal final : public Interval {
 public:
  Causal() : Interval(0, 0) {}
  Run keys(int64_t, int64_t q) const override { return {0, q}; }
  std::string describe() const override { return "causal"; }
  bool add_to(MaskTerms& t) const override {
    t.causal = true;
    return true;
  }
  Value visible(const Value& q_pos, const Value& k_pos) const override {
    return causal_pairs(grid(q_pos, k_pos));
  }
};

class SlidingWindow final : public Interval {
 public:
  SlidingWindow(int64_t left, int64_t right) : Interval(0, 0), left_(left), right_(right) {}
  Run keys(int64_t, int64_t q) const override { return {q - left_, q + right_}; }
  Value visible(const Value& q_pos, const Value& k_pos) const override {
    const Grid g = grid(q_pos, k_pos);
    return within(g.k, hlo::add(g.q, static_cast<double>(-left_)),
                  hlo::add(g.q, static_cast<double>(right_)));
  }
  bool add_to(MaskTerms& t) const override {
    if (t.window_left >= 0) return false;
    t.window_left = left_;
    t.window_right = right_;
    return true;
  }
  std::string describe() const override {
    return "sliding_window(" + std::to_string(left_) + ", " + std::to_string(right_) + ")";
  }

 private:
  int64_t left_, right_;
};

class ChunkedCausal final : public Interval {
 public:
  explicit ChunkedCausal(int64_t chunk) : Interval(0, 0), chunk_(chunk) {}
  Run keys(int64_t, int64_t q) const override { return {q - q % chunk_, q}; }
  Value visible(const Value& q_pos, const Value& k_pos) const override {
    const Grid g = grid(q_pos, k_pos);
    // Positions are >= 0, so integer division truncates to the chunk's start.
    const Value chunk = hlo::constant(static_cast<double>(chunk_), g.q.shape, g.q.dtype);
    return within(g.k, hlo::mul(hlo::div(g.q, chunk), chunk), g.q);
  }
  std::string describe() const override { return "chunked_causal(" + std::to_string(chunk_) + ")"; }
  bool add_to(MaskTerms& t) const override {
    if (t.chunk > 0) return false;
    t.chunk = chunk_;
    return true;
  }

 private:
  int64_t chunk_;
};

class PrefixLm final : public Interval {
 public:
  explicit PrefixLm(std::vector<int64_t> lengths)
      : Interval(lengths.size() > 1 ? static_cast<int64_t>(lengths.size()) : 0, 0),
        lengths_(std::move(lengths)) {}
  Run keys(int64_t b, int64_t q) const override {
    return {0, std::max(q, lengths_[lengths_.size() > 1 ? b : 0] - 1)};
  }
  // The lengths are the rule's, so they are fixed into the program: a step with other prefixes is
  // another program, compiled once for them.
  Value visible(const Value& q_pos, const Value& k_pos) const override {
    const Grid g = grid(q_pos, k_pos);
    const Shape pairs{static_cast<int64_t>(lengths_.size()), g.q.shape[1], g.q.shape[2]};
    const Value in_prefix = hlo::compare(hlo::broadcast_in_dim(k_pos, pairs, {2}),
                                         hlo::broadcast_in_dim(hlo::constant_i64(lengths_), pairs, {0}), "LT");
    return hlo::logical_or(hlo::broadcast_in_dim(causal_pairs(g), pairs, {0, 1, 2}), in_prefix);
  }
  std::string describe() const override {
    std::ostringstream os;
    os << "prefix_lm(";
    for (size_t i = 0; i < lengths_.size(); ++i) os << (i ? ", " : "") << lengths_[i];
    os << ")";
    return os.str();
  }

 private:
  std::vector<int64_t> lengths_;
};

class Document final : public Node {
 public:
  Document(std::vector<int64_t> ids, int64_t batch, int64_t seq) : Node(batch, seq), ids_(std::move(ids)) {}
  // Ids that are a value of the step being captured (graph mode).
  explicit Document(Tensor lazy_ids)
      : Node(lazy_ids.size(0), lazy_ids.size(1)), lazy_ids_(std::move(lazy_ids)) {}

  Visibility classify(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1) const override {
    const Visibility order = causal_.classify(b, q0, q1, k0, k1);
    if (order == Visibility::none) return order;
    if (lazy()) return Visibility::partial;  // the ids exist only once the captured step runs
    const int64_t* row = ids_.data() + b * seq;
    const auto [qmin, qmax] = std::minmax_element(row + q0, row + q1);
    const auto [kmin, kmax] = std::minmax_element(row + k0, row + k1);
    if (*qmax < *kmin || *kmax < *qmin) return Visibility::none;
    const bool one_document = *qmin == *qmax && *kmin == *kmax && *qmin == *kmin;
    return order == Visibility::full && one_document ? Visibility::full : Visibility::partial;
  }

  void fill(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1, uint8_t* out) const override {
    TITAN_CHECK(!lazy(), "Mask::fill: ", describe(),
                " holds document ids of the step being captured (graph mode), whose values exist only "
                "inside the compiled step; attention in graph mode evaluates the rule there");
    const int64_t n = k1 - k0;
    const int64_t* keys = ids_.data() + b * seq + k0;
    for (int64_t q = q0; q < q1; ++q, out += n) {
      const int64_t id = ids_[b * seq + q], last = q - k0;
      for (int64_t j = 0; j < n; ++j) out[j] = j <= last && keys[j] == id;
    }
  }

  std::string describe() const override {
    return "document(ids [" + std::to_string(batch) + ", " + std::to_string(seq) + "])";
  }

  Value visible(const Value& q_pos, const Value& k_pos) const override {
    TITAN_CHECK(lazy(), "graph mode: ", describe(),
                " was built from host ids, which would be fixed into the compiled step; build the mask "
                "from the step's document ids (an input of the captured step)");
    const Value ids =
        hlo::transpose(hlo::convert(graph::value_of(lazy_ids_, "Mask::document"), kI64), {1, 0});
    const Shape pairs{batch, q_pos.shape.at(0), k_pos.shape.at(0)};
    // take_rows gives [n, batch]: each position's id in every row.
    auto ids_at = [&](const Value& pos, int64_t dim) {
      return hlo::broadcast_in_dim(hlo::take_rows(ids, pos), pairs, {dim, 0});
    };
    const Value same = hlo::compare(ids_at(q_pos, 1), ids_at(k_pos, 2), "EQ");
    return hlo::logical_and(same, hlo::broadcast_in_dim(causal_.visible(q_pos, k_pos), pairs, {0, 1, 2}));
  }
  bool lazy() const override { return lazy_ids_.defined(); }
  // Lazy ids only: host ids would have to be fixed into the program.
  bool add_to(MaskTerms& t) const override {
    if (!lazy() || t.document_ids.defined()) return false;
    t.document_ids = lazy_ids_;
    return true;
  }

 private:
  std::vector<int64_t> ids_;  // [batch, seq]; empty when the ids are lazy
  Tensor lazy_ids_ = {};
  Causal causal_;
};

// A rule over positions, read through a map from rows to positions (Mask::at_positions).
class Positioned final : public Node {
 public:
  Positioned(std::shared_ptr<const Node> rule, std::vector<int64_t> qpos, std::vector<int64_t> kpos)
      : Node(rule->batch, static_cast<int64_t>(qpos.size())),
        rule_(std::move(rule)),
        qpos_(std::move(qpos)),
        kpos_(std::move(kpos)),
        qrun_(run_ends(qpos_)),
        krun_(run_ends(kpos_)) {}

  Visibility classify(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1) const override {
    bool any = false, all = true;
    for_each_piece(q0, q1, k0, k1, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
      const Visibility v =
          rule_->classify(b, qpos_[i0], qpos_[i0] + (i1 - i0), kpos_[j0], kpos_[j0] + (j1 - j0));
      any = any || v != Visibility::none;
      all = all && v == Visibility::full;
    });
    return all ? Visibility::full : any ? Visibility::partial : Visibility::none;
  }

  void fill(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1, uint8_t* out) const override {
    const int64_t n = k1 - k0;
    std::vector<uint8_t> piece;
    for_each_piece(q0, q1, k0, k1, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
      piece.resize(static_cast<size_t>((i1 - i0) * (j1 - j0)));
      rule_->fill(b, qpos_[i0], qpos_[i0] + (i1 - i0), kpos_[j0], kpos_[j0] + (j1 - j0), piece.data());
      for (int64_t i = i0; i < i1; ++i)
        std::copy_n(piece.data() + (i - i0) * (j1 - j0), j1 - j0, out + (i - q0) * n + (j0 - k0));
    });
  }

  std::string describe() const override {
    return rule_->describe() + " at positions of " + std::to_string(seq) + " rows";
  }
  bool lazy() const override { return rule_->lazy(); }

 private:
  // ends[i]: the end of the run of consecutive positions that holds row i.
  static std::vector<int64_t> run_ends(const std::vector<int64_t>& pos) {
    std::vector<int64_t> ends(pos.size());
    for (auto i = static_cast<int64_t>(pos.size()) - 1; i >= 0; --i)
      ends[i] = i + 1 < static_cast<int64_t>(pos.size()) && pos[i + 1] == pos[i] + 1 ? ends[i + 1] : i + 1;
    return ends;
  }

  // Calls f(i0, i1, j0, j1) for each rectangle of rows [i0, i1) x [j0, j1) of the tile whose
  // positions are consecutive both ways.
  template <typename F>
  void for_each_piece(int64_t q0, int64_t q1, int64_t k0, int64_t k1, const F& f) const {
    for (int64_t i0 = q0; i0 < q1;) {
      const int64_t i1 = std::min(q1, qrun_[i0]);
      for (int64_t j0 = k0; j0 < k1;) {
        const int64_t j1 = std::min(k1, krun_[j0]);
        f(i0, i1, j0, j1);
        j0 = j1;
      }
      i0 = i1;
    }
  }

  std::shared_ptr<const Node> rule_;
  std::vector<int64_t> qpos_, kpos_, qrun_, krun_;
};

// A size two rules must agree on; 0 means "any".
int64_t agree(const char* what, int64_t a, int64_t b, const Node& x, const Node& y) {
  TITAN_CHECK(a == 0 || b == 0 || a == b, "Mask: cannot combine ", x.describe(), " and ", y.describe(),
              ": they are for different ", what, " (", a, " and ", b, ")");
  return std::max(a, b);
}

// All parts (&) or any part (|). Nested compositions of the same kind are flattened.
class Compose final : public Node {
 public:
  Compose(bool all, std::vector<std::shared_ptr<const Node>> parts, int64_t batch, int64_t seq)
      : Node(batch, seq), all_(all), parts_(std::move(parts)) {}

  static std::shared_ptr<const Node> make(bool all, const std::shared_ptr<const Node>& a,
                                          const std::shared_ptr<const Node>& b) {
    const int64_t batch = agree("batch sizes", a->batch, b->batch, *a, *b);
    const int64_t seq = agree("sequence lengths", a->seq, b->seq, *a, *b);
    std::vector<std::shared_ptr<const Node>> parts;
    for (const auto& n : {a, b}) {
      const auto* c = dynamic_cast<const Compose*>(n.get());
      if (c && c->all_ == all)
        parts.insert(parts.end(), c->parts_.begin(), c->parts_.end());
      else
        parts.push_back(n);
    }
    return std::make_shared<Compose>(all, std::move(parts), batch, seq);
  }

  Visibility classify(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1) const override {
    // & is empty if any part is and full only if all are; | the other way round.
    const Visibility decides = all_ ? Visibility::none : Visibility::full;
    bool uniform = true;
    for (const auto& p : parts_) {
      const Visibility v = p->classify(b, q0, q1, k0, k1);
      if (v == decides) return v;
      uniform = uniform && v != Visibility::partial;
    }
    if (!uniform) return Visibility::partial;
    return all_ ? Visibility::full : Visibility::none;
  }

  void fill(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1, uint8_t* out) const override {
    const int64_t n = (q1 - q0) * (k1 - k0);
    parts_[0]->fill(b, q0, q1, k0, k1, out);
    std::vector<uint8_t> part(static_cast<size_t>(n));
    for (size_t i = 1; i < parts_.size(); ++i) {
      parts_[i]->fill(b, q0, q1, k0, k1, part.data());
      if (all_)
        for (int64_t j = 0; j < n; ++j) out[j] &= part[j];
      else
        for (int64_t j = 0; j < n; ++j) out[j] |= part[j];
    }
  }

  Value visible(const Value& q_pos, const Value& k_pos) const override {
    std::vector<Value> seen;
    int64_t rows = 1;
    for (const auto& p : parts_) {
      seen.push_back(p->visible(q_pos, k_pos));
      rows = std::max(rows, seen.back().shape[0]);
    }
    const Shape pairs{rows, q_pos.shape.at(0), k_pos.shape.at(0)};
    Value out = hlo::broadcast_in_dim(seen[0], pairs, {0, 1, 2});
    for (size_t i = 1; i < seen.size(); ++i) {
      const Value part = hlo::broadcast_in_dim(seen[i], pairs, {0, 1, 2});
      out = all_ ? hlo::logical_and(out, part) : hlo::logical_or(out, part);
    }
    return out;
  }
  bool lazy() const override {
    return std::any_of(parts_.begin(), parts_.end(), [](const auto& p) { return p->lazy(); });
  }
  bool add_to(MaskTerms& t) const override {
    return all_ && std::all_of(parts_.begin(), parts_.end(), [&](const auto& p) { return p->add_to(t); });
  }

  std::string describe() const override {
    std::ostringstream os;
    for (size_t i = 0; i < parts_.size(); ++i) {
      if (i) os << (all_ ? " & " : " | ");
      if (dynamic_cast<const Compose*>(parts_[i].get()))
        os << "(" << parts_[i]->describe() << ")";
      else
        os << parts_[i]->describe();
    }
    return os.str();
  }

 private:
  bool all_;
  std::vector<std::shared_ptr<const Node>> parts_;
};

}  // namespace

Mask Mask::causal() {
  return Mask(std::make_shared<Causal>());
}

Mask Mask::sliding_window(int64_t left, int64_t right) {
  TITAN_CHECK(left >= 0 && right >= 0,
              "Mask::sliding_window: left and right must be >= 0 (keys before and after ",
              "the query), got left = ", left, ", right = ", right);
  return Mask(std::make_shared<SlidingWindow>(left, right));
}

Mask Mask::document(const Tensor& doc_ids) {
  TITAN_CHECK(doc_ids.defined() && doc_ids.dim() == 2 && (doc_ids.dtype() == kI32 || doc_ids.dtype() == kI64),
              "Mask::document: expected document ids [batch, seq] of i32 or i64, got ",
              doc_ids.defined() ? doc_ids.desc() : std::string("an undefined tensor"));
  if (doc_ids.is_lazy()) return Mask(std::make_shared<Document>(doc_ids));
  check_cpu("Mask::document", doc_ids);
  const Tensor ids = doc_ids.contiguous().to(kI64);
  const int64_t* p = ids.data<int64_t>();
  return Mask(std::make_shared<Document>(std::vector<int64_t>(p, p + ids.numel()), ids.size(0), ids.size(1)));
}

Mask Mask::prefix_lm(std::vector<int64_t> prefix_lengths) {
  TITAN_CHECK(!prefix_lengths.empty(),
              "Mask::prefix_lm: give one prefix length per batch row, or one for all");
  for (int64_t p : prefix_lengths)
    TITAN_CHECK(p >= 0, "Mask::prefix_lm: prefix lengths must be >= 0, got ", p);
  return Mask(std::make_shared<PrefixLm>(std::move(prefix_lengths)));
}

Mask Mask::chunked_causal(int64_t chunk) {
  TITAN_CHECK(chunk >= 1, "Mask::chunked_causal: chunk must be >= 1 token, got ", chunk);
  return Mask(std::make_shared<ChunkedCausal>(chunk));
}

Mask Mask::at_positions(const Mask& rule, std::vector<int64_t> q_positions,
                        std::vector<int64_t> k_positions) {
  TITAN_CHECK(
      !q_positions.empty() && q_positions.size() == k_positions.size(),
      "Mask::at_positions: expected one position per query row and per key row, as many of each, got ",
      q_positions.size(), " query and ", k_positions.size(), " key positions");
  const int64_t seq = rule.seq();
  for (const auto* list : {&q_positions, &k_positions})
    for (int64_t p : *list)
      TITAN_CHECK(p >= 0 && (seq == 0 || p < seq), "Mask::at_positions: position ", p, " is outside ",
                  seq == 0 ? std::string("[0, inf)") : "[0, " + std::to_string(seq) + ")", " of ",
                  rule.describe(), "; positions index the sequence the rule is written for");
  return Mask(std::make_shared<Positioned>(rule.node_, std::move(q_positions), std::move(k_positions)));
}

Mask operator&(const Mask& a, const Mask& b) {
  return Mask(Compose::make(true, a.node_, b.node_));
}
Mask operator|(const Mask& a, const Mask& b) {
  return Mask(Compose::make(false, a.node_, b.node_));
}

Mask MaskTerms::rule() const {
  std::optional<Mask> rule;
  auto add = [&](const Mask& m) { rule = rule ? *rule & m : m; };
  if (causal) add(Mask::causal());
  if (window_left >= 0) add(Mask::sliding_window(window_left, window_right));
  if (chunk > 0) add(Mask::chunked_causal(chunk));
  if (document_ids.defined()) add(Mask::document(document_ids));
  TITAN_CHECK(rule.has_value(), "MaskTerms::rule: no terms (causal, window, chunk or documents) are set; ",
              "a rule needs at least one");
  return *rule;
}

std::optional<MaskTerms> Mask::terms() const {
  MaskTerms t;
  if (!node_->add_to(t)) return std::nullopt;
  return t;
}

Visibility Mask::classify(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1) const {
  return node_->classify(b, q0, q1, k0, k1);
}

void Mask::fill(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1, uint8_t* out) const {
  node_->fill(b, q0, q1, k0, k1, out);
}

int64_t Mask::batch() const {
  return node_->batch;
}
int64_t Mask::seq() const {
  return node_->seq;
}
std::string Mask::describe() const {
  return node_->describe();
}
graph::Value Mask::visible(const graph::Value& q_pos, const graph::Value& k_pos) const {
  return node_->visible(q_pos, k_pos);
}
bool Mask::lazy() const {
  return node_->lazy();
}

}  // namespace titan::attention
