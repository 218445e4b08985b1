// The data-parallel exchange's plan (train/grad_buckets.h) on the speedrun's layout and a small
// one: every tensor is summed exactly once, runs are disjoint and lie in the buffer, and each
// tensor is summed at the point where the last layer that writes its gradient (in the backward's
// order L-1 .. 0) has run. The writers are listed here from the model's structure, on their own:
// layer i writes its matrices and scalars, value_embed[min(i, L-1-i)], and skip[i - L/2] when
// i >= L/2; the head is written in the forward, the embedding after the last layer.
#include <algorithm>
#include <string>

#include "tests/check.h"
#include "train/grad_buckets.h"

static int writers_min(const std::string& name, int L) {  // -1: after every layer; L: before any
  if (name == "head") return L;
  if (name == "embed") return -1;
  int m = L + 1;
  for (int i = 0; i < L; i++) {
    const bool writes = name.rfind("layer" + std::to_string(i) + ".", 0) == 0 ||
                        name == "value_embed." + std::to_string(std::min(i, L - 1 - i)) || (name == "skip" && i >= L / 2);
    if (writes) m = std::min(m, i);
  }
  return m;
}

int main() {
  for (int L : {12, 4, 2}) {
    model::Config cfg;
    cfg.vocab = 50304, cfg.width = 768, cfg.heads = 6, cfg.layers = L, cfg.hidden = 3072;
    const model::Layout layout(cfg);
    for (bool overlap : {true, false}) {
      const train::Buckets b = train::grad_buckets(layout, L, overlap);
      // coverage: each tensor inside exactly one run, at its point
      int misplaced = 0, uncovered = 0;
      for (const model::Tensor& t : layout.tensors) {
        int hits = 0, at = -99;
        for (const auto& kv : b)
          for (auto [off, n] : kv.second)
            if (t.offset >= off && t.offset + t.size() <= off + n) hits++, at = kv.first;
        uncovered += hits != 1;
        const int want = overlap ? writers_min(t.name, L) : -1;
        if (at != want) {
          misplaced++;
          std::printf("  %s at point %d, want %d\n", t.name.c_str(), at, want);
        }
      }
      // runs disjoint and inside the buffer
      std::vector<std::pair<size_t, size_t>> runs;
      for (const auto& kv : b) runs.insert(runs.end(), kv.second.begin(), kv.second.end());
      std::sort(runs.begin(), runs.end());
      bool disjoint = true;
      for (size_t i = 0; i + 1 < runs.size(); i++) disjoint &= runs[i].first + runs[i].second <= runs[i + 1].first;
      disjoint &= runs.back().first + runs.back().second <= layout.size();
      CHECK(uncovered == 0, "L=%d overlap=%d: %d tensors not in exactly one run", L, overlap, uncovered);
      CHECK(misplaced == 0, "L=%d overlap=%d: %d tensors summed at the wrong point", L, overlap, misplaced);
      CHECK(disjoint, "L=%d overlap=%d: runs overlap or pass the end", L, overlap);
      if (overlap)
        CHECK((int)b.size() == L + 2, "L=%d: %zu points, want L + 2 (head, each layer, the end)", L, b.size());
      else
        CHECK(b.size() == 1 && b.begin()->second.size() == 1, "L=%d: without overlap one run", L);
      if (L == 12 && overlap) {
        size_t runs_n = 0;
        for (const auto& kv : b) runs_n += kv.second.size();
        std::printf("speedrun layout: %zu tensors in %zu runs over %zu points\n", layout.tensors.size(), runs_n, b.size());
      }
    }
  }
  return test_summary("grad-buckets");
}
