// Where each tensor's gradient is final (train/ready_point.h), on the speedrun's layout and
// smaller ones: at the point where the last layer that writes it (in the backward's order
// L-1 .. 0) has run; and the optimiser's shard plan puts every piece of a tensor there (at -1
// with overlap off), over points L, L-1, ..., 0, -1. The writers are listed here from the model's structure, on their own:
// layer i writes its matrices and scalars, value_embed[min(i, L-1-i)], and skip[i - L/2] when
// i >= L/2; the head is written in the forward, the embedding after the last layer.
#include <algorithm>
#include <string>

#include "tests/check.h"
#include "train/ready_point.h"
#include "train/shard_plan.h"

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
    int wrong = 0;
    for (const model::Tensor& t : layout.tensors)
      if (train::ready_point(t.name, L) != writers_min(t.name, L)) {
        wrong++;
        std::printf("  %s at point %d, want %d\n", t.name.c_str(), train::ready_point(t.name, L), writers_min(t.name, L));
      }
    CHECK(wrong == 0, "L=%d: %d tensors final at the wrong point", L, wrong);
    for (bool overlap : {true, false}) {
      const train::ShardPlan p = train::shard_plan(layout, L, 2, 0, overlap);
      int misplaced = 0;
      size_t pieces = 0;
      for (const auto& kv : p.points)
        for (const train::Piece& x : kv.second) {
          const int want = overlap ? writers_min(layout.tensors[x.tensor].name, L) : -1;
          misplaced += kv.first != want, pieces++;
        }
      CHECK(misplaced == 0, "L=%d overlap=%d: %d pieces at the wrong point", L, overlap, misplaced);
      if (overlap)
        CHECK((int)p.points.size() == L + 2, "L=%d: %zu points, want L + 2 (head, each layer, the end)", L, p.points.size());
      else
        CHECK(p.points.size() == 1, "L=%d: without overlap one point, got %zu", L, p.points.size());
      if (L == 12 && overlap)
        std::printf("speedrun layout: %zu tensors in %zu pieces over %zu points (2 ranks)\n", layout.tensors.size(), pieces, p.points.size());
    }
  }
  return test_summary("ready-point");
}
