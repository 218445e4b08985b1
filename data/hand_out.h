// Which rank takes which of a step's sequences (--balance-ranks), host only: the hand-out of one
// step's work (window_pairs, balanced_hand_out) and the trainer's step by step (StepHandOut).
//
// The step waits for its slowest rank. The matmuls cost the same for every sequence, but the
// attention's work goes with the documents a sequence holds, so the default hand-out (rank r at
// micro-step m takes the step's sequence m * world + r: data/dataloader.h) leaves some ranks
// later than others. balanced_hand_out() gives each rank the same number of the step's sequences
// with their attention work as even as it can, counted by window_pairs() from the tokens alone,
// so that every rank computes the same hand-out, and both arms of a mask ablation get it too.
// It is off by default, and --balance-ranks turns it on (whether it pays: results/scaling/,
// "The ranks' attention work differs").
//
// window_pairs(tokens, n, W): the (q, kv) pairs a causal window of W tokens keeps inside the
//   documents of tokens[0 .. n) (a document starts at shard::kBos and at tokens[0]): for a
//   document of d tokens, sum over i < d of min(i + 1, W). A proxy for the kernels' work, which
//   skip whole tiles.
// balanced_hand_out(work, world): the step's S = work.size() sequences (world divides S) as
//   hand[m * world + r] = the index of the sequence rank r takes at micro-step m. Each rank's
//   sequences are in rising index order. With two sequences a rank, the largest is paired with the
//   smallest, and so on (which gives the least largest sum); otherwise, up to 16 sequences, a
//   branch and bound, the largest sequences first, finds the least largest sum, or the best split
//   it has found when kSearchNodes nodes cut it short;
//   beyond 16 each sequence, largest first, goes to the least loaded rank with room. Ties go to the lower rank and index, so the result
//   depends on the work alone. Where it would not beat the default hand-out's largest sum, the
//   default is kept; with one rank, or one sequence a rank, it is the default.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "data/dataloader.h"
#include "data/shard.h"

namespace data {

inline uint64_t window_pairs(const uint16_t* tokens, int n, int window) {
  uint64_t total = 0;
  auto document = [&](uint64_t d) {
    const uint64_t m = std::min<uint64_t>(d, (uint64_t)window);
    total += m * (m + 1) / 2 + (d - m) * (uint64_t)window;
  };
  int start = 0;
  for (int i = 1; i < n; i++)
    if (tokens[i] == shard::kBos) document((uint64_t)(i - start)), start = i;
  if (n > 0) document((uint64_t)(n - start));
  return total;
}

namespace detail {

// The largest rank sum of hand (as balanced_hand_out returns it).
inline uint64_t largest_rank(const std::vector<uint64_t>& work, const std::vector<int>& hand, int world) {
  std::vector<uint64_t> sum(world, 0);
  for (size_t j = 0; j < hand.size(); j++) sum[j % world] += work[hand[j]];
  return *std::max_element(sum.begin(), sum.end());
}

constexpr long kSearchNodes = 200000;  // bounds the host time a hand-out can take

struct Search {
  const std::vector<uint64_t>& work;
  std::vector<int> order;  // sequences, the largest first
  int groups, size;
  std::vector<uint64_t> sums;
  std::vector<int> counts, group_of, best_group_of;
  uint64_t best;
  long nodes = 0;

  void place(size_t i) {
    if (++nodes > kSearchNodes) return;
    if (i == order.size()) {
      const uint64_t most = *std::max_element(sums.begin(), sums.end());
      if (most < best) best = most, best_group_of = group_of;
      return;
    }
    const uint64_t w = work[order[i]];
    for (int g = 0; g < groups; g++) {
      if (counts[g] == size || sums[g] + w >= best) continue;
      bool alike = false;  // a group like an earlier one leads to the same splits
      for (int h = 0; h < g && !alike; h++) alike = sums[h] == sums[g] && counts[h] == counts[g];
      if (alike) continue;
      sums[g] += w, counts[g]++, group_of[order[i]] = g;
      place(i + 1);
      sums[g] -= w, counts[g]--;
    }
  }
};

}  // namespace detail

inline std::vector<int> balanced_hand_out(const std::vector<uint64_t>& work, int world) {
  const int S = (int)work.size();
  std::vector<int> hand(S);
  std::iota(hand.begin(), hand.end(), 0);  // the default: hand[m * world + r] = m * world + r
  if (world <= 1 || S % world || S == world) return hand;
  const int size = S / world;
  std::vector<int> order(S);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return work[a] > work[b]; });
  std::vector<int> group_of(S, -1);
  const uint64_t as_default = detail::largest_rank(work, hand, world);
  if (size == 2) {
    for (int g = 0; g < world; g++) group_of[order[g]] = g, group_of[order[S - 1 - g]] = g;
  } else if (S <= 16) {
    detail::Search s{work, order, world, size, std::vector<uint64_t>(world, 0), std::vector<int>(world, 0), std::vector<int>(S, -1), {},
                     as_default};
    s.place(0);
    if (s.best_group_of.empty()) return hand;  // nothing beats the default
    group_of = s.best_group_of;
  } else {
    std::vector<uint64_t> sums(world, 0);
    std::vector<int> counts(world, 0);
    for (int i : order) {
      int g = -1;
      for (int h = 0; h < world; h++)
        if (counts[h] < size && (g < 0 || sums[h] < sums[g])) g = h;
      group_of[i] = g, sums[g] += work[i], counts[g]++;
    }
  }
  std::vector<int> next(world, 0);  // each rank's sequences in rising index order
  for (int i = 0; i < S; i++) hand[next[group_of[i]]++ * world + group_of[i]] = i;
  if (detail::largest_rank(work, hand, world) >= as_default) std::iota(hand.begin(), hand.end(), 0);  // (greedy: no better)
  return hand;
}

// Which of a step's sequences this rank takes at each micro-step: the default order
// (data/dataloader.h TrainSchedule), or where `balance` is on and there are several ranks
// balanced_hand_out's, made from the step's sequences' tokens at the step's window (so the same
// on every rank). It keeps those tokens, so that the step's batches are built from them rather
// than read again (a step that spans two shards would otherwise load each of them twice), and a
// digest of every hand-out made, which the trainer's --check-replicas compares across the ranks.
// For the run's report it keeps, for each step it handed out, how far the slowest rank's attention
// work was over the mean, and how far it would have been with the default order.
class StepHandOut {
 public:
  const bool on;
  uint64_t digest = 0;
  std::vector<double> excess, default_excess;
  int changed = 0;  // steps handed out otherwise than in the default order

  StepHandOut(const TrainSchedule& s, int seq_len, bool balance)
      : on(balance && s.world > 1), schedule_(s), T_(seq_len), tokens_(on ? (size_t)s.seqs_per_step * (seq_len + 1) : 0) {}

  // The stream index of the sequence this rank takes at micro-step m of step `at` (0-based);
  // window_tokens: that step's attention window in tokens.
  uint64_t sequence(TokenStream& train, int at, int m, int window_tokens) {
    if (!on) return schedule_.sequence_index(at, m);
    if (at != step_) make(train, at, window_tokens);
    return (uint64_t)schedule_.seqs_per_step * at + hand_[m * schedule_.world + schedule_.rank];
  }
  // Sequence k's tokens (T + 1) if it belongs to the step last handed out, else null.
  const uint16_t* tokens_of(uint64_t k) const {
    const uint64_t first = (uint64_t)schedule_.seqs_per_step * step_;
    return on && step_ >= 0 && k >= first && k < first + schedule_.seqs_per_step ? tokens_.data() + (k - first) * (T_ + 1) : nullptr;
  }

 private:
  TrainSchedule schedule_;
  int T_;
  std::vector<uint16_t> tokens_;  // the step's sequences, T + 1 tokens each
  int step_ = -1;
  std::vector<int> hand_;

  void make(TokenStream& train, int at, int window_tokens) {
    const int S = schedule_.seqs_per_step, N = schedule_.world;
    std::vector<uint64_t> work(S);
    for (int i = 0; i < S; i++) {
      uint16_t* t = tokens_.data() + (size_t)i * (T_ + 1);
      train.sequence((uint64_t)S * at + i, t);
      work[i] = window_pairs(t, T_, window_tokens);
    }
    hand_ = balanced_hand_out(work, N);
    for (int x : hand_) digest = (digest ^ (uint64_t)(x + 1)) * 0x100000001b3ULL;  // FNV-style, over every hand-out in turn
    std::vector<int> in_order(S);
    std::iota(in_order.begin(), in_order.end(), 0);
    auto over_mean = [&](const std::vector<int>& h) {
      std::vector<double> rank(N, 0.0);
      double total = 0;
      for (int j = 0; j < S; j++) rank[j % N] += (double)work[h[j]], total += (double)work[h[j]];
      return total > 0 ? *std::max_element(rank.begin(), rank.end()) / (total / N) - 1 : 0.0;
    };
    excess.push_back(over_mean(hand_));
    default_excess.push_back(over_mean(in_order));
    changed += hand_ != in_order;
    step_ = at;
  }
};

}  // namespace data
