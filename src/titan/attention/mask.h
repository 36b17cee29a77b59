#pragma once
// Attention mask rules: which keys each query sees, as small rules that compose with & and |.
// A rule is never stored as a [seq, seq] matrix: BlockMask asks it how much of each tile of
// (query, key) pairs it shows, and splash attention asks it for the pairs of a tile only when
// the tile is partly visible.
//
// Positions are token indices within one row of the batch; query q sees key k when the rule
// holds. Every rule below lets a query see itself, and so does every composition of them: no
// query is ever left without keys.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/graph/ir/program.h"

namespace titan::attention {

// How much of a tile of (query, key) pairs a rule shows.
enum class Visibility : uint8_t { none, partial, full };

class Mask;

// A rule written as the & of causal, at most one sliding window, one chunking and document ids
// (each left out where absent): the form a custom call carries as attributes and an operand.
struct MaskTerms {
  bool causal = false;
  int64_t window_left = -1, window_right = -1;  // -1: no window
  int64_t chunk = 0;                            // 0: no chunking
  Tensor document_ids = {};                     // undefined: no documents
  // The rule these terms write; refused when there are none.
  Mask rule() const;
};

class Mask {
 public:
  // k <= q.
  static Mask causal();
  // q - left <= k <= q + right: the `left` keys before the query, the query itself and the
  // `right` keys after it (right = 0: causal within the window).
  static Mask sliding_window(int64_t left, int64_t right = 0);
  // Every query sees every key of a `seq`-token sequence (no mask): the window that reaches the
  // whole sequence both ways, so that it takes the rule form splash's tiles, ring attention and
  // graph mode's custom call carry.
  static Mask every_pair(int64_t seq) { return sliding_window(seq, seq); }
  // k <= q and doc_ids[b, k] == doc_ids[b, q]: packed sequences attend causally within their own
  // document. doc_ids [B, S], i32 or i64, one id per token. In graph mode the ids are a value of the
  // step being captured: the rule cannot read them, so it classifies tiles by causality alone
  // (partial where causal shows any pair) and is evaluated inside the program (visible()).
  static Mask document(const Tensor& doc_ids);
  // k <= q or k < prefix_lengths[b]: the first p tokens of row b see one another both ways (a
  // bidirectional prefix), the rest is causal. One length per batch row, or one for all rows.
  static Mask prefix_lm(std::vector<int64_t> prefix_lengths);
  // k <= q and k / chunk == q / chunk: causal within consecutive chunks of `chunk` tokens.
  static Mask chunked_causal(int64_t chunk);
  // `rule` seen from rows that hold tokens out of order: query row i is the token at position
  // q_positions[i] of the sequence the rule is written for, key row j the one at k_positions[j]
  // (context parallelism: a rank holds two chunks of the sequence and visits other ranks' keys).
  // Both lists have one entry per row, the same number, which is the new rule's seq; a tile is
  // classified by cutting it into runs of consecutive positions and asking `rule` of each.
  static Mask at_positions(const Mask& rule, std::vector<int64_t> q_positions,
                           std::vector<int64_t> k_positions);

  // Visible where both rules show a pair / where either does.
  friend Mask operator&(const Mask& a, const Mask& b);
  friend Mask operator|(const Mask& a, const Mask& b);

  // How much of queries [q0, q1) x keys [k0, k1) of batch row b the rule shows. Exact for each
  // rule above; for a composition it may say `partial` of a tile that is in fact empty or full
  // (BlockMask settles those with fill).
  Visibility classify(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1) const;
  // out[(q - q0) * (k1 - k0) + (k - k0)] = 1 where query q sees key k, else 0.
  void fill(int64_t b, int64_t q0, int64_t q1, int64_t k0, int64_t k1, uint8_t* out) const;

  // Graph mode: which pairs of queries at positions q_pos [nq] and keys at k_pos [nk] (i64 values
  // of the program being captured) the rule shows, as a predicate [rows, nq, nk], rows being
  // batch() or 1 for a rule the same for every row. Rules without a lowering are refused by name.
  graph::Value visible(const graph::Value& q_pos, const graph::Value& k_pos) const;
  // Whether the rule holds values of the step being captured (document ids in graph mode): then
  // fill() cannot run, and only the program knows which pairs a partial tile shows.
  bool lazy() const;

  // The rule as MaskTerms, or nullopt for a rule outside that form (|, prefix_lm, at_positions,
  // two windows or chunkings, document ids read from the host).
  std::optional<MaskTerms> terms() const;

  // Batch rows the rule holds data for (document ids, per-row prefix lengths); 0 when it is the
  // same for every row.
  int64_t batch() const;
  // The sequence length the rule is tied to (document ids); 0 when it fits any length.
  int64_t seq() const;
  // The rule as written, e.g. "causal & document(ids [2, 512])", for messages.
  std::string describe() const;

  // A rule's implementation (mask.cpp); public so that the rules there can derive from it.
  class Node;

 private:
  explicit Mask(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  std::shared_ptr<const Node> node_;
};

}  // namespace titan::attention
