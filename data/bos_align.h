// BOS-aligned training sequences (the recipe key batch.align_to_bos; docs/recipes.md, the
// SparseAttnGate record's section), host only: which tokens of one shard each step's sequences
// start at, as that record's loader picks them.
//
// A step of S sequences of seq_len tokens looks at the window [pos, pos + 2 S seq_len) of the
// shard. Before the step, when pos + 2 S seq_len + 1 >= n (the shard's tokens), the shard is
// done: its tail is dropped and the next shard starts at its token 0. Otherwise the step's
// sequences are a chain over the BOS tokens (shard::kBos) inside the window: the first starts
// at the window's first BOS; each ends at the first BOS inside the window at least seq_len
// tokens after its start, where the next starts; the sequence reads the seq_len + 1 tokens from
// its start, and the tokens after them up to its end are skipped. pos moves to the last end. A
// window whose BOS tokens cannot give S such sequences stops the loader (the record asserts).
// The chain is the same whether one rank takes all S sequences or S ranks one each.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/shard.h"

namespace data {

// The starts of every step's sequences that the shard tokens[0 .. n) gives, from position 0:
// (*steps)[s][i] is the first token of step s's i-th sequence. Returns false, with *why naming
// the step and the window, when a window holds too few BOS tokens for its S sequences.
inline bool bos_aligned_steps(const uint16_t* tokens, size_t n, int seq_len, int seqs_per_step, std::vector<std::vector<size_t>>* steps,
                              std::string* why) {
  steps->clear();
  const size_t window = 2 * (size_t)seqs_per_step * (size_t)seq_len;
  size_t pos = 0;
  while (pos + window + 1 < n) {
    std::vector<size_t> starts;
    size_t start = SIZE_MAX;
    for (size_t i = pos; i < pos + window && (int)starts.size() < seqs_per_step; i++) {
      if (tokens[i] != shard::kBos) continue;
      if (start == SIZE_MAX) {
        start = i;
      } else if (i - start >= (size_t)seq_len) {
        starts.push_back(start);
        start = i;
      }
    }
    if ((int)starts.size() < seqs_per_step) {
      *why = "step " + std::to_string(steps->size()) + ": the window [" + std::to_string(pos) + ", " + std::to_string(pos + window) +
             ") holds BOS tokens for " + std::to_string(starts.size()) + " of its " + std::to_string(seqs_per_step) + " sequences";
      return false;
    }
    pos = start;  // the last sequence's end, where the chain would go on
    steps->push_back(starts);
  }
  return true;
}

}  // namespace data
