// The sm90 backward's key-owner main loop (attention_bwd_sm90.cu describes the algorithm): one
// block owns BK keys (BK = 128: two warpgroups; 64, dK/dV alone: one) and walks the query tiles
// of BQ (64; 128 for dK/dV alone with BK = 128) that see them, computing per tile
//   S^T = K Q^T, dP^T = V dO^T      [BK keys x BQ queries], wgmma from shared memory
//   P^T = 2^(scale_log2 S^T - lse2), dS^T = P^T (dP^T - Drow)
//   dV += P^T dO, dK += dS^T Q       [BK keys x D], fp32 accumulators in registers
// and, with DQ (the fused backward), the block's share of dQ = dS K for each tile ([64 x D] over
// its 128 keys), added into fp32 sums in the fixed order of dq_order.cuh.
// Q, K, V, dO: bf16 [T, H, D], read by the TMA through tensor maps (tma_tiles.cuh make_tile_map: boxes of
// BQ query rows, and of BK key rows); lse2, Drow: fp32 [H, T]; dK, dV: bf16 [T, H, D], D in {64, 128}.
// With kn.rstd set, dK is the gradient of the k that K's norm + rotary was made from, computed
// from the block's K tile as it is stored (norm_rotary_bwd.cuh KeyNormRotary).
// Without DQ, P^T and dS^T stay in registers as the next wgmma's A operand; each tile's dV, dK
// updates run under the next tile's P^T, dS^T, except (SERIAL) with BK = 64 (three blocks an SM,
// so at most 168 registers a thread) or BQ = 128 (S^T, dP^T 64 registers each beside dK, dV),
// where the registers hold only one tile's: a warpgroup issues and waits for its updates in the
// tile's own step, and the other warpgroups' matmuls fill the tensor cores meanwhile. With DQ they go
// through shared memory (dQ needs both warpgroups' dS^T), so the accumulators at any time are at
// most S^T, dP^T, dK, dV and one dQ tile; three query-tile buffers (one ahead) make room for the
// staging of a dQ share.
#pragma once
#include "attention/bwd_common_sm90.cuh"
#include "attention/dq_order.cuh"
#include "attention/norm_rotary_bwd.cuh"
#include "hopper/named_barrier.cuh"

namespace attn {

constexpr int kFStages = 3;            // query-tile buffers of the fused (DQ) loop
constexpr size_t kSmemOptin = 232448;  // 227 KB: the most one block may have on sm90

template <int D, int BK, int BQ>
constexpr size_t dkdv_sm90_smem() {
  return (size_t)(2 * BK + 2 * bwd_stages<BK>() * BQ) * D * sizeof(bf16) + 2 * bwd_stages<BK>() * BQ * sizeof(float) +
         BK * sizeof(int32_t) + (2 * bwd_stages<BK>() + 1) * sizeof(uint64_t) + 1024;
}

template <int D>
__host__ __device__ constexpr size_t fused_sm90_smem_used() {
  return (size_t)(2 * kB90Own + 2 * kFStages * kB90Walk) * D * sizeof(bf16) + 2 * kB90Own * kB90Walk * sizeof(bf16) +
         (size_t)kB90Walk * D * sizeof(float) + 2 * kFStages * kB90Walk * sizeof(float) + kB90Own * sizeof(int32_t) +
         (2 * kFStages + 1) * sizeof(uint64_t);
}
template <int D>
__host__ __device__ constexpr size_t fused_sm90_smem() {  // asked at launch: room to align the tiles where it fits
  return fused_sm90_smem_used<D>() + 1024 <= kSmemOptin ? fused_sm90_smem_used<D>() + 1024 : kSmemOptin;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The loop of one key block; smem_raw: the block's dynamic shared memory. DQ only: per query
// tile, the key blocks with a dQ share (dq_ranges), the count of shares added (dq_count) and the
// fp32 sums (dq_acc), as dq_order.cuh describes.
template <int D, int BK, int BQ, bool DQ>
__device__ __forceinline__ void key_owner_backward(unsigned char* smem_raw, const CUtensorMap* tmQ,
                                                   const CUtensorMap* tmK, const CUtensorMap* tmV,
                                                   const CUtensorMap* tmdO, const float* __restrict__ LSE2,
                                                   const float* __restrict__ drow, const int2* __restrict__ dq_ranges,
                                                   unsigned* __restrict__ dq_count, float* __restrict__ dq_acc,
                                                   const CUtensorMap* tmdK, const CUtensorMap* tmdV, bf16* __restrict__ dK,
                                                   bf16* __restrict__ dV, int T, int H, const MaskBounds& mb,
                                                   float scale_log2, float scale, const NormRotary& kn, bool heads_fastest) {
  using namespace sm90;
  static_assert(BK == 64 || BK == 128, "a block owns one or two warpgroups' keys");
  static_assert(!DQ || BK == kB90Own, "the dQ shares' order (dq_order.cuh) counts key blocks of kB90Own");
  static_assert(BQ == kB90Walk || (!DQ && BK == 128 && BQ == 128), "query tiles of 128: dK/dV alone, two warpgroups");
  constexpr int S = DQ ? kFStages : bwd_stages<BK>(), AHEAD = S - 2, THREADS = 2 * BK;
  // each tile's updates issued and waited for in its own step (above)
  constexpr bool SERIAL = !DQ && (BK != 128 || BQ != kB90Walk);
  unsigned char* base = align1024(smem_raw);
  if constexpr (DQ) {
    constexpr size_t kSlack = fused_sm90_smem<D>() - fused_sm90_smem_used<D>();
    if ((size_t)(base - smem_raw) > kSlack) __trap();  // the tiles would not fit once aligned
  }
  bf16* sK = reinterpret_cast<bf16*>(base);
  bf16* sV = sK + BK * D;
  bf16* sQ = sV + BK * D;       // S buffers
  bf16* sdO = sQ + S * BQ * D;  // S buffers
  bf16* sP = sdO + S * BQ * D;  // DQ: P^T, BK x BQ
  bf16* sdS = sP + (DQ ? BK * BQ : 0);                                // DQ: dS^T, BK x BQ
  float* sdQ = reinterpret_cast<float*>(sdS + (DQ ? BK * BQ : 0));    // DQ: BQ x D, a dQ share on its way out
  float* sLse = sdQ + (DQ ? BQ * D : 0);                              // S x BQ
  float* sDr = sLse + S * BQ;                                         // S x BQ
  int32_t* s_ids = reinterpret_cast<int32_t*>(sDr + S * BQ);          // BK document ids
  QueryTilePipe<S> pipe;
  pipe.full = reinterpret_cast<uint64_t*>(s_ids + BK);
  pipe.empty = pipe.full + S;
  uint64_t* kv_bar = pipe.empty + S;  // the K and V tiles' arrival
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x & 31;
  const int n_kb = (T + BK - 1) / BK, n_tiles = (T + BQ - 1) / BQ;
  const KeyBlock kbh = key_block_of<DQ>(n_kb, H, heads_fastest);  // DQ: the order dq_order.cuh needs (rising: walks down)
  const int kb = kbh.kb, k0 = kb * BK, h = kbh.h;
  // DQ: the thread that issues this block's dQ additions, dK and dV's stores and the counts. Not
  // thread 0 nor any thread that copies lse2, Drow (the first 2 BQ): its fence before each
  // addition then does not wait behind loads of its own (results/attention_design/README.md,
  // Loads, stores and the set-up of a block).
  const bool leader = threadIdx.x == 2 * BQ;
  static_assert(!DQ || THREADS > 2 * BQ, "the leader is a thread that loads nothing");

  const int key0 = k0 + wg * 64 + warp * 16 + (lane >> 2);  // this thread's keys: key0, key0 + 8
  int q_lo2[2], q_hi2[2];                                     // the queries each of them is kept by
  auto load_q_side = [&](int qt, int i) {  // query tile qt, the i-th of the walk
    pipe.template load<D, THREADS, BQ>(sQ, sdO, sLse, sDr, tmQ, tmdO, LSE2, drow, qt, i, T, h);
  };
  WalkAhead<AHEAD> ahead;  // tile[0] computed now, the others loaded or loading
  const TileWalk walk =
      begin_key_block<D, BK, BQ>(mb, k0, key0, T, h, s_ids, q_lo2, q_hi2, pipe, kv_bar, ahead, tmK, tmV, sK, sV, load_q_side,
                             kbh.rising);

  // DQ: each warpgroup's dQ matmul, its half of D's columns over all 128 keys (64 x DQN
  // accumulator). D = 128: the K tile's second 64-column panel; D = 64: 32 columns into the one
  // panel, 64 bytes into each 128-byte swizzled row (the swizzle applies to the address, so an
  // offset inside the row reads as the K-major descriptors' steps do). Before, at D = 64
  // warpgroup 0 alone took dQ; that branch on the warpgroup had the compiler serialize every
  // wgmma of the loop, and the split is faster (results/attention_design/README.md,
  // Loads, stores and the set-up of a block).
  constexpr int DQN = D / 2;  // the dQ columns a warpgroup computes
  const bf16* sK_half = sK + (D == 128 ? wg * BK * 64 : wg * 32);
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  float s[BQ / 8][4], dp[BQ / 8][4];         // S^T and dP^T: keys as rows
  uint32_t pa[BQ / 16][4], dsa[BQ / 16][4];  // without DQ: P^T and dS^T of the previous tile
  float dq[DQN / 8][4];                      // DQ: a dQ tile's 64 rows x this warpgroup's DQN columns
  const int dq_row = warp * 16 + (lane >> 2), dq_col = wg * DQN;
  int prev_tile = 0;       // DQ: the tile computed last (its dQ is in dq after the next matmuls)
  int pending = -1;        // DQ: the tile whose dQ addition the leader issued last, not yet counted
  int2 prev_range{1, 0};   // DQ: the key blocks with a share in prev_tile
  KeyNormRotary<D> knr;    // with kn.rstd: this thread's rstd and angles for dK's store

  // The updates of the tile in buffer st (issued one tile late, under the next tile's P^T, dS^T).
  auto issue_updates = [&](int st) {
    if constexpr (DQ) {
      gemm_ss_kmn<D, BQ / 16, BK, BQ>(dv, sP, wg * 64, sdO + st * BQ * D, true);
      gemm_ss_kmn<D, BQ / 16, BK, BQ>(dk, sdS, wg * 64, sQ + st * BQ * D, true);
      gemm_ss_mnmn<DQN, BK / 16, BK, BK>(dq, sdS, sK_half);
    } else {
      gemm_rs<D, BQ / 16, BQ>(dv, pa, sdO + st * BQ * D);
      gemm_rs<D, BQ / 16, BQ>(dk, dsa, sQ + st * BQ * D);
    }
  };
  // DQ: moves the dQ share in dq (of the previous tile) to the staging buffer; the caller then
  // fences and meets the other warpgroup at a barrier, and the leader adds it (add_dq_share).
  auto stage_dq = [&]() {
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
      for (int nb = 0; nb < DQN / 8; nb++)
        *reinterpret_cast<float2*>(sdQ + dq_tile_index<D>(dq_row + 8 * r, dq_col + nb * 8 + 2 * (lane & 3))) =
            make_float2(dq[nb][2 * r], dq[nb][2 * r + 1]);
  };
  // DQ: every thread runs these (uniform control flow); the leader alone issues and counts.
  // seen: the count read (relaxed) earlier in the step, so that the wait usually costs nothing;
  // the leader's fence in count_prev_then_add orders its addition after the earlier ones. The
  // previous share (issued a step ago, so normally landed) is counted at the same time.
  auto add_dq_share = [&](int qt, int2 range, unsigned seen) {  // after the staging is complete
    if (kb < range.x || kb > range.y) return;   // a walked tile with no kept pair: no share
    unsigned* count = dq_count + (size_t)h * n_tiles;
    const unsigned rank = dq_rank(kb, range.x, range.y, kbh.rising);
    if (seen != rank) wait_count(count + qt, rank);
    count_prev_then_add(count + (pending >= 0 ? pending : qt), pending >= 0,
                        dq_acc + ((size_t)h * n_tiles + qt) * BQ * D, sdQ, BQ * D * (int)sizeof(float), rank > 0,
                        leader);
    pending = qt;
  };

  // Per tile j: issue S^T_j, dP^T_j and tile j - 1's updates, then the load of tile j + AHEAD;
  // compute P^T_j, dS^T_j while the matmuls run. Without DQ they become the next A operands in
  // registers. With DQ, once every warp's matmuls are done, both warpgroups write P^T_j, dS^T_j
  // and stage dQ_{j-1}, and the leader adds it to dq_acc.
  int it = 0;
  while (ahead.tile[0] < walk.end) {
    const int st = it % S, st_prev = (it + S - 1) % S, qt = walk.tile(ahead.tile[0]);
    const int2 range = DQ ? dq_ranges[qt] : int2{1, 0};
    pipe.wait_full(it);
    const bf16* q_tile = sQ + st * BQ * D;
    const bf16* do_tile = sdO + st * BQ * D;
    wgmma_fence();
    gemm_ss<BQ, D / 16, BK>(s, sK, wg * 64, q_tile, false);
    gemm_ss<BQ, D / 16, BK>(dp, sV, wg * 64, do_tile, false);
    wgmma_commit();
    if (!SERIAL && it > 0) {
      if constexpr (DQ) wgmma_fence();  // dq was read by ordinary instructions (the staging)
      issue_updates(st_prev);
    }
    wgmma_commit();
    if (ahead.tile[AHEAD] < walk.end) {
      pipe.wait_empty(it + AHEAD);
      load_q_side(walk.tile(ahead.tile[AHEAD]), it + AHEAD);
    }
    TileKind kind_after;
    const int after = walk.next(ahead.tile[AHEAD] + 1, kind_after);
    const unsigned seen = DQ && it > 0 ? ld_relaxed(dq_count + (size_t)h * n_tiles + prev_tile) : 0u;

    wgmma_wait<1>();  // S^T_j, dP^T_j
    reg_fence(s);
    reg_fence(dp);
    const float* lse_t = sLse + st * BQ;
    const float* dr_t = sDr + st * BQ;
    if (ahead.kind[0] != kFull) apply_mask_interval(s, q_lo2, q_hi2, qt * BQ + 2 * (lane & 3));
    probs_and_dscores_t(s, dp, lse_t, dr_t, scale_log2, lane);
    wgmma_wait<0>();  // tile j - 1's updates (they read P^T, dS^T and Q, dO of j - 1)
    reg_fence(dk);
    reg_fence(dv);
    if constexpr (DQ) reg_fence(dq);
    if (!SERIAL && it > 0) pipe.release(it - 1);
    if constexpr (DQ) {
      bulk_wait_read(leader);  // the staging buffer is free again (the addition is counted with the next)
      hopper::named_sync<hopper::kAttnBothWarpgroupsBar, 256>();  // both warpgroups' matmuls have read P^T, dS^T
      stage_acc_sw128<BK>(sP, s, wg * 64 + warp * 16, lane);
      stage_acc_sw128<BK>(sdS, dp, wg * 64 + warp * 16, lane);
      if (it > 0) stage_dq();
      fence_proxy_async();
      hopper::named_sync<hopper::kAttnBothWarpgroupsBar, 256>();  // tile j's P^T, dS^T and tile j - 1's dQ share written by both warpgroups
      if (it > 0) add_dq_share(prev_tile, prev_range, seen);
      prev_tile = qt;
      prev_range = range;
    } else {
#pragma unroll
      for (int j = 0; j < BQ / 16; j++) {
        c_to_a(pa[j], s[2 * j], s[2 * j + 1]);
        c_to_a(dsa[j], dp[2 * j], dp[2 * j + 1]);
      }
      if constexpr (SERIAL) {
        wgmma_fence();
        issue_updates(st);
        wgmma_commit();
        wgmma_wait<0>();
        reg_fence(dk);
        reg_fence(dv);
        pipe.release(it);
      }
    }
    ahead.push(after, kind_after);
    it++;
  }
  // The end: the last tile's updates, then dV and dK out. With DQ, the last dQ share too, and dV,
  // dK go out through shared memory (the query-tile buffers, free once the walk is done) by the
  // TMA, one bulk store a 64-column panel instead of each thread's 4-byte pieces of rows (about
  // 4096 partial-sector writes a block for the load/store unit to issue; results/attention_design/README.md,
  // Loads, stores and the set-up of a block). k's norm + rotary loads are issued first, so
  // that their latency hides under the last matmuls.
  const int krow = key0 - k0;  // this thread's first key within the block's K tile
  auto k_tile_pair = [&](int r, int nb) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(sK + sw128<BK>(krow + 8 * r, nb) + 2 * (lane & 3)));
  };
  unsigned seen = 0;  // DQ: the count of the last tile's shares, read under the matmuls as in the loop
  if (!SERIAL && it > 0) {
    wgmma_fence();
    issue_updates((it - 1) % S);
    wgmma_commit();
    if (kn.rstd) knr.load(kn, key0, T, H, h, lane);
    if constexpr (DQ) seen = ld_relaxed(dq_count + (size_t)h * n_tiles + prev_tile);
    wgmma_wait<0>();
    reg_fence(dk);
    reg_fence(dv);
    if constexpr (DQ) reg_fence(dq);
  } else if (kn.rstd) {
    knr.load(kn, key0, T, H, h, lane);
  }
  if constexpr (DQ) {
    bf16* s_dv = sQ;           // BK x D each, SW128 (hopper/wgmma.cuh): the S query and dO buffers
    bf16* s_dk = sQ + BK * D;  // hold 2 S BQ x D >= 2 BK x D
    static_assert(2 * S * BQ >= 2 * BK, "dV and dK fit the query-tile buffers");
    bulk_wait_read(leader);
    hopper::named_sync<hopper::kAttnBothWarpgroupsBar, 256>();  // both warpgroups' last matmuls done: the buffers and the staging are free
    if (it > 0) stage_dq();
    if (kn.rstd) {  // dk <- the gradient of the pre-norm k, or scale dK
      knr.apply(dk, scale, k_tile_pair);
    } else {
#pragma unroll
      for (int nb = 0; nb < D / 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[nb][e] *= scale;
    }
    stage_acc_sw128<BK>(s_dv, dv, wg * 64 + warp * 16, lane);
    stage_acc_sw128<BK>(s_dk, dk, wg * 64 + warp * 16, lane);
    fence_proxy_async();
    hopper::named_sync<hopper::kAttnBothWarpgroupsBar, 256>();
    if (it > 0) add_dq_share(prev_tile, prev_range, seen);
    // The last share's count matters only to the blocks that come after it on its tile: none
    // when it is the tile's last (under a window, the top tile of the walk), and then this
    // block's end does not wait for the addition to land.
    const bool followed = pending != prev_tile || dq_rank(kb, prev_range.x, prev_range.y, kbh.rising) !=
                                                      (unsigned)(prev_range.y - prev_range.x);
    if (pending >= 0 && followed) bulk_done_signal(dq_count + (size_t)h * n_tiles + pending, leader);
    if (leader) {
      tma_store_tile<D, BK>(s_dv, tmdV, k0, h);
      tma_store_tile<D, BK>(s_dk, tmdK, k0, h);
      store_commit();
    }
    bulk_wait_read(leader);  // before the block's shared memory goes
  } else {
    const float one[2] = {1.f, 1.f}, dk_scale[2] = {scale, scale};
    store_rows<D>(dV, dv, key0, T, H, h, lane, one);
    if (kn.rstd) {
      knr.apply(dk, scale, k_tile_pair);
      store_rows<D>(dK, dk, key0, T, H, h, lane, one);
    } else {
      store_rows<D>(dK, dk, key0, T, H, h, lane, dk_scale);
    }
  }
}
#endif

// dK and dV alone (the two-kernel backward; dQ comes from bwd_dq_sm90.cuh), BK keys a block over
// query tiles of BQ: 128 (two warpgroups, one block an SM) over 64 or 128, or 64 (one warpgroup,
// three blocks an SM) over 64.
template <int D, int BK, int BQ>
__global__ void __launch_bounds__(2 * BK, BK == 64 ? 3 : 1)
    attention_bwd_dkdv_sm90_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                                   const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO,
                                   const float* __restrict__ LSE2, const float* __restrict__ drow, bf16* __restrict__ dK,
                                   bf16* __restrict__ dV, int T, int H, MaskBounds mb, float scale_log2, float scale,
                                   NormRotary kn, bool heads_fastest) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  key_owner_backward<D, BK, BQ, false>(smem_raw, &tmQ, &tmK, &tmV, &tmdO, LSE2, drow, nullptr, nullptr, nullptr, nullptr, nullptr,
                                   dK, dV, T, H, mb, scale_log2, scale, kn, heads_fastest);
#else
  __trap();  // built for another architecture: the launcher only picks this kernel on sm90
#endif
}

// dK, dV and the block's dQ shares in one pass (the fused backward); dK and dV are written
// through tensor maps with boxes of kB90Own rows (tma_tiles.cuh make_tile_map). HEADS_FASTEST: the blocks'
// order (tile_scheduler.cuh key_block_at), a constant so that the masks that go heads fastest
// carry no code for the last head's rising order.
template <int D, bool HEADS_FASTEST>
__global__ void __launch_bounds__(kB90Threads, 1)
    attention_bwd_fused_sm90_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                                    const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO,
                                    const float* __restrict__ LSE2, const float* __restrict__ drow,
                                    const int2* __restrict__ dq_ranges, unsigned* __restrict__ dq_count,
                                    float* __restrict__ dq_acc, const __grid_constant__ CUtensorMap tmdK,
                                    const __grid_constant__ CUtensorMap tmdV, int T, int H, MaskBounds mb, float scale_log2,
                                    float scale, NormRotary kn) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  key_owner_backward<D, kB90Own, kB90Walk, true>(smem_raw, &tmQ, &tmK, &tmV, &tmdO, LSE2, drow, dq_ranges, dq_count, dq_acc,
                                                 &tmdK, &tmdV, nullptr, nullptr, T, H, mb, scale_log2, scale, kn, HEADS_FASTEST);
#else
  __trap();  // built for another architecture: the launcher only picks this kernel on sm90
#endif
}

}  // namespace attn
