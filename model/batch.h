// One micro-step's sequence as the model consumes it, built once from its tokens: the inputs,
// the targets, the document ids, the number of targets the loss counts, where the sequence came
// from and how many attention pairs its mask keeps.
//
//   tokens[i]  = input at position i                       (T of them)
//   targets[i] = the token at position i + 1, or kIgnoreTarget where the prefix-LM rule drops it
//   doc_ids[i] = number of BOS tokens at positions <= i   (attention/mask.h doc_ids_from_tokens;
//                the one place document ids are computed)
//   token_index = the positions of each distinct token, grouped and chunked (layers/token_index.h),
//                for the embeddings' backward
//   sequence   = the sequence's index in its stream (data/dataloader.h), for messages
//   window     = mask.window, the attention window of the step it was built for
//   kept_pairs = the (q, k) pairs the attention keeps at that window (attention/mask.h
//                kept_pairs: the sum of the rows' interval lengths), for the FLOP count
//
// The prefix-LM loss rule (docs/masks.md): with a prefix of P tokens the first P positions of
// each document see each other both ways, so a position there can see its own next token;
// predicting it would be copying. The prediction at position i is dropped when its target's
// position i + 1 lies in the first P positions of its document: the target is a BOS (a new
// document, offset 0), or i + 1 - start(i) < P, where start(i) is the first position of i's
// document in the sequence (0 without the document mask, where the sequence is one document).
// The rule applies whenever P > 0, also with the attention's prefix off (MaskConfig::
// prefix_attention), so that a causal baseline can be scored on exactly the same targets.
#pragma once
#include <cstdint>
#include <vector>

#include "attention/mask.h"
#include "layers/token_index.h"
#include "model/config.h"

namespace model {

constexpr int kIgnoreTarget = -1;  // layers/softcap_ce.cuh's: loss 0, gradient 0

struct Batch {
  std::vector<int> tokens, targets;
  std::vector<int32_t> doc_ids;
  int kept_targets = 0;      // targets not dropped
  layers::TokenIndex token_index;
  uint64_t sequence = 0;     // index in its stream
  int window = 0;            // the attention window it was built for (MaskConfig::window)
  long long kept_pairs = 0;  // attention pairs kept at that window

  Batch() = default;
  explicit Batch(int T) : tokens(T), targets(T), doc_ids(T) {}
  int T() const { return (int)tokens.size(); }

  // From inputs and next tokens given apart (targets[i]: the token after tokens[i]).
  void build(const std::vector<int>& inputs, const std::vector<int>& next, const MaskConfig& mask, uint64_t sequence = 0);
  // From T + 1 consecutive tokens of a stream: inputs seq[0, T), targets seq[1, T].
  void build(const uint16_t* seq, const MaskConfig& mask, uint64_t sequence = 0);
};

// The prefix-LM loss rule above on a sequence of n positions, inputs in(i) and next tokens next(i):
// calls drop(i) for each position whose target is dropped. The one place the rule is written.
template <class In, class Next, class Drop>
inline void for_each_dropped_target(int n, In in, Next next, const MaskConfig& mask, Drop drop) {
  if (mask.prefix <= 0) return;
  int start = 0;  // the first position of position i's document
  for (int i = 0; i < n; i++) {
    if (mask.documents && in(i) == mask.bos) start = i;
    const long long offset = mask.documents && next(i) == mask.bos ? 0 : (long long)i + 1 - start;
    if (offset < mask.prefix) drop(i);
  }
}

// Batch::kept_targets of a sequence of T + 1 stream tokens without building the batch (cheap:
// for checking that a stream keeps any target at all).
inline int kept_targets(const uint16_t* seq, int T, const MaskConfig& mask) {
  int kept = T;
  for_each_dropped_target(T, [&](int i) { return (int)seq[i]; }, [&](int i) { return (int)seq[i + 1]; }, mask, [&](int) { kept--; });
  return kept;
}

// The attention kernels' description of the mask at one step (its window), with the document
// ids at doc_ids (device or host memory, as the caller needs; unused without documents) and,
// for the kernels, their spans (attention.h doc_spans; device memory, optional).
inline attn::MaskDesc attention_mask(const MaskConfig& m, int window, const int32_t* doc_ids, const attn::DocSpan* doc_spans = nullptr) {
  attn::MaskDesc d;
  d.causal = m.causal;
  d.window = window;
  d.window_bidir = m.bidir;
  d.window_blocks = m.blocks;
  d.prefix = m.prefix_attention ? m.prefix : 0;
  d.doc_ids = m.documents ? doc_ids : nullptr;
  d.doc_spans = m.documents ? doc_spans : nullptr;
  return d;
}

}  // namespace model
