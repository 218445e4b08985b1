// Forward of fused masked attention on Hopper (sm90a: wgmma), same math as attention_fwd.cu:
//
//   S = scale * Q K^T (+ mask: -inf where not kept),  O = softmax(S) V,  lse = logsumexp(S)
//   Q, K, V, O: bf16 [T, H, D];  lse: fp32 [H, T];  D in {64, 128}.
//
// One block of two warpgroups takes 128 queries of one head (64 rows a warpgroup) and walks the
// key tiles of 128 that the mask lets them see (own_intervals.cuh bounds the walk and gives each
// row its kept keys; mask.h's TileWalk skips empty tiles and spares full ones the per-element
// test). At head dim 64 (tile_scheduler.cuh fwd_shape) a block of three warpgroups takes 192
// queries over the same key tiles where walks are long (no window, no documents), and on masks
// with short walks one warpgroup takes 64 queries over the key tiles of 128, three blocks an SM.
// Per tile, each warpgroup:
//   S[64 x 128] = Q K^T          wgmma, Q and K from shared memory
//   mask, online softmax          registers (softmax.cuh, the same code as the sm80 kernels)
//   O[64 x D] += P V             wgmma, P from registers, V from shared memory; left running
//                                 while the next tile's S is issued and waited
// K and V tiles stream through 3 shared buffers (one-warpgroup blocks: K and V each through 2
// of their own, so that three blocks fit an SM), one tile ahead, loaded by the TMA (tma_tiles.cuh:
// one thread issues a tile) and signalled by mbarriers (TmaPipe), so that the two warpgroups
// drift apart instead of meeting at a block barrier every tile; at head dim 128 they take turns
// issuing their matmuls (turn_wait, below). Q is issued first, before the walk is known (with
// documents the walk's bounds take dependent loads), and completes with the first key tile. O
// leaves the same way: each warpgroup writes its rows over its part of the Q tile, and the TMA
// stores them.
#include <cmath>
#include <tuple>

#include "attention/kernels.h"
#include "attention/tile_scheduler.cuh"
#include "attention/own_intervals.cuh"
#include "attention/softmax.cuh"
#include "attention/tma_tiles.cuh"
#include "hopper/named_barrier.cuh"

namespace attn {

// A tile shape: BM queries a block (64 a warpgroup: two or three warpgroups, or one), key tiles
// of BN, kStages buffers, and the blocks an SM is meant to hold. kSplit: with two buffers K and
// V have pipes of their own (the kernel's loop says why), with three they share one.
template <int BM_, int BN_, int kStages_, int kBlocksPerSM_>
struct FwdTiles {
  static constexpr int BM = BM_, BN = BN_, kStages = kStages_, kBlocksPerSM = kBlocksPerSM_, kThreads = 2 * BM;
  static constexpr bool kSplit = kStages == 2;
  static_assert(kStages == 2 || kStages == 3, "two buffers each for K and V in pipes of their own, or three in one");
};
using FwdTiles128 = FwdTiles<kF90Own, kF90Walk, 3, 1>;
using FwdTiles64 = FwdTiles<kF90SmallOwn, kF90SmallWalk, 2, 3>;
using FwdTiles192 = FwdTiles<kF90WideOwn, kF90Walk, 3, 1>;

// Dynamic shared memory: the tiles, the document ids and the barriers (full and empty, a pair
// for each pipe), and 1024 bytes of room to align the tiles where one block an SM leaves it
// (with more, the kernel traps should the block's shared memory not start 1024-aligned: it does,
// as the fused backward also relies on).
template <int D, typename Tl>
constexpr size_t fwd_sm90_smem_used() {
  return (size_t)(Tl::BM + 2 * Tl::kStages * Tl::BN) * D * sizeof(__nv_bfloat16) + Tl::BM * sizeof(int32_t) +
         (Tl::kSplit ? 4 : 2) * Tl::kStages * sizeof(uint64_t);
}
template <int D, typename Tl>
constexpr size_t fwd_sm90_smem() {
  return fwd_sm90_smem_used<D, Tl>() + (Tl::kBlocksPerSM == 1 ? 1024 : 0);
}

// Ping-pong between a block's two warpgroups (BM = 128, head dim 128): a warpgroup issues a
// tile's matmuls only once the other has issued its own, so that each one's softmax runs under
// the other's matmuls instead of both meeting the tensor cores at once. Named barriers
// kAttnTurnBar + wg (hopper/named_barrier.cuh), 256 threads: the waiting warpgroup syncs, the
// other arrives. Both walk the same tiles (the walk is the block's), so their turns pair up:
// warpgroup 0 skips its first wait, warpgroup 1 its last pass. It speeds up dense causal, documents and the speedrun's mask at head dim 128
// and leaves windows without documents even; at head dim 64 (dense, 128 x 128 tiles), where the
// matmuls are short beside the softmax, it is slower, so it is off there (results/attention_design/README.md).
__device__ __forceinline__ void turn_wait(int wg) {
  if (wg == 0) hopper::named_sync<hopper::kAttnTurnBar, 256>();
  else hopper::named_sync<hopper::kAttnTurnBar + 1, 256>();
}
__device__ __forceinline__ void turn_pass(int wg) {
  if (wg == 0) hopper::named_arrive<hopper::kAttnTurnBar + 1, 256>();
  else hopper::named_arrive<hopper::kAttnTurnBar, 256>();
}

template <int D, typename Tl>
__global__ void __launch_bounds__(Tl::kThreads, Tl::kBlocksPerSM)
    attention_fwd_sm90_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                              const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmO,
                              float* __restrict__ LSE, int T, int H, MaskBounds mb, float scale_log2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  constexpr int BM = Tl::BM, BN = Tl::BN, NB = BN / 8, kStages = Tl::kStages;
  constexpr bool PINGPONG = D == 128 && BM == 128;  // measured: see turn_wait
  constexpr bool kSplit = Tl::kSplit;               // K and V in pipes pk and pv; else both in pk
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned pad = (1024 - (smem_addr(smem_raw) & 1023)) & 1023;  // the SW128 tiles start 1024-aligned
  if (pad > fwd_sm90_smem<D, Tl>() - fwd_sm90_smem_used<D, Tl>()) __trap();
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw + pad);
  bf16* sK = sQ + BM * D;                // kStages buffers
  bf16* sV = sK + kStages * BN * D;      // kStages buffers
  int32_t* s_ids = reinterpret_cast<int32_t*>(sV + kStages * BN * D);  // BM document ids
  TmaPipe<kStages> pk, pv;  // kSplit: the K tiles' and the V tiles'; else pk for both (pv unused)
  pk.full = reinterpret_cast<uint64_t*>(s_ids + BM);
  pk.empty = pk.full + kStages;
  pv.full = kSplit ? pk.empty + kStages : nullptr;
  pv.empty = kSplit ? pv.full + kStages : nullptr;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x & 31;
  const int n_qt = (T + BM - 1) / BM;
  const int q0 = query_tile_longest_first(n_qt) * BM, h = blockIdx.y;

  const int row0 = q0 + wg * 64 + warp * 16 + (lane >> 2);  // this thread's rows: row0, row0 + 8
  const bool producer = threadIdx.x == 0;                     // issues every TMA load
  constexpr uint32_t kQBytes = BM * D * sizeof(bf16), kTileBytes = BN * D * sizeof(bf16);
  if (producer) {
    pk.init(Tl::kThreads / 32);
    if (kSplit) pv.init(Tl::kThreads / 32);
    mbar_expect_tx(pk.full_of(0), kQBytes);  // Q completes with the first key tile
    tma_load_tile<D, BM>(sQ, &tmQ, pk.full_of(0), q0, h);
  }
  __syncthreads();
  int key_lo[2], key_hi[2];  // the keys each of this thread's rows keeps
  const TileWalk walk = own_and_walk<BM, BN>(mb, q0, true, row0, T, s_ids, key_lo, key_hi);
  // By the producer: K and / or V of key tile kt, the i-th of the walk, through pipe p.
  auto load = [&](TmaPipe<kStages>& p, int kt, int i, bool k, bool v) {
    p.wait_empty(i);
    mbar_arrive_expect_tx(p.full_of(i), (k + v) * kTileBytes);
    if (k) tma_load_tile<D, BN>(sK + (i % kStages) * BN * D, &tmK, p.full_of(i), kt * BN, h);
    if (v) tma_load_tile<D, BN>(sV + (i % kStages) * BN * D, &tmV, p.full_of(i), kt * BN, h);
  };

  // tile[0] computed now, tile[1] loaded now; a tile's kind travels with it, so every tile is
  // classified once, while the tensor cores run.
  WalkAhead<1> ahead;
  ahead.start(walk);
  if (producer) {
    if (ahead.tile[0] < walk.end) {
      load(pk, ahead.tile[0], 0, true, !kSplit);
      if (kSplit) load(pv, ahead.tile[0], 0, false, true);
    } else {  // nothing to walk: Q's load must still land before the block exits
      mbar_arrive(pk.full_of(0));
      pk.wait_full(0);
    }
  }
  __syncwarp();

  float acc[D / 8][4] = {};
  OnlineSoftmax sm;
  uint32_t pa[BN / 16][4];  // P of the previous tile, as A fragments
  float s[NB][4], alpha[2];
  // Per tile j: issue S_j = Q K_j^T and O += P_{j-1} V_{j-1}, then the load of tile j + 1 (into
  // the buffer of tile j - 2, once released); the softmax of S_j runs while the second wgmma
  // does; then O is rescaled and P_j packed. The warpgroups meet only through the pipes.
  // kSplit (two buffers): V_j is used a tile after K_j, so V_j is loaded at the top of tile j
  // (into V_{j-2}'s buffer) and K_{j+1} after tile j's matmuls are issued (into K_{j-1}'s), both
  // freed in the tile before: every load still goes out a tile before its use. (The loads sit
  // where no wgmma is in flight or about to read registers just written: a producer-only branch
  // elsewhere made the compiler serialize the wgmmas.)
  int it = 0;
  while (ahead.tile[0] < walk.end) {
    const int st = it % kStages, st_prev = (it + kStages - 1) % kStages;
    if (kSplit) {
      if (producer && it > 0) load(pv, ahead.tile[0], it, false, true);  // V_0: above
      __syncwarp();
    }
    pk.wait_full(it);
    if (kSplit && it > 0) pv.wait_full(it - 1);
    if (PINGPONG && (wg == 1 || it > 0)) turn_wait(wg);
    wgmma_fence();
    gemm_ss<BN, D / 16, BM>(s, sQ, wg * 64, sK + st * BN * D, false);
    wgmma_commit();
    if (it > 0) gemm_rs<D, BN / 16, BN>(acc, pa, sV + st_prev * BN * D);
    wgmma_commit();
    if (PINGPONG && (wg == 0 || ahead.tile[1] < walk.end)) turn_pass(wg);
    if (producer && ahead.tile[1] < walk.end) load(pk, ahead.tile[1], it + 1, true, !kSplit);
    __syncwarp();
    TileKind kind_after;
    const int after = walk.next(ahead.tile[1] + 1, kind_after);

    wgmma_wait<1>();  // S_j
    reg_fence(s);
    if (ahead.kind[0] != kFull) apply_mask_interval(s, key_lo, key_hi, ahead.tile[0] * BN + 2 * (lane & 3));
    sm.step(s, scale_log2, alpha);
    wgmma_wait<0>();  // O += P_{j-1} V_{j-1}: the buffer of tile j - 1 is free (kSplit: K_j's too)
    reg_fence(acc);
    if (kSplit) pk.release(it);
    if (it > 0) (kSplit ? pv : pk).release(it - 1);
    OnlineSoftmax::rescale(acc, alpha);
#pragma unroll
    for (int j = 0; j < BN / 16; j++) c_to_a(pa[j], s[2 * j], s[2 * j + 1]);
    ahead.push(after, kind_after);
    it++;
  }
  if (it > 0) {
    if (kSplit) pv.wait_full(it - 1);
    wgmma_fence();
    gemm_rs<D, BN / 16, BN>(acc, pa, sV + ((it - 1) % kStages) * BN * D);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(acc);
  }

  // epilogue: O = acc / l, lse = (m + log2 l) * ln 2. Each warpgroup writes its 64 rows of O
  // over its own rows of the Q tile (which only its own matmuls read), and one of its threads
  // stores them by the TMA: a bulk store a 64-column panel, where each thread's 4-byte pieces of
  // rows kept the load/store unit busy for about a microsecond a block.
  float inv[2], lse[2];
  sm.finish(inv, lse);
#pragma unroll
  for (int nb = 0; nb < D / 8; nb++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[nb][e] *= inv[e >> 1];
  if (it == 0) pk.wait_full(0);  // nothing walked: Q's bytes have still landed before they are overwritten
  stage_acc_sw128<BM>(sQ, acc, wg * 64 + warp * 16, lane);
  fence_proxy_async();
  hopper::named_sync<128>(hopper::kAttnRowsBar + wg);  // the warpgroup's rows are written
  const bool wg_leader = threadIdx.x % 128 == 0;
  if (wg_leader) {
    tma_store_tile<D, 64, BM>(sQ + wg * 64 * 64, &tmO, q0 + wg * 64, h);
    store_commit();
  }
#pragma unroll
  for (int r = 0; r < 2; r++)
    if (row0 + 8 * r < T && (lane & 3) == 0) LSE[(size_t)h * T + row0 + 8 * r] = lse[r];
  if (wg_leader) store_wait_read();  // before the block's shared memory goes
#else
  __trap();  // built for another architecture: the launcher only picks this kernel on sm90
#endif
}

template <int D, typename Tl>
static cudaError_t launch_fwd_sm90(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int T, int H,
                                   const MaskDesc& mask, cudaStream_t stream) {
  constexpr size_t smem = fwd_sm90_smem<D, Tl>();
  auto kernel = attention_fwd_sm90_kernel<D, Tl>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (err != cudaSuccess) return err;
  CUtensorMap tq, tk, tv, to;  // boxes of Q's BM rows, of a key tile's BN, and of a warpgroup's 64 rows of O
  for (auto [map, x, rows] : {std::tuple{&tq, q, Tl::BM}, std::tuple{&tk, k, Tl::BN}, std::tuple{&tv, v, Tl::BN},
                              std::tuple{&to, (const bf16*)o, 64}})
    if ((err = make_tile_map(map, x, T, H, D, rows)) != cudaSuccess) return err;
  dim3 grid((T + Tl::BM - 1) / Tl::BM, H);
  const float scale_log2 = (float)(M_LOG2E / std::sqrt((double)D));
  kernel<<<grid, Tl::kThreads, smem, stream>>>(tq, tk, tv, to, lse, T, H, make_bounds(mask, T), scale_log2);
  return cudaGetLastError();
}

bool sm90_code_present() {
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, attention_fwd_sm90_kernel<128, FwdTiles128>) == cudaSuccess && attr.ptxVersion >= 90;
}

cudaError_t attention_forward_sm90(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int T, int H,
                                   int D, const MaskDesc& mask, cudaStream_t stream) {
  if (D == 64) return fwd_small_tiles(D, mask) ? launch_fwd_sm90<64, FwdTiles64>(q, k, v, o, lse, T, H, mask, stream)
                                                : launch_fwd_sm90<64, FwdTiles192>(q, k, v, o, lse, T, H, mask, stream);
  if (D == 128) return launch_fwd_sm90<128, FwdTiles128>(q, k, v, o, lse, T, H, mask, stream);
  return cudaErrorInvalidValue;
}

}  // namespace attn
