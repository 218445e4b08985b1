// CPU tests of the attention pieces that need no GPU:
//  - the reference mask (reference.cpp, table of docs/masks.md literally) on hand-picked pairs;
//  - the kernels' normalised mask (mask.h) equals the reference element by element;
//  - tile classification is exact (skipped exactly when the tile keeps nothing, full exactly
//    when it keeps everything), from either side's RangeEnds, and no kept pair lies outside the
//    key/query ranges;
//  - the fp64 reference backward against central finite differences (relative 1e-6: the
//    reference is fp64, the step 1e-3 on inputs whose loss is smooth);
//  - the order in which the sm90 fused backward adds dQ shares: the key blocks with kept pairs in
//    a query tile are exactly those that meet key_range of the tile, and the blocks' order
//    (tile_scheduler.cuh) keeps the contract that a block only waits for blocks before it.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attention/mask.h"
#include "attention/reference.h"
#include "attention/tile_scheduler.cuh"
#include "tests/check.h"

static std::mt19937 rng(7);

static std::vector<int32_t> random_docs(int T, int mean) {
  std::vector<int32_t> d(T);
  std::uniform_int_distribution<int> len(1, 2 * mean);
  int id = 0, left = 0;
  for (int i = 0; i < T; i++) {
    if (!left) { id++; left = len(rng); }
    d[i] = id;
    left--;
  }
  return d;
}

int main() {
  // 1. the table of docs/masks.md on hand-picked pairs
  {
    ref::Mask m;  // causal only
    CHECK(ref::keep(m, 5, 5) && ref::keep(m, 5, 0) && !ref::keep(m, 5, 6), "causal");
    m.window = 3;  // q - k < 3
    CHECK(ref::keep(m, 5, 3) && !ref::keep(m, 5, 2), "causal + uni window 3");
    m.causal = false;
    CHECK(ref::keep(m, 5, 100) && !ref::keep(m, 5, 2), "uni window without causal keeps the future");
    m.bidir = true;
    CHECK(ref::keep(m, 5, 7) && !ref::keep(m, 5, 8) && !ref::keep(m, 5, 2), "bi window 3");
    m.blocks = true;
    m.window = 1;  // same block only
    CHECK(ref::keep(m, 0, 127) && !ref::keep(m, 127, 128) && ref::keep(m, 200, 255), "bi block window 1");
    m.bidir = false;
    m.causal = true;
    m.window = 2;  // this block and the previous one
    CHECK(ref::keep(m, 300, 128) && !ref::keep(m, 300, 127) && !ref::keep(m, 300, 301), "causal uni block window 2");
    std::vector<int32_t> doc = {1, 1, 2, 2, 2, 3};
    ref::Mask md;
    md.doc = doc.data();
    CHECK(ref::keep(md, 4, 2) && !ref::keep(md, 4, 1) && ref::keep(md, 5, 5), "documents");
    // prefix-LM: the first P tokens of each document see each other both ways, the rest is causal
    std::vector<int32_t> pdoc = {1, 1, 1, 1, 1, 2, 2, 2, 2, 2};
    ref::Mask mp;
    mp.prefix = 2;
    mp.doc = pdoc.data();
    CHECK(ref::keep(mp, 0, 1) && !ref::keep(mp, 0, 2) && ref::keep(mp, 4, 1) && !ref::keep(mp, 3, 4),
          "prefix 2, first document");
    CHECK(ref::keep(mp, 5, 6) && !ref::keep(mp, 5, 7) && !ref::keep(mp, 4, 5) && !ref::keep(mp, 6, 4),
          "prefix 2, second document starts its own prefix");
    mp.prefix = 9;  // longer than a document: each document is all prefix
    CHECK(ref::keep(mp, 0, 4) && !ref::keep(mp, 0, 5) && ref::keep(mp, 5, 9), "prefix past the document end");
    mp.doc = nullptr;  // without documents the sequence is one document
    CHECK(ref::keep(mp, 0, 8) && !ref::keep(mp, 0, 9) && ref::keep(mp, 9, 0), "prefix 9, no documents");
    mp.prefix = 3;
    mp.window = 2;  // AND uni window: q - k < 2 holds for every key ahead
    CHECK(ref::keep(mp, 0, 2) && !ref::keep(mp, 2, 0) && ref::keep(mp, 4, 3), "prefix 3, uni window 2");
    mp.bidir = true;  // AND bi window: |q - k| < 2
    CHECK(ref::keep(mp, 0, 1) && !ref::keep(mp, 0, 2) && !ref::keep(mp, 2, 0), "prefix 3, bi window 2");
    mp.window = 0;
    mp.bidir = false;
    mp.causal = false;  // without causal every pair is kept already
    CHECK(ref::keep(mp, 0, 9) && ref::keep(mp, 9, 0), "prefix without causal");
  }

  // 2 and 3. mask.h against the reference, and the tile logic's soundness
  int configs = 0;
  for (int trial = 0; trial < 400; trial++) {
    const int T = std::uniform_int_distribution<int>(1, 700)(rng);
    std::vector<int32_t> doc = random_docs(T, std::uniform_int_distribution<int>(1, 200)(rng));
    ref::Mask rm;
    attn::MaskDesc km;
    rm.causal = km.causal = rng() % 2;
    const int wkind = rng() % 3;
    rm.window = km.window = wkind == 0 ? 0 : std::uniform_int_distribution<int>(1, wkind == 1 ? 300 : 5)(rng);
    rm.blocks = km.window_blocks = wkind == 2;
    rm.bidir = km.window_bidir = rng() % 2;
    // prefix-LM on a third of the trials: short, about a document, or longer than most documents
    const int pkind = rng() % 6;
    rm.prefix = km.prefix = pkind < 4 ? 0 : std::uniform_int_distribution<int>(1, pkind == 4 ? 20 : 600)(rng);
    const bool docs = rng() % 2;
    rm.doc = docs ? doc.data() : nullptr;
    km.doc_ids = docs ? doc.data() : nullptr;
    attn::MaskBounds b = attn::make_bounds(km, T);
    int mismatches = 0, bad_skip = 0, bad_full = 0, out_of_range = 0, side_mismatches = 0;
    long long pairs = 0;  // brute force, against kept_pairs
    for (int q = 0; q < T; q++)
      for (int k = 0; k < T; k++) pairs += ref::keep(rm, q, k);
    CHECK(attn::kept_pairs(b) == pairs, "trial %d: kept_pairs %lld, brute force %lld", trial, attn::kept_pairs(b), pairs);
    const int tile = trial % 2 ? 64 : 128;
    for (int q0 = 0; q0 < T; q0 += tile)
      for (int k0 = 0; k0 < T; k0 += tile) {
        attn::TileKind kind = attn::classify_tile(b, q0, q0 + tile, k0, k0 + tile);
        int kq_lo, kq_hi, qk_lo, qk_hi;
        attn::key_range(b, q0, q0 + tile, kq_lo, kq_hi);
        attn::query_range(b, k0, k0 + tile, qk_lo, qk_hi);
        bool any = false, all = true;
        for (int q = q0; q < q0 + tile; q++)
          for (int k = k0; k < k0 + tile; k++) {
            bool r = q < T && k < T && ref::keep(rm, q, k);
            mismatches += r != attn::keep(b, q, k);
            any |= r;
            all &= r;
            if (r && (k < kq_lo || k > kq_hi || q < qk_lo || q > qk_hi)) out_of_range++;
          }
        bad_skip += (kind == attn::kSkip) != !any;
        bad_full += (kind == attn::kFull) != (all && q0 + tile <= T && k0 + tile <= T);
        // the key side's ends classify the same tile the same way
        side_mismatches += attn::classify_against(attn::range_ends(b, k0, k0 + tile, false), q0, q0 + tile, T) != kind;
      }
    CHECK(mismatches == 0, "trial %d: %d pairs where mask.h and the reference disagree", trial, mismatches);
    // TileWalk visits exactly the tiles classify_tile does not skip, with the same kinds
    int walk_mismatches = 0;
    for (int f0 = 0; f0 < T; f0 += tile)
      for (int side = 0; side < 2; side++) {
        const int end = (T + tile - 1) / tile;
        attn::TileWalk walk(attn::range_ends(b, f0, f0 + tile, side == 0), tile, T);
        std::vector<std::pair<int, attn::TileKind>> visited, want;
        attn::TileKind kind;
        for (int i = walk.next(walk.begin, kind); i < walk.end; i = walk.next(i + 1, kind)) visited.push_back({i, kind});
        for (int t = 0; t < end; t++) {
          attn::TileKind k = side == 0 ? attn::classify_tile(b, f0, f0 + tile, t * tile, t * tile + tile)
                                       : attn::classify_tile(b, t * tile, t * tile + tile, f0, f0 + tile);
          if (k != attn::kSkip) want.push_back({t, k});
        }
        walk_mismatches += visited != want;
        // walking down visits the same tiles with the same kinds, from the last one
        attn::TileWalk down = walk;
        down.down = true;
        std::vector<std::pair<int, attn::TileKind>> visited_down;
        for (int p = down.next(down.begin, kind); p < down.end; p = down.next(p + 1, kind))
          visited_down.push_back({down.tile(p), kind});
        std::reverse(visited_down.begin(), visited_down.end());
        walk_mismatches += visited_down != want;
      }
    CHECK(walk_mismatches == 0, "trial %d: %d TileWalk steps differ from classify_tile", trial, walk_mismatches);
    CHECK(bad_skip == 0 && bad_full == 0, "trial %d: %d tiles wrongly skipped or not skipped, %d wrongly full or not full",
          trial, bad_skip, bad_full);
    CHECK(side_mismatches == 0, "trial %d: %d tiles classified differently from the key side", trial, side_mismatches);
    CHECK(out_of_range == 0, "trial %d: %d kept pairs outside key_range/query_range", trial, out_of_range);
    // one query keeps exactly an interval of keys, one key is kept by an interval of queries
    int interval_mismatches = 0;
    for (int q = 0; q < T + 3; q++)
      for (int k = 0; k < T + 3; k++) {
        int klo, khi, qlo, qhi;
        attn::row_keys(b, q, klo, khi);
        attn::col_queries(b, k, qlo, qhi);
        const bool r = q < T && k < T && ref::keep(rm, q, k);
        interval_mismatches += (r != (k >= klo && k <= khi)) + (r != (q >= qlo && q <= qhi));
      }
    CHECK(interval_mismatches == 0, "trial %d: %d disagreements of row_keys/col_queries with the reference", trial,
          interval_mismatches);
    // the sm90 fused backward adds the dQ shares of one query tile (64) in the order of the key
    // blocks (128) that have kept pairs with it, taken as the blocks meeting key_range(tile): that
    // set must be exactly those blocks, with no gap (else a block would wait for a share that
    // never comes)
    int order_mismatches = 0;
    for (int q0 = 0; q0 < T; q0 += 64) {
      int klo, khi;
      attn::key_range(b, q0, q0 + 64, klo, khi);
      for (int kb = 0; kb * 128 < T; kb++) {
        bool any = false;
        for (int q = q0; q < std::min(q0 + 64, T) && !any; q++)
          for (int k = kb * 128; k < std::min(kb * 128 + 128, T) && !any; k++) any = ref::keep(rm, q, k);
        const bool in_range = klo <= khi && kb >= klo / 128 && kb <= khi / 128;
        order_mismatches += any != in_range;
      }
    }
    CHECK(order_mismatches == 0, "trial %d: %d key blocks where key_range of a query tile disagrees with its kept pairs",
          trial, order_mismatches);
    // the fused backward's blocks on a grid of H heads, in both block orders (tile_scheduler.cuh
    // key_block_at, dq_rank): every (key block, head) is owned once; per head and query tile, the
    // blocks whose walk meets the tile with a share hold the ranks 0 .. n - 1 once each, n the key
    // blocks of the tile's dq range; the block of rank r - 1 has a smaller index than the block of
    // rank r (so a block only waits for blocks started before it); a rising block walks down.
    int contract_errors = 0;
    const int n_kb = (T + 127) / 128, n_qt = (T + 63) / 64;
    for (int H : {1, 2, 3})
      for (int hf = 0; hf < 2; hf++) {
        std::vector<int> owner((size_t)H * n_kb, -1), holder((size_t)H * n_qt * n_kb, -1);  // holder[h][qt][rank]: block
        int rising_blocks = 0;
        for (int blk = 0; blk < n_kb * H; blk++) {
          const attn::KeyBlock kbh = attn::key_block_at(blk, n_kb, H, hf, true);
          contract_errors += owner[(size_t)kbh.h * n_kb + kbh.kb] != -1;
          owner[(size_t)kbh.h * n_kb + kbh.kb] = blk;
          rising_blocks += kbh.rising;
          attn::TileWalk walk(attn::range_ends(b, kbh.kb * 128, kbh.kb * 128 + 128, false), 64, T);
          walk.down = kbh.rising;
          attn::TileKind kind;
          int prev = -1;
          for (int p = walk.next(walk.begin, kind); p < walk.end; p = walk.next(p + 1, kind)) {
            const int qt = walk.tile(p);
            contract_errors += prev >= 0 && (qt > prev) == kbh.rising;
            prev = qt;
            int klo, khi;
            attn::key_range(b, qt * 64, qt * 64 + 64, klo, khi);
            if (klo > khi || kbh.kb < klo / 128 || kbh.kb > khi / 128) continue;  // no share
            int& slot = holder[((size_t)kbh.h * n_qt + qt) * n_kb + attn::dq_rank(kbh.kb, klo / 128, khi / 128, kbh.rising)];
            contract_errors += slot != -1;
            slot = blk;
          }
        }
        // the rising order is on exactly in the last head of a head-by-head grid of several heads
        contract_errors += rising_blocks != (!hf && H > 1 ? n_kb : 0);
        for (int h = 0; h < H; h++)
          for (int qt = 0; qt < n_qt; qt++) {
            int klo, khi;
            attn::key_range(b, qt * 64, qt * 64 + 64, klo, khi);
            const int n = klo > khi ? 0 : khi / 128 - klo / 128 + 1;
            const int* ranks = &holder[((size_t)h * n_qt + qt) * n_kb];
            for (int r = 0; r < n_kb; r++)
              contract_errors += r < n ? ranks[r] == -1 || (r > 0 && ranks[r - 1] >= ranks[r]) : ranks[r] != -1;
          }
      }
    CHECK(contract_errors == 0, "trial %d: %d breaches of the fused backward's block order contract", trial, contract_errors);
    // with causal on and no prefix, uni and bi normalise to the same bounds
    if (km.causal && km.window && km.prefix == 0) {
      attn::MaskDesc other = km;
      other.window_bidir = !km.window_bidir;
      attn::MaskBounds o = attn::make_bounds(other, T);
      CHECK(o.dlo == b.dlo && o.dhi == b.dhi && o.blo == b.blo && o.bhi == b.bhi, "trial %d: uni/bi bounds differ under causal", trial);
    }
    configs++;
  }
  // the classifier must actually skip and spare work in the common cases (not all partial)
  {
    attn::MaskDesc km;
    km.window = 1024;
    attn::MaskBounds b = attn::make_bounds(km, 65536);
    CHECK(attn::classify_tile(b, 4096, 4160, 0, 64) == attn::kSkip, "far tile not skipped");
    CHECK(attn::classify_tile(b, 4096, 4160, 3200, 3264) == attn::kFull, "inner tile not full");
    CHECK(attn::classify_tile(b, 4096, 4160, 4096, 4160) == attn::kPartial, "diagonal tile not partial");
    int lo, hi;
    attn::key_range(b, 4096, 4160, lo, hi);
    CHECK(lo == 4096 - 1023 && hi == 4159, "key range [%d, %d]", lo, hi);
  }

  // 4. the reference backward against finite differences
  for (int trial = 0; trial < 6; trial++) {
    const int T = 9, H = 2, D = 4;
    const size_t n = (size_t)T * H * D;
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> q(n), k(n), v(n), g(n);
    for (auto* x : {&q, &k, &v, &g})
      for (auto& e : *x) e = nd(rng);
    std::vector<int32_t> doc = {1, 1, 1, 2, 2, 2, 2, 3, 3};
    ref::Mask m;
    m.causal = trial % 2 == 0;
    m.window = trial >= 2 ? 3 : 0;
    m.bidir = trial >= 4;
    m.doc = trial == 3 || trial == 5 ? doc.data() : nullptr;
    std::vector<double> dq, dk, dv;
    ref::backward(q.data(), k.data(), v.data(), g.data(), T, H, D, m, dq, dk, dv);
    auto loss = [&]() {
      std::vector<double> o, lse;
      ref::forward(q.data(), k.data(), v.data(), T, H, D, m, o, lse);
      double s = 0;
      for (size_t i = 0; i < n; i++) s += o[i] * g[i];
      return s;
    };
    double worst = 0, scale = 0;
    for (auto [x, grad] : {std::pair<std::vector<float>*, std::vector<double>*>{&q, &dq}, {&k, &dk}, {&v, &dv}})
      for (size_t i = 0; i < n; i++) {
        const float keep = (*x)[i], eps = 1e-3f;
        (*x)[i] = keep + eps;
        double up = loss();
        (*x)[i] = keep - eps;
        double down = loss();
        (*x)[i] = keep;
        double num = (up - down) / ((double)(keep + eps) - (double)(keep - eps));
        worst = std::max(worst, std::fabs(num - (*grad)[i]));
        scale = std::max(scale, std::fabs((*grad)[i]));
      }
    CHECK(worst <= 1e-6 * std::max(scale, 1.0), "finite differences, trial %d: max err %.3e (grad scale %.3e)", trial, worst, scale);
  }

  // T = 1: the output is v
  {
    std::vector<float> q = {0.5f, -1.f}, k = {2.f, 1.f}, v = {3.f, -4.f};
    std::vector<double> o, lse;
    ref::forward(q.data(), k.data(), v.data(), 1, 1, 2, ref::Mask{}, o, lse);
    CHECK(o[0] == 3.0 && o[1] == -4.0 && std::fabs(lse[0] - 0.0 / std::sqrt(2.0)) < 1e-12, "T=1 output %f %f lse %f", o[0], o[1], lse[0]);
  }
  std::printf("mask/tile checks over %d random configurations\n", configs);
  return test_summary("attention-cpu");
}
