// model/batch.h: a micro-step's inputs, targets, document ids, kept targets, stream index and kept pairs.
#include "model/batch.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "attention/mask.h"

namespace model {

void Batch::build(const std::vector<int>& inputs, const std::vector<int>& next, const MaskConfig& mask, uint64_t sequence_) {
  const int n = (int)inputs.size();
  if ((int)next.size() != n) throw std::invalid_argument("Batch: want as many targets as inputs");
  int max_id = 0;
  for (int t : inputs) {
    if (t < 0) throw std::invalid_argument("Batch: negative token id " + std::to_string(t));
    max_id = std::max(max_id, t);
  }
  tokens = inputs;
  targets = next;
  token_index = layers::TokenIndex(tokens.data(), n, max_id + 1);
  sequence = sequence_;
  window = mask.window;
  doc_ids.resize(n);
  attn::doc_ids_from_tokens(tokens.data(), n, doc_ids.data(), mask.bos);
  kept_pairs = attn::kept_pairs(attn::make_bounds(attention_mask(mask, window, doc_ids.data()), n));
  kept_targets = n;
  for_each_dropped_target(n, [&](int i) { return tokens[i]; }, [&](int i) { return next[i]; }, mask, [&](int i) {
    targets[i] = kIgnoreTarget;
    kept_targets--;
  });
}

void Batch::build(const uint16_t* seq, const MaskConfig& mask, uint64_t sequence_) {
  const int n = T();
  std::vector<int> in(seq, seq + n), nx(seq + 1, seq + n + 1);
  build(in, nx, mask, sequence_);
}

}  // namespace model
