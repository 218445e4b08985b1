// The mean losses train_gpt reports, and the start-up check that a run has targets to score.
//
// The training loss of a step and the validation loss are means of per-sequence mean losses. A
// sequence that keeps no target (with --prefix-tokens P, one whose documents all fit inside their
// prefixes) has no loss: it adds nothing to the sum and is not counted, so it cannot pull the mean
// toward 0. When every sequence keeps a target the mean is the plain one, summed in the same order.
#pragma once
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "data/dataloader.h"
#include "model/batch.h"

namespace train {

struct LossMean {
  // the sum of the losses of the sequences that keep a target, and their number (an array, to be
  // summed over ranks as it is)
  double parts[2] = {0, 0};

  void add(double loss, int kept_targets) {
    if (kept_targets > 0) parts[0] += loss, parts[1] += 1;
  }
  // losses[i] is the mean loss of the sequence that kept kept[i] targets
  void add(const std::vector<double>& losses, const std::vector<int>& kept) {
    if (losses.size() != kept.size())
      throw std::logic_error("LossMean: " + std::to_string(losses.size()) + " losses for " + std::to_string(kept.size()) + " sequences");
    for (size_t i = 0; i < losses.size(); i++) add(losses[i], kept[i]);
  }
  bool empty() const { return parts[1] == 0; }
  double mean() const { return parts[1] > 0 ? parts[0] / parts[1] : NAN; }  // NaN: no sequence kept a target
};

// The first of sequences [begin, end) of stream s that keeps a target under mask, or end when none
// does. Without a prefix every target is kept and the answer is begin, read from nothing.
inline uint64_t first_sequence_keeping_targets(data::TokenStream& s, uint64_t begin, uint64_t end, const model::MaskConfig& mask) {
  if (mask.prefix <= 0 || begin >= end) return begin;
  std::vector<uint16_t> seq((size_t)s.seq_len() + 1);
  for (uint64_t k = begin; k < end; k++) {
    s.sequence(k, seq.data());
    if (model::kept_targets(seq.data(), s.seq_len(), mask) > 0) return k;
  }
  return end;
}

}  // namespace train
