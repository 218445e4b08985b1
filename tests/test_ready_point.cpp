// Where each tensor's gradient is final and where the forward first reads it
// (train/ready_point.h), on the speedrun's layout and smaller ones. Final: at the point where the
// last layer that writes it (in the backward's order L-1 .. 0) has run; and the optimiser's shard
// plan puts every piece of a tensor there with overlap (points L, L-1, ..., 0, -1), only the
// head's and the value embeddings' that a layer's backward still follows with embeddings, and
// every piece at -1 with end. The writers (and readers) are listed here from the model's
// structure, on their own: layer i writes (and reads) its matrices and scalars,
// value_embed[min(i, L-1-i)], and skip[i - L/2] when i >= L/2; the head is written in the
// forward, the embedding after the last layer.
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

// The first stage of the forward that reads the tensor, from the same structure: the embedding
// (-1) reads embed, layer i reads its tensors, value_embed[min(i, L-1-i)] and skip when
// i >= L/2, the head (L) reads head.
static int readers_min(const std::string& name, int L) {
  if (name == "embed") return -1;
  for (int i = 0; i < L; i++) {
    const bool reads = name.rfind("layer" + std::to_string(i) + ".", 0) == 0 ||
                       name == "value_embed." + std::to_string(std::min(i, L - 1 - i)) || (name == "skip" && i >= L / 2);
    if (reads) return i;
  }
  return name == "head" ? L : L + 1;
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
    int early = 0, stages = 0;
    for (const model::Tensor& t : layout.tensors) {
      const int want = readers_min(t.name, L), got = train::first_read_stage(t.name, L);
      if (got != want) {
        early++;
        std::printf("  %s first read at stage %d, want %d\n", t.name.c_str(), got, want);
      }
      stages += want <= L;
    }
    CHECK(early == 0 && stages == (int)layout.tensors.size(), "L=%d: %d tensors first read at the wrong stage (%d of %zu read at all)", L,
          early, stages, layout.tensors.size());
    for (train::Sync sync : {train::Sync::kOverlap, train::Sync::kEmbeddings, train::Sync::kEnd}) {
      const bool overlap = sync == train::Sync::kOverlap;
      const train::ShardPlan p = train::shard_plan(layout, L, 2, 0, sync);
      int misplaced = 0;
      size_t pieces = 0;
      for (const auto& kv : p.points)
        for (const train::Piece& x : kv.second) {
          const std::string& name = layout.tensors[x.tensor].name;
          const int at = writers_min(name, L);
          const bool early = (name == "head" || name.rfind("value_embed.", 0) == 0) && at > 0;
          const int want = overlap ? at : sync == train::Sync::kEmbeddings && early ? at : -1;
          misplaced += kv.first != want, pieces++;
        }
      CHECK(misplaced == 0, "L=%d sync=%d: %d pieces at the wrong point", L, (int)sync, misplaced);
      if (overlap)
        CHECK((int)p.points.size() == L + 2, "L=%d: %zu points, want L + 2 (head, each layer, the end)", L, p.points.size());
      else if (sync == train::Sync::kEmbeddings)
        CHECK((int)p.points.size() == L / 2 + 1, "L=%d: embeddings: %zu points, want L/2 + 1 (head, value_embed.1 .. L/2-1, the end)", L,
              p.points.size());
      else
        CHECK(p.points.size() == 1, "L=%d: end: one point, got %zu", L, p.points.size());
      if (L == 12 && overlap)
        std::printf("speedrun layout: %zu tensors in %zu pieces over %zu points (2 ranks)\n", layout.tensors.size(), pieces, p.points.size());
    }
  }
  return test_summary("ready-point");
}
