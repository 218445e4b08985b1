// Whether a mask lets a prediction see its own target (docs/masks.md, "Targets the mask shows").
//
// Position t predicts the token at t + 1 (model/batch.h). When the attention lets query t keep
// key t + 1 and the loss keeps that target, the model can copy its answer and the loss measures
// nothing. The decision is made on the host from the mask's terms alone, before any GPU work:
// every pair (t, t + 1) of a sequence of T positions is put to the mask's own predicate
// (attention/mask.h keep) at every window the run uses, and to the loss's own rule
// (for_each_dropped_target), on a sequence that is one document.
//
// Why pairs (t, t + 1) decide it for every depth: the keys a query keeps are one interval
// containing the query, with ends that never decrease (mask.h, facts 1 and 2). If query t keeps
// no key past t, no key j <= t it keeps does either (hi(j) <= hi(t) <= t), so no layer brings
// t + 1 to t; and if it keeps some key past t, the interval holds t + 1 itself.
//
// Why one document decides it for every layout of documents: a pair (t, t + 1) in two documents
// is never kept (the document term), and within one document the terms depend on t's place in
// its document (the prefix) and in its block of 128 (block windows). With causal on, t + 1 > t is
// kept only by the prefix, k - start(t) < P, which is exactly when the loss rule drops target
// t + 1: no layout leaks. With causal off the trainer has no prefix (it refuses one) and drops no
// target, and a sequence of one document keeps every pair any layout keeps.
// tests/test_target_leak.cpp checks the decision against the attention reference's mask and the
// fp64 reference model's own answer on every mask the flags allow.
#pragma once
#include <string>
#include <vector>

#include "attention/mask.h"
#include "model/batch.h"
#include "model/config.h"

namespace model {

struct TargetLeak {
  bool leaks = false;
  int query = -1;   // the first query t that keeps key t + 1 with target t + 1 counted (-1: none)
  int window = 0;   // the window at which it does (MaskConfig::window's units)
};

// The first leak of `mask` (its window field ignored) on T positions over the windows given
// (each a MaskConfig::window value; 0: no window term). Cost: O(T) a window.
inline TargetLeak find_target_leak(const MaskConfig& mask, int T, const std::vector<int>& windows) {
  TargetLeak found;
  if (T < 2) return found;  // no position has a next one inside the sequence
  const int not_bos = mask.bos == 0 ? 1 : 0;
  std::vector<char> counted(T, 1);
  for_each_dropped_target(T, [&](int) { return not_bos; }, [&](int) { return not_bos; }, mask, [&](int i) { counted[i] = 0; });
  const std::vector<int32_t> doc(T, 0);  // one document
  for (int w : windows) {
    const attn::MaskBounds b = attn::make_bounds(attention_mask(mask, w, doc.data()), T);
    for (int t = 0; t + 1 < T; t++)
      if (counted[t] && attn::keep(b, t, t + 1)) return TargetLeak{true, t, w};
  }
  return found;
}

}  // namespace model
