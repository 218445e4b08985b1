// Backward of fused masked attention on Hopper (sm90a: wgmma), same math as attention_bwd.cu:
//
//   P = exp(S - lse)  (S = scale Q K^T + mask, recomputed),  Drow = rowsum(dO * O) and lse in
//   log2 units from attention_bwd.cu's pre-pass
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - Drow),  dQ = scale dS K,  dK = scale dS^T Q
//   Q, K, V, dO, dQ, dK, dV: bf16 [T, H, D];  lse, Drow: fp32 [H, T];  D in {64, 128}.
//
// Two ways, both deterministic (dispatch.cu picks one: KernelChoice in attention.h):
// - fused (D = 128 by default): one block of two warpgroups owns 128 keys (64 a warpgroup) and
//   walks the query tiles of 64 that see them. Per tile, each warpgroup computes
//     S^T = K Q^T, dP^T = V dO^T          wgmma, operands in shared memory
//     P^T, dS^T                            registers, then shared memory
//     dV += P^T dO, dK += dS^T Q           wgmma, left running under the next tile's P^T, dS^T
//     dQ_share = dS K                      wgmma over the block's 128 keys (half of D each)
//   and each query tile's dQ shares are added into fp32 sums by the tensor-memory engine in a
//   fixed order (decreasing key block: dq_ranges / dq_count below), then converted to bf16.
// - two kernels: dK/dV as above without dQ (P^T, dS^T stay in registers as the next wgmma's A),
//   and dQ from its own kernel, one block per 128 queries walking key tiles of 64 (S = Q K^T,
//   dP = dO V^T again; dQ += dS K), on a second stream beside dK/dV.
// Tiles stream through shared buffers with cp.async, signalled by mbarriers (wgmma.cuh TilePipe:
// a buffer is rewritten once every warp has released it).
#include <cmath>

#include "attention/dq_order.cuh"
#include "attention/kernels.h"
#include "attention/own_intervals.cuh"
#include "attention/softmax.cuh"
#include "attention/tile_scheduler.cuh"
#include "attention/wgmma.cuh"

namespace attn {

constexpr int kB90Threads = 256, kB90Stages = 4;
[[maybe_unused]] constexpr int kB90Ahead = kB90Stages - 2;  // tiles loaded ahead of the one computed

__device__ __forceinline__ unsigned char* align1024(unsigned char* p) {
  return p + ((1024 - (smem_addr(p) & 1023)) & 1023);
}

// This thread's copies of query tile qt for the kernels that own keys: Q and dO rows into
// buffer st of sQ / sdO (SW128 tiles of kB90Walk rows), their lse2 and Drow into sLse / sDr.
template <int D>
__device__ __forceinline__ void load_query_tile(bf16* sQ, bf16* sdO, float* sLse, float* sDr, const bf16* Q,
                                                const bf16* dO, const float* LSE2, const float* drow, int qt, int st,
                                                int T, int H, int h) {
  constexpr int BQ = kB90Walk;
  const int qs = qt * BQ;
  sm90::load_tile<D, BQ, kB90Threads>(sQ + st * BQ * D, Q, qs, T, H, h);
  sm90::load_tile<D, BQ, kB90Threads>(sdO + st * BQ * D, dO, qs, T, H, h);
  for (int r = threadIdx.x; r < 2 * BQ; r += kB90Threads) {
    const int j = r % BQ, row = qs + j;
    const float* src = (r < BQ ? LSE2 : drow) + (size_t)h * T + (row < T ? row : 0);
    cp_async4(smem_addr((r < BQ ? sLse : sDr) + st * BQ + j), src, row < T);
  }
}

// P^T = 2^(scale_log2 S^T - lse2) and dS^T = P^T (dP^T - Drow), in place, on a key-owning warp's
// 16 x BQ tile (keys as rows; this thread's columns, queries of the tile, are 2t and 2t + 1 of
// each n8 block); lse_t, dr_t: the tile's lse2 and Drow in shared memory.
template <int NB>
__device__ __forceinline__ void probs_and_dscores_t(float (&s)[NB][4], float (&dp)[NB][4], const float* lse_t,
                                                    const float* dr_t, float scale_log2, int lane) {
#pragma unroll
  for (int nb = 0; nb < NB; nb++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int j = nb * 8 + 2 * (lane & 3) + (e & 1);  // query within the tile
      const float p = fast_exp2(fmaf(s[nb][e], scale_log2, -lse_t[j]));
      s[nb][e] = p;
      dp[nb][e] = p * (dp[nb][e] - dr_t[j]);
    }
}

// The start both key-owning kernels share: the queries each of this thread's keys (key0,
// key0 + 8) is kept by, the block's walk over the query tiles that see its keys, the tile pipe,
// and the first loads (K and V, which ride on the first query tile's arrival, and the first
// AHEAD query tiles through load_q_side). Returns the walk.
template <int D, int AHEAD, typename Pipe, typename LoadQuerySide>
__device__ __forceinline__ TileWalk begin_key_block(const MaskBounds& mb, int k0, int key0, int T, int H, int h, int32_t* s_ids,
                                                    int (&q_lo2)[2], int (&q_hi2)[2], Pipe& pipe, WalkAhead<AHEAD>& ahead,
                                                    const bf16* K, const bf16* V, bf16* sK, bf16* sV,
                                                    LoadQuerySide& load_q_side) {
  constexpr int BK = kB90Own, BQ = kB90Walk;
  const int keys[2] = {key0, key0 + 8};
  int q_lo, q_hi;  // the block's query range
  own_intervals<BK, 2>(mb, k0, false, s_ids, keys, q_lo2, q_hi2, q_lo, q_hi);
  const TileWalk walk(mb, k0, k0 + BK, BQ, q_hi >= q_lo ? q_hi / BQ + 1 : 0, false);
  if (threadIdx.x == 0) pipe.init(kB90Threads);
  __syncthreads();
  ahead.start(walk, mb, q_lo / BQ);
  sm90::load_tile<D, BK, kB90Threads>(sK, K, k0, T, H, h);
  sm90::load_tile<D, BK, kB90Threads>(sV, V, k0, T, H, h);
#pragma unroll
  for (int a = 0; a < AHEAD; a++)
    if (ahead.tile[a] < walk.end) load_q_side(ahead.tile[a], a);
  return walk;
}

// ---------------------------------------------------------------------------------- dK, dV
template <int D>
constexpr size_t dkdv_sm90_smem() {
  return (size_t)(2 * kB90Own + 2 * kB90Stages * kB90Walk) * D * sizeof(bf16) + 2 * kB90Stages * kB90Walk * sizeof(float) +
         kB90Own * sizeof(int32_t) + 2 * kB90Stages * sizeof(uint64_t) + 1024;
}

template <int D>
__global__ void __launch_bounds__(kB90Threads, 1)
    attention_bwd_dkdv_sm90_kernel(const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V,
                                   const bf16* __restrict__ dO, const float* __restrict__ LSE2, const float* __restrict__ drow,
                                   bf16* __restrict__ dK, bf16* __restrict__ dV, int T, int H, MaskBounds mb,
                                   float scale_log2, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  constexpr int BK = kB90Own, BQ = kB90Walk, S = kB90Stages;
  extern __shared__ unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(align1024(smem_raw));
  bf16* sV = sK + BK * D;
  bf16* sQ = sV + BK * D;         // S buffers
  bf16* sdO = sQ + S * BQ * D;    // S buffers
  float* sLse = reinterpret_cast<float*>(sdO + S * BQ * D);  // S x BQ
  float* sDr = sLse + S * BQ;                                 // S x BQ
  int32_t* s_ids = reinterpret_cast<int32_t*>(sDr + S * BQ); // BK document ids
  TilePipe<S> pipe;
  pipe.full = reinterpret_cast<uint64_t*>(s_ids + BK);
  pipe.empty = pipe.full + S;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x & 31;
  const int k0 = blockIdx.x * BK, h = blockIdx.y;

  const int key0 = k0 + wg * 64 + warp * 16 + (lane >> 2);  // this thread's keys: key0, key0 + 8
  int q_lo2[2], q_hi2[2];                                     // the queries each of them is kept by
  auto load_q_side = [&](int qt, int i) {  // this thread's copies of query tile qt, the i-th of the walk
    load_query_tile<D>(sQ, sdO, sLse, sDr, Q, dO, LSE2, drow, qt, i % S, T, H, h);
    pipe.arrive_full(i);
  };
  WalkAhead<kB90Ahead> ahead;  // tile[0] computed now, the others loaded or loading
  const TileWalk walk = begin_key_block<D>(mb, k0, key0, T, H, h, s_ids, q_lo2, q_hi2, pipe, ahead, K, V, sK, sV, load_q_side);

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  uint32_t pa[BQ / 16][4], dsa[BQ / 16][4];  // P^T and dS^T of the previous tile
  float s[BQ / 8][4], dp[BQ / 8][4];         // S^T and dP^T: keys as rows
  // Per tile j: issue S^T_j, dP^T_j and the dV, dK updates of tile j - 1, then the load of
  // tile j + 2; P^T_j and dS^T_j are computed while the updates run.
  int it = 0;
  while (ahead.tile[0] < walk.end) {
    const int st = it % S, st_prev = (it + S - 1) % S;
    pipe.wait_full(it);
    const bf16* q_tile = sQ + st * BQ * D;
    const bf16* do_tile = sdO + st * BQ * D;
    wgmma_fence();
    gemm_ss<BQ, D / 16, BK>(s, sK, wg * 64, q_tile, false);
    gemm_ss<BQ, D / 16, BK>(dp, sV, wg * 64, do_tile, false);
    wgmma_commit();
    if (it > 0) {
      gemm_rs<D, BQ / 16, BQ>(dv, pa, sdO + st_prev * BQ * D);
      gemm_rs<D, BQ / 16, BQ>(dk, dsa, sQ + st_prev * BQ * D);
    }
    wgmma_commit();
    if (ahead.tile[kB90Ahead] < walk.end) {
      pipe.wait_empty(it + kB90Ahead);
      load_q_side(ahead.tile[kB90Ahead], it + kB90Ahead);
    }
    TileKind kind_after;
    const int after = walk.next(mb, ahead.tile[kB90Ahead] + 1, kind_after);

    wgmma_wait<1>();  // S^T_j, dP^T_j
    reg_fence(s);
    reg_fence(dp);
    const float* lse_t = sLse + st * BQ;
    const float* dr_t = sDr + st * BQ;
    if (ahead.kind[0] != kFull) apply_mask_interval(s, q_lo2, q_hi2, ahead.tile[0] * BQ + 2 * (lane & 3));
    probs_and_dscores_t(s, dp, lse_t, dr_t, scale_log2, lane);
    wgmma_wait<0>();  // the updates of tile j - 1 (they read pa, dsa)
    reg_fence(dk);
    reg_fence(dv);
    if (it > 0) pipe.release(it - 1);
#pragma unroll
    for (int j = 0; j < BQ / 16; j++) {
      c_to_a(pa[j], s[2 * j], s[2 * j + 1]);
      c_to_a(dsa[j], dp[2 * j], dp[2 * j + 1]);
    }
    ahead.push(after, kind_after);
    it++;
  }
  if (it > 0) {
    const int st = (it - 1) % S;
    wgmma_fence();
    gemm_rs<D, BQ / 16, BQ>(dv, pa, sdO + st * BQ * D);
    gemm_rs<D, BQ / 16, BQ>(dk, dsa, sQ + st * BQ * D);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(dk);
    reg_fence(dv);
  }
  cp_async_wait<0>();
  const float dk_scale[2] = {scale, scale}, dv_scale[2] = {1.f, 1.f};
  store_rows<D>(dK, dk, key0, T, H, h, lane, dk_scale);
  store_rows<D>(dV, dv, key0, T, H, h, lane, dv_scale);
#else
  __trap();  // built for another architecture: the launcher only picks this kernel on sm90
#endif
}

// ---------------------------------------------------------------------------------- dQ
template <int D>
constexpr size_t dq_sm90_smem() {
  return (size_t)(2 * kB90Own + 2 * kB90Stages * kB90Walk) * D * sizeof(bf16) + kB90Own * sizeof(int32_t) +
         2 * kB90Stages * sizeof(uint64_t) + 1024;
}

template <int D>
__global__ void __launch_bounds__(kB90Threads, 1)
    attention_bwd_dq_sm90_kernel(const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V,
                                 const bf16* __restrict__ dO, const float* __restrict__ LSE2, const float* __restrict__ drow,
                                 bf16* __restrict__ dQ, int T, int H, MaskBounds mb, float scale_log2, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  constexpr int BQ = kB90Own, BK = kB90Walk, S = kB90Stages;
  extern __shared__ unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(align1024(smem_raw));
  bf16* sdO = sQ + BQ * D;
  bf16* sK = sdO + BQ * D;       // S buffers
  bf16* sV = sK + S * BK * D;    // S buffers
  int32_t* s_ids = reinterpret_cast<int32_t*>(sV + S * BK * D);  // BQ document ids
  TilePipe<S> pipe;
  pipe.full = reinterpret_cast<uint64_t*>(s_ids + BQ);
  pipe.empty = pipe.full + S;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x & 31;
  const int n_qt = (T + BQ - 1) / BQ;
  const int q0 = query_tile_longest_first(n_qt) * BQ, h = blockIdx.y;

  const int row0 = q0 + wg * 64 + warp * 16 + (lane >> 2);  // this thread's rows: row0, row0 + 8
  const int rows[2] = {row0, row0 + 8};
  int k_lo, k_hi, key_lo[2], key_hi[2];  // the block's key range; the keys each row keeps
  own_intervals<BQ, 2>(mb, q0, true, s_ids, rows, key_lo, key_hi, k_lo, k_hi);
  const TileWalk walk(mb, q0, q0 + BQ, BK, k_hi >= k_lo ? k_hi / BK + 1 : 0, true);
  auto load_kv = [&](int kt, int i) {  // this thread's copies of key tile kt, the i-th of the walk
    load_tile<D, BK, kB90Threads>(sK + (i % S) * BK * D, K, kt * BK, T, H, h);
    load_tile<D, BK, kB90Threads>(sV + (i % S) * BK * D, V, kt * BK, T, H, h);
    pipe.arrive_full(i);
  };
  if (threadIdx.x == 0) pipe.init(kB90Threads);
  __syncthreads();

  float lse2[2], dr[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = row0 + 8 * r;
    lse2[r] = row < T ? LSE2[(size_t)h * T + row] : INFINITY;
    dr[r] = row < T ? drow[(size_t)h * T + row] : 0.f;
  }

  WalkAhead<kB90Ahead> ahead;  // tile[0] computed now, the others loaded or loading
  ahead.start(walk, mb, k_lo / BK);
  load_tile<D, BQ, kB90Threads>(sQ, Q, q0, T, H, h);
  load_tile<D, BQ, kB90Threads>(sdO, dO, q0, T, H, h);
#pragma unroll
  for (int a = 0; a < kB90Ahead; a++)  // Q and dO ride on the first tile's arrival
    if (ahead.tile[a] < walk.end) load_kv(ahead.tile[a], a);

  float acc[D / 8][4] = {};
  uint32_t dsa[BK / 16][4];  // dS of the previous tile
  float s[BK / 8][4], dp[BK / 8][4];
  // Per tile j: issue S_j, dP_j and dQ += dS_{j-1} K_{j-1}, then the load of tile j + 2; dS_j
  // is computed while the update runs.
  int it = 0;
  while (ahead.tile[0] < walk.end) {
    const int st = it % S, st_prev = (it + S - 1) % S;
    pipe.wait_full(it);
    wgmma_fence();
    gemm_ss<BK, D / 16, BQ>(s, sQ, wg * 64, sK + st * BK * D, false);
    gemm_ss<BK, D / 16, BQ>(dp, sdO, wg * 64, sV + st * BK * D, false);
    wgmma_commit();
    if (it > 0) gemm_rs<D, BK / 16, BK>(acc, dsa, sK + st_prev * BK * D);
    wgmma_commit();
    if (ahead.tile[kB90Ahead] < walk.end) {
      pipe.wait_empty(it + kB90Ahead);
      load_kv(ahead.tile[kB90Ahead], it + kB90Ahead);
    }
    TileKind kind_after;
    const int after = walk.next(mb, ahead.tile[kB90Ahead] + 1, kind_after);

    wgmma_wait<1>();  // S_j, dP_j
    reg_fence(s);
    reg_fence(dp);
    if (ahead.kind[0] != kFull) apply_mask_interval(s, key_lo, key_hi, ahead.tile[0] * BK + 2 * (lane & 3));
#pragma unroll
    for (int nb = 0; nb < BK / 8; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float p = fast_exp2(fmaf(s[nb][e], scale_log2, -lse2[e >> 1]));
        dp[nb][e] = p * (dp[nb][e] - dr[e >> 1]);  // dS
      }
    wgmma_wait<0>();  // the update of tile j - 1 (it reads dsa)
    reg_fence(acc);
    if (it > 0) pipe.release(it - 1);
#pragma unroll
    for (int j = 0; j < BK / 16; j++) c_to_a(dsa[j], dp[2 * j], dp[2 * j + 1]);
    ahead.push(after, kind_after);
    it++;
  }
  if (it > 0) {
    wgmma_fence();
    gemm_rs<D, BK / 16, BK>(acc, dsa, sK + ((it - 1) % S) * BK * D);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(acc);
  }
  cp_async_wait<0>();
  const float dq_scale[2] = {scale, scale};
  store_rows<D>(dQ, acc, row0, T, H, h, lane, dq_scale);
#else
  __trap();  // built for another architecture: the launcher only picks this kernel on sm90
#endif
}

// ---------------------------------------------------------------------------------- dK, dV and dQ in one pass
// As the dK/dV kernel, plus per query tile the block's share of dQ = dS K (64 rows x D over its
// 128 keys), staged in shared memory and added in order as above. P^T and dS^T go through shared
// memory (dQ needs both warpgroups' dS^T), so the accumulators at any time are at most S^T, dP^T,
// dK, dV and one dQ tile. Three query-tile buffers (one ahead) make room for the staging.
constexpr int kFStages = 3;
constexpr size_t kSmemOptin = 232448;  // 227 KB: the most one block may have on sm90

template <int D>
__host__ __device__ constexpr size_t fused_sm90_smem_used() {
  return (size_t)(2 * kB90Own + 2 * kFStages * kB90Walk) * D * sizeof(bf16) + 2 * kB90Own * kB90Walk * sizeof(bf16) +
         (size_t)kB90Walk * D * sizeof(float) + 2 * kFStages * kB90Walk * sizeof(float) + kB90Own * sizeof(int32_t) +
         2 * kFStages * sizeof(uint64_t);
}
template <int D>
__host__ __device__ constexpr size_t fused_sm90_smem() {  // asked at launch: room to align the tiles where it fits
  return fused_sm90_smem_used<D>() + 1024 <= kSmemOptin ? fused_sm90_smem_used<D>() + 1024 : kSmemOptin;
}

template <int D>
__global__ void __launch_bounds__(kB90Threads, 1)
    attention_bwd_fused_sm90_kernel(const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V,
                                    const bf16* __restrict__ dO, const float* __restrict__ LSE2, const float* __restrict__ drow,
                                    const int2* __restrict__ dq_ranges, unsigned* __restrict__ dq_count,
                                    float* __restrict__ dq_acc, bf16* __restrict__ dK, bf16* __restrict__ dV, int T, int H,
                                    MaskBounds mb, float scale_log2, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  constexpr int BK = kB90Own, BQ = kB90Walk, S = kFStages, AHEAD = S - 2;
  constexpr size_t kSlack = fused_sm90_smem<D>() - fused_sm90_smem_used<D>();
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* base = align1024(smem_raw);
  if ((size_t)(base - smem_raw) > kSlack) __trap();  // the tiles would not fit once aligned
  bf16* sK = reinterpret_cast<bf16*>(base);
  bf16* sV = sK + BK * D;
  bf16* sQ = sV + BK * D;       // S buffers
  bf16* sdO = sQ + S * BQ * D;  // S buffers
  bf16* sP = sdO + S * BQ * D;  // P^T: BK x BQ
  bf16* sdS = sP + BK * BQ;     // dS^T: BK x BQ
  float* sdQ = reinterpret_cast<float*>(sdS + BK * BQ);  // BQ x D: a dQ share on its way out
  float* sLse = sdQ + BQ * D;                             // S x BQ
  float* sDr = sLse + S * BQ;                             // S x BQ
  int32_t* s_ids = reinterpret_cast<int32_t*>(sDr + S * BQ);  // BK document ids
  TilePipe<S> pipe;
  pipe.full = reinterpret_cast<uint64_t*>(s_ids + BK);
  pipe.empty = pipe.full + S;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x & 31;
  const int n_kb = (T + BK - 1) / BK, n_tiles = (T + BQ - 1) / BQ;
  const int kb = key_block_last_first(n_kb), k0 = kb * BK, h = blockIdx.y;  // the order dq_order.cuh needs
  const bool leader = threadIdx.x == 0;  // issues this block's dQ additions

  const int key0 = k0 + wg * 64 + warp * 16 + (lane >> 2);  // this thread's keys: key0, key0 + 8
  int q_lo2[2], q_hi2[2];                                     // the queries each of them is kept by
  auto load_q_side = [&](int qt, int i) {  // this thread's copies of query tile qt, the i-th of the walk
    load_query_tile<D>(sQ, sdO, sLse, sDr, Q, dO, LSE2, drow, qt, i % S, T, H, h);
    pipe.arrive_full(i);
  };
  WalkAhead<AHEAD> ahead;  // tile[0] computed now, the others loaded or loading
  const TileWalk walk = begin_key_block<D>(mb, k0, key0, T, H, h, s_ids, q_lo2, q_hi2, pipe, ahead, K, V, sK, sV, load_q_side);

  // Each warpgroup's dQ matmul (64 x 64 accumulator): D = 128, its 64-column half of D over all
  // 128 keys; D = 64, warpgroup 0 alone (a branch on the warpgroup: those wgmmas get serialized).
  const bf16* sK_half = sK + (D == 128 ? wg * BK * 64 : 0);
  const bool dq_wg = D == 128 || wg == 0;
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  float s[BQ / 8][4], dp[BQ / 8][4];  // S^T and dP^T: keys as rows
  float dq[8][4];                     // a dQ tile's 64 rows x this warpgroup's 64 columns
  const int dq_row = warp * 16 + (lane >> 2), dq_col = D == 128 ? wg * 64 : 0;
  int prev_tile = 0;       // the tile computed last (its dQ is in dq after the next matmuls)
  int pending = -1;        // the tile whose dQ addition the leader issued last, not yet counted
  int2 prev_range{1, 0};   // the key blocks with a share in prev_tile

  // Moves the dQ share in dq (of the previous tile) to the staging buffer; the caller then fences
  // and meets the other warpgroup at a barrier, and the leader adds it (add_dq_share).
  auto stage_dq = [&]() {
    if (!dq_wg) return;
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
      for (int nb = 0; nb < 8; nb++)
        *reinterpret_cast<float2*>(sdQ + dq_tile_index<D>(dq_row + 8 * r, dq_col + nb * 8 + 2 * (lane & 3))) =
            make_float2(dq[nb][2 * r], dq[nb][2 * r + 1]);
  };
  // Every thread runs these (uniform control flow); the leader alone issues and counts.
  // seen: the count read (relaxed) earlier in the step, so that the wait usually costs nothing;
  // the leader's fence in count_prev_then_add orders its addition after the earlier ones. The
  // previous share (issued a step ago, so normally landed) is counted at the same time.
  auto add_dq_share = [&](int qt, int2 range, unsigned seen) {  // after the staging is complete
    if (kb < range.x || kb > range.y) return;   // a walked tile with no kept pair: no share
    unsigned* count = dq_count + (size_t)h * n_tiles;
    const unsigned rank = range.y - kb;
    if (seen != rank) wait_count(count + qt, rank);
    count_prev_then_add(count + (pending >= 0 ? pending : qt), pending >= 0, dq_acc + ((size_t)h * n_tiles + qt) * BQ * D,
                        sdQ, BQ * D * (int)sizeof(float), rank > 0, leader);
    pending = qt;
  };
  auto finish_pending = [&]() {  // the last addition has landed: count it
    if (pending >= 0) bulk_done_signal(dq_count + (size_t)h * n_tiles + pending, leader);
    pending = -1;
  };

  // Per tile j: issue S^T_j, dP^T_j and tile j - 1's dV, dK, dQ matmuls (P^T, dS^T in shared
  // memory); load tile j + 1; compute P^T_j, dS^T_j while the matmuls run; once every warp's
  // matmuls are done: write P^T_j, dS^T_j and stage dQ_{j-1}; the leader adds it to dq_acc.
  int it = 0;
  while (ahead.tile[0] < walk.end) {
    const int st = it % S, st_prev = (it + S - 1) % S, qt = ahead.tile[0];
    const int2 range = dq_ranges[qt];
    pipe.wait_full(it);
    const bf16* q_tile = sQ + st * BQ * D;
    const bf16* do_tile = sdO + st * BQ * D;
    wgmma_fence();
    gemm_ss<BQ, D / 16, BK>(s, sK, wg * 64, q_tile, false);
    gemm_ss<BQ, D / 16, BK>(dp, sV, wg * 64, do_tile, false);
    wgmma_commit();
    if (it > 0) {
      wgmma_fence();  // dq was read by ordinary instructions (the staging)
      gemm_ss_kmn<D, BQ / 16, BK, BQ>(dv, sP, wg * 64, sdO + st_prev * BQ * D, true);
      gemm_ss_kmn<D, BQ / 16, BK, BQ>(dk, sdS, wg * 64, sQ + st_prev * BQ * D, true);
      if (dq_wg) gemm_ss_mnmn<64, BK / 16, BK, BK>(dq, sdS, sK_half);
    }
    wgmma_commit();
    if (ahead.tile[AHEAD] < walk.end) {
      pipe.wait_empty(it + AHEAD);
      load_q_side(ahead.tile[AHEAD], it + AHEAD);
    }
    TileKind kind_after;
    const int after = walk.next(mb, ahead.tile[AHEAD] + 1, kind_after);
    const unsigned seen = it > 0 ? ld_relaxed(dq_count + (size_t)h * n_tiles + prev_tile) : 0u;

    wgmma_wait<1>();  // S^T_j, dP^T_j
    reg_fence(s);
    reg_fence(dp);
    const float* lse_t = sLse + st * BQ;
    const float* dr_t = sDr + st * BQ;
    if (ahead.kind[0] != kFull) apply_mask_interval(s, q_lo2, q_hi2, qt * BQ + 2 * (lane & 3));
    probs_and_dscores_t(s, dp, lse_t, dr_t, scale_log2, lane);
    wgmma_wait<0>();  // tile j - 1's matmuls: they read the shared P^T, dS^T and Q, dO of j - 1
    reg_fence(dk);
    reg_fence(dv);
    reg_fence(dq);
    if (it > 0) pipe.release(it - 1);
    bulk_wait_read(leader);  // the staging buffer is free again (the addition is counted with the next)
    named_barrier_256();           // both warpgroups' matmuls have read P^T, dS^T
    const int prow = wg * 64 + warp * 16 + (lane >> 2);
#pragma unroll
    for (int nb = 0; nb < BQ / 8; nb++)
#pragma unroll
      for (int r = 0; r < 2; r++) {
        const int o = sw128<BK>(prow + 8 * r, nb) + 2 * (lane & 3);
        *reinterpret_cast<uint32_t*>(sP + o) = pack_bf16(s[nb][2 * r], s[nb][2 * r + 1]);
        *reinterpret_cast<uint32_t*>(sdS + o) = pack_bf16(dp[nb][2 * r], dp[nb][2 * r + 1]);
      }
    if (it > 0) stage_dq();
    fence_proxy_async();
    named_barrier_256();  // tile j's P^T, dS^T and tile j - 1's dQ share written by both warpgroups
    if (it > 0) add_dq_share(prev_tile, prev_range, seen);
    prev_tile = qt;
    prev_range = range;
    ahead.push(after, kind_after);
    it++;
  }
  if (it > 0) {
    const int st = (it - 1) % S;
    wgmma_fence();
    gemm_ss_kmn<D, BQ / 16, BK, BQ>(dv, sP, wg * 64, sdO + st * BQ * D, true);
    gemm_ss_kmn<D, BQ / 16, BK, BQ>(dk, sdS, wg * 64, sQ + st * BQ * D, true);
    if (dq_wg) gemm_ss_mnmn<64, BK / 16, BK, BK>(dq, sdS, sK_half);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(dk);
    reg_fence(dv);
    reg_fence(dq);
    bulk_wait_read(leader);
    named_barrier_256();
    stage_dq();
    fence_proxy_async();
    named_barrier_256();
    add_dq_share(prev_tile, prev_range, ~0u);
    finish_pending();
  }
  cp_async_wait<0>();
  const float dk_scale[2] = {scale, scale}, dv_scale[2] = {1.f, 1.f};
  store_rows<D>(dK, dk, key0, T, H, h, lane, dk_scale);
  store_rows<D>(dV, dv, key0, T, H, h, lane, dv_scale);
#else
  __trap();  // built for another architecture: the launcher only picks this kernel on sm90
#endif
}

// The dQ kernel runs on a second stream beside the dK/dV kernel (they share only inputs), so
// that each fills the SMs the other's last blocks leave idle; the caller's stream waits for both.
// One side stream and two events per device, made on first use.
struct SideStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};
static cudaError_t side_stream(SideStream*& out) {
  static SideStream side[64];
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
  SideStream& s = side[dev];
  if (!s.stream) {
    if ((err = cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking)) != cudaSuccess) return err;
    if ((err = cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming)) != cudaSuccess) return err;
    if ((err = cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming)) != cudaSuccess) return err;
  }
  out = &s;
  return cudaSuccess;
}

template <int D>
static cudaError_t launch_bwd_sm90(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, bf16* dq, bf16* dk,
                                   bf16* dv, const BwdWorkspace& ws, int T, int H, const MaskDesc& mask, bool fused,
                                   cudaStream_t stream) {
  const MaskBounds mb = make_bounds(mask, T);
  const float scale = (float)(1.0 / std::sqrt((double)D)), scale_log2 = (float)(M_LOG2E / std::sqrt((double)D));
  const dim3 grid((T + kB90Own - 1) / kB90Own, H);
  cudaError_t err;

  if (fused) {
    const int n_tiles = (T + kB90Walk - 1) / kB90Walk;
    if ((err = cudaMemsetAsync(ws.dq_count, 0, (size_t)H * n_tiles * sizeof(unsigned), stream)) != cudaSuccess) return err;
    attention_bwd_dq_ranges_kernel<<<(n_tiles + 255) / 256, 256, 0, stream>>>(mb, ws.dq_ranges, n_tiles);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    constexpr size_t smem = fused_sm90_smem<D>();
    static_assert(fused_sm90_smem_used<D>() <= kSmemOptin, "fused backward: shared memory");
    err = cudaFuncSetAttribute(attention_bwd_fused_sm90_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) return err;
    attention_bwd_fused_sm90_kernel<D><<<grid, kB90Threads, smem, stream>>>(
        q, k, v, dout, ws.lse2, ws.drow, ws.dq_ranges, ws.dq_count, ws.dq_acc, dk, dv, T, H, mb, scale_log2, scale);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    const int warps = 8;
    attention_bwd_dq_convert_kernel<D><<<(int)(((size_t)T * H + warps - 1) / warps), warps * 32, 0, stream>>>(
        ws.dq_acc, ws.dq_ranges, dq, T, H, scale);
    return cudaGetLastError();
  }

  constexpr size_t smem_dkdv = dkdv_sm90_smem<D>(), smem_dq = dq_sm90_smem<D>();
  err = cudaFuncSetAttribute(attention_bwd_dkdv_sm90_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dkdv);
  if (err != cudaSuccess) return err;
  err = cudaFuncSetAttribute(attention_bwd_dq_sm90_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_dq);
  if (err != cudaSuccess) return err;
  SideStream* side = nullptr;
  if ((err = side_stream(side)) != cudaSuccess) return err;

  if ((err = cudaEventRecord(side->fork, stream)) != cudaSuccess) return err;
  if ((err = cudaStreamWaitEvent(side->stream, side->fork, 0)) != cudaSuccess) return err;
  attention_bwd_dkdv_sm90_kernel<D><<<grid, kB90Threads, smem_dkdv, stream>>>(q, k, v, dout, ws.lse2, ws.drow, dk, dv, T,
                                                                               H, mb, scale_log2, scale);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  attention_bwd_dq_sm90_kernel<D><<<grid, kB90Threads, smem_dq, side->stream>>>(q, k, v, dout, ws.lse2, ws.drow, dq, T,
                                                                                 H, mb, scale_log2, scale);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  if ((err = cudaEventRecord(side->join, side->stream)) != cudaSuccess) return err;
  return cudaStreamWaitEvent(stream, side->join, 0);
}

cudaError_t attention_backward_sm90(const bf16* q, const bf16* k, const bf16* v, const bf16* dout, bf16* dq, bf16* dk,
                                    bf16* dv, const BwdWorkspace& ws, int T, int H, int D, const MaskDesc& mask, bool fused,
                                    cudaStream_t stream) {
  if (D == 64) return launch_bwd_sm90<64>(q, k, v, dout, dq, dk, dv, ws, T, H, mask, fused, stream);
  if (D == 128) return launch_bwd_sm90<128>(q, k, v, dout, dq, dk, dv, ws, T, H, mask, fused, stream);
  return cudaErrorInvalidValue;
}

}  // namespace attn
