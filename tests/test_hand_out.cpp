// The hand-out of a step's sequences to the ranks (data/hand_out.h), against brute forces written
// here on their own: window_pairs against each query's kept keys counted one by one;
// balanced_hand_out's largest rank sum against the least over every split of the sequences into
// equal groups (the least up to 12 sequences, within 1% at 16, where the search may be cut short),
// two a rank against every pairing, and its contract: every sequence once, S / world a rank in rising
// order, never worse than the default hand-out, the default where nothing beats it, the same
// answer for the same work. StepHandOut, over shards written here and read by data::TokenStream as
// the trainer reads them, walked the way the trainer calls it (each micro-step, then the next
// step's first sequence read ahead): every rank of 2 and 4 makes the same hand-outs (the same
// digest), the ranks together take each of a step's sequences once, the kept tokens are the
// stream's, the slowest rank is never further over the mean than in order, and off (or on one
// rank) it is the default order.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "data/hand_out.h"
#include "tests/check.h"

static uint64_t brute_pairs(const std::vector<uint16_t>& t, int window) {
  uint64_t total = 0;
  int start = 0;
  for (int q = 0; q < (int)t.size(); q++) {
    if (t[q] == 50256) start = q;
    total += (uint64_t)(q - std::max(start, q - window + 1) + 1);
  }
  return total;
}

// The least largest group sum over every split of work into `groups` groups of equal size.
static uint64_t brute_best(const std::vector<uint64_t>& work, int groups) {
  const int S = (int)work.size(), size = S / groups;
  std::vector<uint64_t> sums(groups, 0);
  std::vector<int> counts(groups, 0);
  uint64_t best = UINT64_MAX;
  std::function<void(int)> go = [&](int i) {
    if (i == S) {
      best = std::min(best, *std::max_element(sums.begin(), sums.end()));
      return;
    }
    for (int g = 0; g < groups; g++) {
      if (counts[g] == size) continue;
      if (counts[g] == 0 && g > 0 && counts[g - 1] == 0) break;  // empty groups are alike: the first one only
      sums[g] += work[i], counts[g]++;
      go(i + 1);
      sums[g] -= work[i], counts[g]--;
    }
  };
  go(0);
  return best;
}

static uint64_t largest(const std::vector<uint64_t>& work, const std::vector<int>& hand, int world) {
  std::vector<uint64_t> sum(world, 0);
  for (size_t j = 0; j < hand.size(); j++) sum[j % world] += work[hand[j]];
  return *std::max_element(sum.begin(), sum.end());
}

// every sequence once; each rank's in rising index order
static bool well_formed(const std::vector<int>& hand, int world) {
  std::vector<int> seen(hand.size(), 0);
  for (int i : hand)
    if (i < 0 || i >= (int)hand.size() || seen[i]++) return false;
  for (size_t j = world; j < hand.size(); j++)
    if (hand[j] <= hand[j - world]) return false;
  return true;
}

int main() {
  std::mt19937_64 rng(12345);
  // window_pairs: documents of every length against windows shorter and longer than them
  int wrong = 0;
  for (int trial = 0; trial < 300; trial++) {
    const int n = 1 + (int)(rng() % 3000);
    const double bos = (trial % 3 == 0) ? 0.0 : 1.0 / (1 + rng() % 400);
    std::vector<uint16_t> t(n);
    std::uniform_real_distribution<double> u(0, 1);
    for (int i = 0; i < n; i++) t[i] = u(rng) < bos ? 50256 : (uint16_t)(rng() % 50256);
    for (int window : {1, 2, 7, 128, 1024, 5000})
      wrong += data::window_pairs(t.data(), n, window) != brute_pairs(t, window);
  }
  CHECK(wrong == 0, "window_pairs: %d of 1800 (sequence, window) pairs differ from the brute force", wrong);
  {
    std::vector<uint16_t> t = {50256, 1, 2, 50256, 3};  // documents of 3 and 2 tokens, window 2: 1+2+2 + 1+2
    CHECK(data::window_pairs(t.data(), 5, 2) == 8, "window_pairs by hand: %llu, want 8", (unsigned long long)data::window_pairs(t.data(), 5, 2));
    CHECK(data::window_pairs(t.data(), 0, 2) == 0, "window_pairs of no tokens");
  }

  // balanced_hand_out: the optimum where the splits can be enumerated
  int not_best = 0, bad_form = 0, worse = 0, unstable = 0, cases = 0;
  for (auto [S, world] : std::vector<std::pair<int, int>>{{8, 2}, {8, 4}, {12, 3}, {12, 4}, {16, 2}, {16, 4}, {6, 2}, {4, 2}}) {
    for (int trial = 0; trial < (S == 16 && world == 4 ? 6 : 90); trial++) {
      std::vector<uint64_t> work(S);
      // spreads like the speedrun's, near ties, and small numbers with zeros and repeats (where
      // groups of different sizes can have equal sums)
      for (auto& w : work) w = trial % 3 == 2 ? rng() % 10 : 40000000 + rng() % (trial % 3 ? 8000000 : 400);
      const std::vector<int> hand = data::balanced_hand_out(work, world);
      const std::vector<int> as_default = data::balanced_hand_out(std::vector<uint64_t>(S, 7), world);  // all alike: the default
      cases++;
      bad_form += !well_formed(hand, world);
      const uint64_t least = std::min(brute_best(work, world), largest(work, as_default, world)), got = largest(work, hand, world);
      // up to 12 sequences the search completes: the least; at 16 it may be cut short: within 1%
      not_best += S <= 12 ? got != least : (double)got > 1.01 * (double)least;
      worse += largest(work, hand, world) > largest(work, as_default, world);
      unstable += data::balanced_hand_out(work, world) != hand;
    }
  }
  CHECK(bad_form == 0, "balanced: %d of %d hand-outs not every sequence once, in rising order a rank", bad_form, cases);
  CHECK(not_best == 0, "balanced: %d of %d hand-outs above the least largest rank sum (by 1%% at 16 sequences)", not_best, cases);
  CHECK(worse == 0, "balanced: %d of %d hand-outs worse than the default", worse, cases);
  CHECK(unstable == 0, "balanced: %d of %d hand-outs differ between two calls", unstable, cases);

  // the default where nothing beats it: one rank, a sequence a rank, all alike, or already balanced
  std::vector<int> identity8(8);
  for (int i = 0; i < 8; i++) identity8[i] = i;
  std::vector<uint64_t> w8 = {5, 9, 1, 7, 3, 3, 8, 2};
  CHECK(data::balanced_hand_out(w8, 1) == identity8, "one rank: the default");
  CHECK(data::balanced_hand_out(w8, 8) == identity8, "one sequence a rank: the default");
  CHECK(data::balanced_hand_out(std::vector<uint64_t>(8, 4), 2) == identity8, "all alike: the default");
  CHECK(data::balanced_hand_out({1, 1, 1, 1}, 2) == std::vector<int>({0, 1, 2, 3}), "balanced already: the default");
  // by hand: the default gives rank r the sequences j with j % 2 == r; work 10 1 10 1 gives rank 0
  // both 10s. Paired largest with smallest (sequence 0 with 3, 2 with 1), rank 0 takes 0 and 3,
  // rank 1 takes 1 and 2: hand = 0 1 3 2
  CHECK(data::balanced_hand_out({10, 1, 10, 1}, 2) == std::vector<int>({0, 1, 3, 2}), "10 1 10 1 on two ranks: 0 1 3 2");
  CHECK(data::balanced_hand_out({10, 10, 1, 1}, 2) == std::vector<int>({0, 1, 2, 3}), "10 10 1 1 on two ranks: the default");

  // two sequences a rank (the pairing of the largest with the smallest): the optimum, against every
  // pairing of 12 sequences
  not_best = 0;
  std::vector<int> id12(12);
  for (int i = 0; i < 12; i++) id12[i] = i;
  for (int trial = 0; trial < 40; trial++) {
    std::vector<uint64_t> work(12);
    for (auto& w : work) w = trial % 2 ? rng() % 10 : 1 + rng() % 100000;
    const uint64_t want = std::min(brute_best(work, 6), largest(work, id12, 6));
    not_best += largest(work, data::balanced_hand_out(work, 6), 6) != want;
  }
  CHECK(not_best == 0, "pairs: %d of 40 hand-outs of 12 sequences to 6 ranks above the least largest pair sum", not_best);
  // greedy is worse than the default here (24 sequences, 4 ranks): the default is kept
  {
    const std::vector<uint64_t> w = {4, 6, 6, 5, 6, 3, 5, 4, 5, 3, 3, 3, 3, 6, 3, 6, 5, 6, 1, 3, 2, 1, 6, 4};
    std::vector<int> id(24);
    for (int i = 0; i < 24; i++) id[i] = i;
    const std::vector<int> hand = data::balanced_hand_out(w, 4);
    CHECK(well_formed(hand, 4) && largest(w, hand, 4) <= largest(w, id, 4), "greedy worse than the default: the default kept (%llu > %llu)",
          (unsigned long long)largest(w, hand, 4), (unsigned long long)largest(w, id, 4));
  }
  // the search is bounded (kSearchNodes): 16 sequences on 8 and 4 ranks
  {
    const auto t0 = std::chrono::steady_clock::now();
    for (int trial = 0; trial < 50; trial++) {
      std::vector<uint64_t> work(16);
      for (auto& w : work) w = 40000000 + rng() % 8000000;
      (void)data::balanced_hand_out(work, trial % 2 ? 4 : 8);
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 50;
    CHECK(ms < 50, "16 sequences: %.1f ms a hand-out on average (the search's node cap should keep it to a few)", ms);
  }

  // beyond 16 sequences (the greedy split): well formed, never worse than the default
  bad_form = worse = 0;
  for (int trial = 0; trial < 100; trial++) {
    const int world = trial % 2 ? 4 : 8, S = world * (3 + trial % 4);
    std::vector<uint64_t> work(S);
    for (auto& w : work) w = 1 + rng() % 1000;
    const std::vector<int> hand = data::balanced_hand_out(work, world);
    std::vector<int> identity(S);
    for (int i = 0; i < S; i++) identity[i] = i;
    bad_form += !well_formed(hand, world);
    worse += largest(work, hand, world) > largest(work, identity, world);
  }
  CHECK(bad_form == 0, "greedy: %d of 100 hand-outs malformed", bad_form);
  CHECK(worse == 0, "greedy: %d of 100 hand-outs worse than the default", worse);
  // StepHandOut over shards: three of 9000 tokens, documents of 1 to 400 tokens
  const std::string dir = (std::filesystem::temp_directory_path() / ("hand_out_test_" + std::to_string(rng() % 1000000))).string();
  std::filesystem::create_directories(dir);
  std::vector<std::string> files;
  for (int f = 0; f < 3; f++) {
    std::vector<uint16_t> t(9000);
    int left = 0;
    for (auto& x : t) {
      if (left-- <= 0) x = shard::kBos, left = (int)(rng() % 400);
      else x = (uint16_t)(rng() % 50000);
    }
    files.push_back(dir + "/t_" + std::to_string(f) + ".bin");
    shard::write_shard(files.back(), t);
  }
  const int T = 256, S2 = 8, steps = 40;  // 105 sequences a pass: the steps cycle through the shards
  int wrong_set = 0, wrong_tokens = 0, wrong_digest = 0, worse_rank = 0, changed = 0, not_default = 0;
  for (int world : {2, 4}) {
    std::vector<uint64_t> digests;
    std::vector<std::multiset<uint64_t>> taken(steps);
    for (int rank = 0; rank < world; rank++) {
      data::TokenStream stream(files, T, 50257, true), check(files, T, 50257, true);
      const data::TrainSchedule sched{S2, world, rank};
      data::StepHandOut ho(sched, T, true);
      std::vector<uint16_t> want(T + 1);
      for (int step = 0; step < steps; step++) {
        const int window = 128 * (1 + step % 3);  // the window changes from step to step
        for (int m = 0; m < sched.micro_steps(); m++) {
          const uint64_t k = ho.sequence(stream, step, m, window);
          taken[step].insert(k);
          const uint16_t* t = ho.tokens_of(k);
          check.sequence(k, want.data());
          wrong_tokens += !t || !std::equal(want.begin(), want.end(), t);
        }
        if (step + 1 < steps) ho.sequence(stream, step + 1, 0, 128 * (1 + (step + 1) % 3));  // the read-ahead
      }
      digests.push_back(ho.digest);
      if (rank == 0) {
        changed += ho.changed;
        for (size_t i = 0; i < ho.excess.size(); i++) worse_rank += ho.excess[i] > ho.default_excess[i] + 1e-12;
      }
    }
    for (int step = 0; step < steps; step++) {
      std::multiset<uint64_t> want;
      for (int i = 0; i < S2; i++) want.insert((uint64_t)S2 * step + i);
      wrong_set += taken[step] != want;
    }
    for (uint64_t d : digests) wrong_digest += d != digests[0];
    // off, or one rank: the default order, and no kept tokens
    data::TokenStream stream(files, T, 50257, true);
    for (auto [balance, w] : {std::pair<bool, int>{false, world}, {true, 1}}) {
      const data::TrainSchedule sched{S2, w, 0};
      data::StepHandOut ho(sched, T, balance);
      for (int step = 0; step < 5; step++)
        for (int m = 0; m < sched.micro_steps(); m++) {
          const uint64_t k = ho.sequence(stream, step, m, 256);
          not_default += k != sched.sequence_index(step, m) || ho.tokens_of(k) != nullptr || ho.on;
        }
    }
  }
  std::filesystem::remove_all(dir);
  CHECK(wrong_set == 0, "StepHandOut: %d steps where the ranks together did not take each sequence once", wrong_set);
  CHECK(wrong_tokens == 0, "StepHandOut: %d sequences whose kept tokens are not the stream's", wrong_tokens);
  CHECK(wrong_digest == 0, "StepHandOut: %d ranks whose hand-outs' digest differs from rank 0's", wrong_digest);
  CHECK(worse_rank == 0, "StepHandOut: %d steps with the slowest rank further over the mean than in order", worse_rank);
  CHECK(changed > steps / 2, "StepHandOut: %d of %d steps (2 and 4 ranks) handed out otherwise: the shards' documents differ enough",
        changed, 2 * steps);
  CHECK(not_default == 0, "StepHandOut off, or on one rank: %d departures from the default order", not_default);
  return test_summary("hand-out");
}
