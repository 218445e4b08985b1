// The optimiser's shard plan (train/shard_plan.h) on the speedrun's layout and small ones, for
// 1 to 8 ranks, for each Sync (end, embeddings, overlap): every parameter element is updated by exactly one rank,
// or by every rank where the plan replicates it (the scalars, which the model reads from the fp32
// masters, and remainders shorter than the rank count); each piece sits at the point where its
// gradient is final; the slices and the matrices' owners are what the collectives assume; each
// rank's compact state is laid out without overlap; the work is shared out evenly; and the bytes
// on the wire are what the ring algorithms send.
#include <algorithm>
#include <tuple>
#include <cmath>
#include <string>
#include <vector>

#include "tests/check.h"
#include "train/shard_plan.h"

int main() {
  // (the last layout's embeddings, 1001 x 96 elements, are not a multiple of 64: a gap follows each)
  for (auto [L, vocab, width] : {std::tuple<int, int, int>{12, 50304, 768}, {4, 1004, 128}, {2, 1002, 128}, {2, 1001, 96}}) {
    model::Config cfg;
    cfg.vocab = vocab, cfg.width = width, cfg.heads = L == 12 ? 6 : 2, cfg.layers = L;
    cfg.hidden = 4 * cfg.width;
    const model::Layout layout(cfg);
    for (train::Sync sync : {train::Sync::kOverlap, train::Sync::kEmbeddings, train::Sync::kEnd})
      for (int N : {1, 2, 3, 4, 5, 7, 8}) {
        const bool overlap = sync == train::Sync::kOverlap;
        // the point each tensor's pieces belong to, by hand: overlap, where its gradient is final;
        // embeddings, the head (L) and value_embed.j (j) for j > 0, the rest -1; end, -1
        auto want_point = [&](const std::string& name) {
          if (overlap) return train::ready_point(name, L);
          if (sync == train::Sync::kEnd) return -1;
          if (name == "head") return L;
          if (name.rfind("value_embed.", 0) == 0 && std::stoi(name.substr(12)) > 0) return std::stoi(name.substr(12));
          return -1;
        };
        // updates[e]: how many ranks update element e of the layout
        std::vector<int> updates(layout.size(), 0);
        int bad_point = 0, bad_piece = 0, bad_state = 0;
        std::vector<size_t> updated(N, 0);
        for (int r = 0; r < N; r++) {
          const train::ShardPlan p = train::shard_plan(layout, L, N, r, sync);
          std::vector<std::pair<size_t, size_t>> adam, muon;  // state ranges
                  for (const auto& kv : p.points)
            for (const train::Piece& x : kv.second) {
              const model::Tensor& t = layout.tensors[x.tensor];
              if (kv.first != want_point(t.name)) bad_point++;
              const bool is_matrix = model::group_of(t) == model::ParamGroup::kMatrix;
              const bool is_scalar = model::group_of(t) == model::ParamGroup::kScalar;
              if (x.kind == train::Piece::kMatrix) {
                bad_piece += !is_matrix || x.base != t.offset || x.span != t.size() || x.owner < 0 || x.owner >= N ||
                             x.count != (x.owner == r ? t.size() : 0) || x.offset != t.offset;
              } else if (x.kind == train::Piece::kSlice) {
                const size_t q = t.size() / N;
                bad_piece += is_matrix || is_scalar || x.base != t.offset || x.span != q * N || x.count != q || x.offset != t.offset + q * r;
              } else {
                bad_piece += is_matrix || x.base + x.span != t.offset + t.size() || x.count != x.span || x.offset != x.base ||
                             (!is_scalar && x.span >= (size_t)N);
              }
              for (size_t e = x.offset; e < x.offset + x.count; e++) updates[e]++;
              updated[r] += x.count;
              if (x.count) (x.kind == train::Piece::kMatrix ? muon : adam).push_back({x.state, x.count});
            }
          // every rank's plan names the same owners and staging places (the collectives' roots and
          // buffers must agree); staged, each matrix lies 64-aligned inside its owner's region, and
          // the regions' matrices do not overlap
          const train::ShardPlan p0 = train::shard_plan(layout, L, N, 0, sync);
          bad_piece += p.staged != (N > 1 && !overlap) || p.stage_rank != p0.stage_rank;
          std::vector<std::pair<size_t, size_t>> staged;
          for (const auto& kv : p.points)
            for (size_t k = 0; k < kv.second.size(); k++) {
              const train::Piece& x = kv.second[k];
              bad_piece += x.owner != p0.points.at(kv.first)[k].owner || x.stage != p0.points.at(kv.first)[k].stage;
              if (x.kind != train::Piece::kMatrix) continue;
              bad_piece += x.stage % 64 || x.stage < (size_t)x.owner * p.stage_rank || x.stage + x.span > (size_t)(x.owner + 1) * p.stage_rank;
              staged.push_back({x.stage, x.span});
            }
          std::sort(staged.begin(), staged.end());
          for (size_t k = 0; k + 1 < staged.size(); k++) bad_piece += staged[k].first + staged[k].second > staged[k + 1].first;
          for (auto [list, total] : {std::pair<std::vector<std::pair<size_t, size_t>>*, size_t>{&adam, p.adam_state}, {&muon, p.muon_state}}) {
            std::sort(list->begin(), list->end());
            size_t at = 0;
            for (auto [s, n] : *list) bad_state += s != at, at = s + n;
            bad_state += at != total;
          }
        }
        // each element: once, or N times where replicated (scalars, remainders); gaps: never
        int wrong = 0;
        for (size_t i = 0; i < layout.tensors.size(); i++) {
          const model::Tensor& t = layout.tensors[i];
          const bool scalar = model::group_of(t) == model::ParamGroup::kScalar, matrix = model::group_of(t) == model::ParamGroup::kMatrix;
          const size_t q = scalar || matrix ? 0 : t.size() / N;
          for (size_t e = 0; e < t.size(); e++) {
            const int want = matrix || e < q * N ? 1 : N;
            wrong += updates[t.offset + e] != want;
          }
        }
        size_t in_tensors = 0;
        for (const model::Tensor& t : layout.tensors) in_tensors += t.size();
        size_t touched = 0;
        for (int u : updates) touched += u > 0;
        const char* tag = overlap ? "overlap" : sync == train::Sync::kEmbeddings ? "embeddings" : "end";
        CHECK(wrong == 0, "L=%d N=%d %s: %d elements updated by the wrong number of ranks", L, N, tag, wrong);
        CHECK(touched == in_tensors, "L=%d N=%d %s: %zu elements touched, %zu in the tensors (gaps must stay untouched)", L, N, tag, touched,
              in_tensors);
        CHECK(bad_point == 0, "L=%d N=%d %s: %d pieces at the wrong point", L, N, tag, bad_point);
        CHECK(bad_piece == 0, "L=%d N=%d %s: %d pieces of the wrong shape or owner", L, N, tag, bad_piece);
        CHECK(bad_state == 0, "L=%d N=%d %s: %d state ranges overlap or leave gaps", L, N, tag, bad_state);
        if (L == 12) {  // the speedrun: each rank's share within 5% of 1/N (whole matrices make it uneven)
          const double most = (double)*std::max_element(updated.begin(), updated.end()), least = *std::min_element(updated.begin(), updated.end());
          CHECK(most / least < 1.05, "L=12 N=%d %s: the ranks update %.0f to %.0f elements", N, tag, least, most);
          if (N > 1) {
            const train::ShardPlan p = train::shard_plan(layout, L, N, 0, sync);
            const train::WireBytes fp32 = train::wire_bytes(p, 4), bf16 = train::wire_bytes(p, 2),
                                   before = train::unsharded_wire_bytes(layout, N);
            // by hand: the fp32 all-reduce 2 (N-1)/N 4 n, Muon's broadcast (N-1)/N 2 m; sharded: (N-1)/N (4 + 2) of the
            // sharded elements, the scalars' all-reduce aside
            double n = 0, m = 0;
            for (const model::Tensor& t : layout.tensors) {
              n += (double)t.size();
              if (model::group_of(t) == model::ParamGroup::kMatrix) m += (double)t.size();
            }
            const double f = (double)(N - 1) / N;
            CHECK(std::fabs(before.total() - f * (8 * n + 2 * m)) < 1, "N=%d: unsharded bytes %.0f, by hand %.0f", N, before.total(),
                  f * (8 * n + 2 * m));
            // (the staging buffers' padding: at most one large matrix a rank, 2% of the bytes)
            const double slack = overlap ? f * 4 * 2 * 64 * L : 0.02 * f * 6 * n;
            CHECK(std::fabs(fp32.total() - f * 6 * n) < slack, "N=%d %s: sharded bytes %.0f, by hand %.0f", N, tag, fp32.total(), f * 6 * n);
            CHECK(fp32.total() < 0.73 * before.total() && bf16.total() < 0.5 * before.total(),
                  "N=%d %s: fp32 %.3f and bf16 %.3f of the unsharded bytes (want < 0.73 and < 0.5)", N, tag, fp32.total() / before.total(),
                  bf16.total() / before.total());
            if (N == 4)
              std::printf("speedrun on 4 ranks (%s): %.0f MB a rank a step sharded (fp32 gradients), %.0f (bf16), %.0f unsharded\n", tag,
                          fp32.total() / 1e6, bf16.total() / 1e6, before.total() / 1e6);
          }
        }
      }
  }
  return test_summary("shard-plan");
}
