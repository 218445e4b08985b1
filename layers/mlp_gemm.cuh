// The MLP's two products that make or take its 4C-wide activation, with ReLU^2 fused into the
// matmul's epilogue (Hopper only: TMA loads, wgmma), so the activation is never written and read
// again by a separate pass (docs/model.md):
//   forward:   r  = max(u, 0)^2,          u  = h Wfc      h  [M][K], Wfc   [K][N] (N contiguous)
//   backward:  du = 2 sqrt(r) dr,         dr = dx Wproj^T dx [M][K], Wproj [N][K] (K contiguous)
//   r, du: bf16 [M][N]; every operand bf16, row-major, accumulation in fp32; K and N multiples of
//   8, pointers 16-byte aligned, any M. In the model K = width C, N = hidden F.
// The products' outputs u and dr are rounded to bf16 before the activation, as the unfused path
// (layers/matmul.cuh, then layers/relu2.cuh) rounds them, so the two differ only in the order of
// the fp32 sums. CPU reference: model/reference_layers.h (relu2, relu2_bwd) over an fp64 product
// (tests/layers/mlp_gemm.cu).
//
// Kernel: persistent, one block an SM walking output tiles of 128 x 256, in clusters of two
// blocks that take the two 128-row halves of 256 x 256 tiles (tiles in n-fastest order, so the
// clusters at work share the rows of the first operand and all of the second in L2). A block's
// two consumer warpgroups work on the same tile, rows 0-63 and 64-127, each issuing one
// m64n256k16 wgmma a k16 step against the tile's B. One producer warp a block issues the TMA
// loads of K-slices of 64 (A: 128 x 64, B: 256 x 64, 48 KB a stage) into a ring of 4 stages:
// its own A, and half of B, which the TMA writes into both blocks of the cluster (multicast), so
// L2 delivers 32 KB a stage a block instead of 48; a stage is refilled once both blocks'
// consumers have released it (every release arrives in both blocks; the backward's r, below, is
// each block's own). Three slices (about 3000 cycles of the tensor cores' work) are in flight
// while one is consumed: the
// loads' latency, not L2's or shared memory's bandwidth, bounds these products when the GPU runs
// at its clock limit (a ring of 3 stages ran no faster than ping-pong 128 x 128 tiles, with a
// third less L2 traffic; docs/runs/2026-11-24_mlp_gemm_coop_tried_h200.txt). In the training
// step the GPU runs at its power limit instead, where what counts is the energy a product takes:
// these tiles read a sixth less shared memory a FLOP for the tensor cores than two warpgroups
// taking turns on 128 x 128 tiles (m64n256 against m64n128 wgmmas), and run 2-2.5% faster there
// than that design, though their epilogue stalls the tensor cores; the multicast takes another
// 2.4% (forward) and 0.7% (backward) off the energy of a call there
// (docs/runs/2026-11-24_mlp_gemm_energy_at_power_cap_h200.txt).
// Epilogues (the tensor cores wait for them; the producer has the next tile's slices in flight):
// - forward: each warpgroup writes its 64 x 256 in two rounds of 128 columns (stmatrix, two
//   SW128 panels a round), each stored by TMA by one of its threads, whole 128-byte lines: the
//   first through a buffer of its own, the second through its 16 KB of the tile's last ring
//   stage (A's part for warpgroup 0, the first half of B's for 1), which the consumers keep
//   until that store has read it (released after the next tile's first wgmmas are issued), so
//   the second round does not wait for the first's store. Both warpgroups' wgmmas read that
//   stage, so a warpgroup writes there once the other's are done (named barriers 3 and 4);
// - backward: r needs the whole tile at once, which beside 4 stages only the ring has room
//   for: after a tile's slices the producer loads each warpgroup's 64 rows of r into an entry of
//   the ring (its B part, a "slot"), the warpgroup writes du over r there and stores it from
//   there, and its storing thread releases the slot once the store has read it (after the next
//   tile's first wgmmas are issued).
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "attention/tma.cuh"
#include "attention/wgmma.cuh"
#include "common/fast_math.cuh"
#include "layers/common.cuh"
#include "layers/qk_norm_rotary.cuh"

namespace layers {
namespace mlp_sm90 {

// The kernel's three products (its MODE): the MLP's forward and backward above, and q, k, v =
// h [Wq Wk Wv] with the per-head norm + rotary of q and k in the epilogue (qkv_norm_rotary below).
constexpr int kForward = 0, kBackward = 1, kQkv = 2;

constexpr int BM = 128, BN = 256, BK = 64, WM = 64, OC = 128;  // WM: a consumer warpgroup's rows; OC: an epilogue round's columns
constexpr int kConsumerThreads = 256, kThreads = kConsumerThreads + 32;  // two consumer warpgroups and the producer warp
struct Shape {
  static constexpr int kStages = 4;
  static constexpr size_t kStageBytes = (size_t)(BM + BN) * BK * sizeof(bf16);
  static constexpr size_t kOutBytes = (size_t)BM * OC * sizeof(bf16);  // the forward's: 64 x 128 a warpgroup
  // the stages, the output buffer, 2 barriers a stage and 2 for kQkv's angles, and room to align
  // the tiles to 1024 bytes
  static constexpr size_t kSmem = kStages * kStageBytes + kOutBytes + (2 * kStages + 2) * sizeof(uint64_t) + 1024;
};
static_assert(Shape::kSmem <= 232448, "more shared memory than a block may have");

// The epilogues' arithmetic on bf16 pairs (the accumulators rounded to bf16 as the unfused path's
// bf16 tensors are, two to a register): 2 x, exact
__device__ __forceinline__ uint32_t twice_bf16x2(uint32_t u) {
  __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&u);
  x = __hadd2(x, x);
  return *reinterpret_cast<uint32_t*>(&x);
}
// r = max(u, 0)^2 on a pair of bf16 u, in bf16x2 arithmetic: u^2 of a bf16 u is exact in fp32, so
// the one rounding of the bf16 product gives the bits of bf16(fp32 u^2), three instructions a pair
// where the fp32 form took nine
__device__ __forceinline__ uint32_t relu2_bf16x2(uint32_t u) {
  __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&u);
  x = __hmax2(x, __float2bfloat162_rn(0.f));
  x = __hmul2(x, x);
  return *reinterpret_cast<uint32_t*>(&x);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The block's dynamic shared memory (Shape::kSmem), aligned to 1024 bytes: S stages of A (BM x BK,
// one SW128 panel) and of B (BN x BK: one K-major panel, or BK x BN: 4 MN-major panels), the
// epilogue buffer (per warpgroup, 2 panels of WM x 64), then 2 barriers a stage and kQkv's two
// (a warpgroup's angles landed in its epilogue buffer).
struct Smem {
  bf16 *sA, *sB, *sC;
  uint64_t* bars;
  __device__ __forceinline__ explicit Smem(unsigned char* raw) {
    const unsigned pad = (1024 - (attn::smem_addr(raw) & 1023)) & 1023;
    sA = reinterpret_cast<bf16*>(raw + pad);
    sB = sA + Shape::kStages * BM * BK;
    sC = sB + Shape::kStages * BN * BK;
    bars = reinterpret_cast<uint64_t*>(sC + BM * OC);
  }
};

// The producer's loads of K-slice kb of a forward tile (B = [K][N], MN-major) into ring entry it:
// this block's 128 rows of A from m0, and its half of B's 256 columns from n0 (two panels of 64),
// which the TMA writes into both blocks of the cluster (multicast). c: this block's rank; b_row0:
// the row of B where its K rows start (kQkv's B is Wq, Wk and Wv one below the other).
__device__ __forceinline__ void load_forward_slice(attn::sm90::TmaPipe<Shape::kStages>& ring, int it, bf16* sA, bf16* sB,
                                                   const CUtensorMap* tmA, const CUtensorMap* tmB, int kb, int m0, int n0,
                                                   uint32_t c, int b_row0 = 0) {
  using namespace attn::sm90;
  const int s = it % Shape::kStages;
  ring.wait_empty(it);  // (released in both blocks: the multicast below writes into both)
  mbar_arrive_expect_tx(ring.full_of(it), (uint32_t)Shape::kStageBytes);  // A, and both halves of B
  tma_load_panel(sA + s * BM * BK, tmA, ring.full_of(it), kb * BK, m0);
  bf16* b = sB + s * BN * BK;
#pragma unroll
  for (int p = 2 * c; p < 2 * c + 2; p++)
    tma_load_panel_multicast(b + p * BK * 64, tmB, ring.full_of(it), n0 + 64 * p, b_row0 + kb * BK, 0x3);
}

// bytes (a multiple of 16) from global src into shared dst (both 16-byte aligned), completing on bar.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   attn::smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(attn::smem_addr(bar))
               : "memory");
}

// After a warpgroup's stmatrix writes of an epilogue round (WM x OC in its buffer buf): the
// buffer handed to the TMA (the async proxy) and stored by one thread of the warpgroup (storer)
// at columns col0.., rows row0.. of the output (of its matrix z with z >= 0: a batched map).
__device__ __forceinline__ void store_round(const bf16* buf, const CUtensorMap* tmO, int col0, int row0, int wg, bool storer,
                                            int z = -1) {
  using namespace attn::sm90;
  fence_proxy_async();
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
  if (storer) {
#pragma unroll
    for (int p = 0; p < OC / 64; p++) {
      if (z < 0) tma_store_panel(buf + p * WM * 64, tmO, col0 + 64 * p, row0);
      else tma_store_box_3d(buf + p * WM * 64, tmO, col0 + 64 * p, row0, z);  // matrix z of a make_batched_map tensor
    }
    store_commit();
  }
}
#endif

// kQkv's epilogue: the angles (rotary_angles_fp16, [M][D/2] words), the rows' rstd ([2][M][H]:
// q's, then k's), the norm's eps, and the columns of each of q, k and v (nb = H D, a multiple of
// BN: a tile lies in one of them).
struct QkvArgs {
  const uint32_t* angles;
  float* rstd;
  float eps;
  int nb;
};

// MODE kForward: out = r of the forward (B = Wfc, [K][N]: MN-major for wgmma); kBackward: out =
// du of the backward (B = Wproj, [N][K]: K-major), reading r through tmR; kQkv: out = [q, k, v]
// ([3][M][nb], tmO a make_batched_map), B = [Wq; Wk; Wv] ([3 K][nb], MN-major), q and k normed
// and rotated per head of HD columns (qa). out is written through tmO (tmR, tmO: boxes of a
// warpgroup's 64 rows).
// (168 registers at most: the SM allocates a block's registers by whole warpgroups, so 288
// threads take the room of 384; the accumulators take 128.)
template <int MODE, int HD = 0>
__global__ void __launch_bounds__(kThreads, 1)
    mlp_gemm_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                    const __grid_constant__ CUtensorMap tmR, const __grid_constant__ CUtensorMap tmO, int M, int N, int K,
                    QkvArgs qa) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace attn::sm90;
  using attn::smem_addr;
  constexpr int S = Shape::kStages;
  constexpr bool BWD = MODE == kBackward, QKV = MODE == kQkv;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const Smem sm(smem_raw);
  bf16 *sA = sm.sA, *sB = sm.sB, *sC = sm.sC;
  TmaPipe<S> ring{{sm.bars, sm.bars + S}};
  uint64_t* angles_full = sm.bars + 2 * S;  // kQkv: warpgroup wg's angles have landed
  // the cluster's tiles are 256 x 256: this block takes rows 128 c.. of each (c its rank)
  const uint32_t c = cluster_rank(), peer = c ^ 1;
  const int tiles_n = (N + BN - 1) / BN, tiles = ((M + 2 * BM - 1) / (2 * BM)) * tiles_n, nk = (K + BK - 1) / BK;
  const int cluster = blockIdx.x / 2, clusters = gridDim.x / 2;
  const int per_tile = nk + (BWD ? 2 : 0);  // ring entries a tile
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (threadIdx.x == kConsumerThreads) {
    if (QKV) mbar_init(&angles_full[0], 1), mbar_init(&angles_full[1], 1);
    ring.init(2 * kConsumerThreads / 32);  // the 8 consumer warps of both blocks
  }
  cluster_sync();  // both blocks' barriers are set before either signals the other's

  if (warp == kConsumerThreads / 32) {  // the producer warp: one thread issues every load
    if (lane == 0) {
      constexpr uint32_t kStageTx = (uint32_t)Shape::kStageBytes, kRTx = (uint32_t)(WM * BN * sizeof(bf16));
      int it = 0;  // ring entries so far
      for (int t = cluster; t < tiles; t += clusters) {
        const int m0 = (t / tiles_n) * 2 * BM + c * BM, n0 = (t % tiles_n) * BN;
        for (int kb = 0; kb < nk; kb++, it++) {
          if (QKV) {  // the tile's matrix z = n0 / nb of the three: its rows z K.., columns n0 - z nb..
            const int z = n0 / qa.nb;
            load_forward_slice(ring, it, sA, sB, &tmA, &tmB, kb, m0, n0 - z * qa.nb, c, z * K);
            continue;
          }
          if (!BWD) {  // Wfc rows (k) kb * BK.., columns n0..: four MN-major panels of 64 columns, this block's two
            load_forward_slice(ring, it, sA, sB, &tmA, &tmB, kb, m0, n0, c);
            continue;
          }
          const int s = it % S;
          ring.wait_empty(it);  // (released in both blocks: the multicast below writes into both)
          mbar_arrive_expect_tx(ring.full_of(it), kStageTx);  // A, and both halves of B
          tma_load_panel(sA + s * BM * BK, &tmA, ring.full_of(it), kb * BK, m0);
          // Wproj rows n0.., columns (k) kb * BK..: one K-major panel of 256 rows, this block's 128 of them
          tma_load_panel_multicast(sB + s * BN * BK + c * 128 * BK, &tmB, ring.full_of(it), kb * BK, n0 + 128 * c, 0x3);
        }
        // BWD: r into two slots, entries of the ring whose B part holds a warpgroup's 64 x 256
        // (du then overwrites it there)
        for (int w = 0; BWD && w < 2; w++, it++) {
          ring.wait_empty(it);
          mbar_arrive_expect_tx(ring.full_of(it), kRTx);
          bf16* o = sB + (it % S) * BN * BK;
#pragma unroll
          for (int p = 0; p < BN / 64; p++) tma_load_panel(o + p * WM * 64, &tmR, ring.full_of(it), n0 + 64 * p, m0 + w * WM);
        }
      }
    }
  }
  if (warp == kConsumerThreads / 32) {  // (the consumers wait on every load issued)
    __syncwarp();
    cluster_sync();
    return;
  }

  // the consumer warpgroups: warpgroup wg takes rows 64 wg.. of every tile
  const int wg = threadIdx.x / 128, w = warp % 4;
  const int rr = w * 16 + (lane >> 2);                // this thread's rows of the warpgroup's: rr, rr + 8
  const int c0 = 2 * (lane & 3);                      // and its columns 8 j + c0, + 1
  const int srow = w * 16 + (lane & 7) + (lane & 8);  // the row whose address this lane gives stmatrix
  const bool storer = threadIdx.x % 128 == 0;         // issues the warpgroup's TMA stores
  int angle_loads = 0;                                // kQkv: loads of this warpgroup's angles so far
  // a ring entry's release, in this block and in the other, whose producer also writes into it
  auto release = [&](int i) {
    if (lane == 0) {
      mbar_arrive(&ring.empty[i % S]);
      mbar_arrive_remote(&ring.empty[i % S], peer);
    }
  };
  for (int ti = 0, t = cluster; t < tiles; t += clusters, ti++) {
    const int m0 = (t / tiles_n) * 2 * BM + c * BM, n0 = (t % tiles_n) * BN;
    float acc[BN / 8][4];
    const int it0 = ti * per_tile;  // this tile's first entry in the ring's order
    // kQkv: the tile's matrix z (q, k or v); q and k tiles load the warpgroup's rows' angles into
    // its epilogue buffer once the previous tile's last store has read it (below)
    auto normed = [&] { return QKV && n0 < 2 * qa.nb && m0 + wg * WM < M; };
    uint32_t* const my_angles = reinterpret_cast<uint32_t*>(sC + wg * WM * OC);
    for (int kb = 0; kb < nk; kb++) {
      const int it = it0 + kb, s = it % S;
      ring.wait_full(it);
      wgmma_fence();
      const bf16 *a = sA + s * BM * BK, *b = sB + s * BN * BK;
#pragma unroll
      for (int kk = 0; kk < BK / 16; kk++)
        wgmma_ss<BN, 0, BWD ? 0 : 1>(acc, desc_k<BM>(a, WM * wg, kk), BWD ? desc_k<BN>(b, 0, kk) : desc_mn<BK>(b, kk),
                                     kb > 0 || kk > 0);
      wgmma_commit();
      // the previous tile's output slot, once its store has read it: the storer arrives for
      // all eight warps (the slot is its warpgroup's alone; it has waited for the slot's load,
      // so the arrivals fall in the slot's phase)
      if (BWD && kb == 0 && ti > 0 && storer) {
        store_wait_read();
        mbar_arrive_count(&ring.empty[(it0 - per_tile + nk + wg) % S], kConsumerThreads / 32);
        mbar_arrive_remote(&ring.empty[(it0 - per_tile + nk + wg) % S], peer, kConsumerThreads / 32);
      }
      // the forwards: the previous tile's last slice's stage, which held its second epilogue round,
      // once that round's store has read it (the storer arrives for its warpgroup's 4 warps)
      if (!BWD && kb == 0 && ti > 0 && storer) {
        store_wait_read();
        mbar_arrive_count(&ring.empty[(it0 - 1) % S], kConsumerThreads / 64);
        mbar_arrive_remote(&ring.empty[(it0 - 1) % S], peer, kConsumerThreads / 64);
      }
      if (QKV && kb == 0 && storer && normed()) {  // (the loads complete under the tile's slices)
        const int rows = M - (m0 + wg * WM) < WM ? M - (m0 + wg * WM) : WM;
        const uint32_t bytes = (uint32_t)rows * (HD / 2) * sizeof(uint32_t);
        mbar_arrive_expect_tx(&angles_full[wg], bytes);  // (the buffer's stores have read it: above)
        bulk_load(my_angles, qa.angles + (size_t)(m0 + wg * WM) * (HD / 2), bytes, &angles_full[wg]);
      }
      wgmma_wait<1>();  // the previous slice's wgmmas are done: its stage is free
      if (kb > 0) release(it - 1);
    }
    wgmma_wait<0>();
    reg_fence(acc);
    if (BWD) release(it0 + nk - 1);  // (the forwards keep it for their epilogue's second round)
    // the forwards' second round writes into a part of that stage the other warpgroup's wgmmas
    // read: this warpgroup's are done (named barrier 3 + (1 - wg), waited on by the other)
    if (!BWD) asm volatile("bar.arrive %0, 256;\n" ::"r"(4 - wg) : "memory");

    if constexpr (BWD) {  // du = 2 sqrt(r) dr over r in the warpgroup's slot, stored from there
      const int os = it0 + nk + wg;
      ring.wait_full(os);
      bf16* o = sB + (os % S) * BN * BK;
#pragma unroll
      for (int j = 0; j < BN / 8; j += 2) {  // two n8 blocks, then their stmatrix
#pragma unroll
        for (int jj = j; jj < j + 2; jj++)
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const float2 rf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(o + sw128<WM>(rr + 8 * h, jj) + c0));
            // as relu2.cuh, bf16(2 sqrt(r) bf16(dr)), as 2 bf16(sqrt(r) bf16(dr)): the 2 scales
            // exactly, and is applied to the packed pairs below (dr rounded to bf16 as a pair)
            const float2 dr = __bfloat1622float2(__floats2bfloat162_rn(acc[jj][2 * h], acc[jj][2 * h + 1]));
            acc[jj][2 * h] = sqrt_approx(rf.x) * dr.x;
            acc[jj][2 * h + 1] = sqrt_approx(rf.y) * dr.y;
          }
        // The stmatrix writes blocks j, j + 1 of this warp's rows, whose r every lane has read
        // before it (a warp's shared-memory accesses complete in order).
        uint32_t f[4];
        attn::c_to_a(f, acc[j], acc[j + 1]);
#pragma unroll
        for (int i = 0; i < 4; i++) f[i] = twice_bf16x2(f[i]);
        stmatrix_x4(smem_addr(o + sw128<WM>(srow, j + (lane >> 4))), f);
      }
      fence_proxy_async();
      asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
      if (storer) {
#pragma unroll
        for (int p = 0; p < BN / 64; p++) tma_store_panel(o + p * WM * 64, &tmO, n0 + 64 * p, m0 + wg * WM);
        store_commit();
      }
    } else {  // the forwards
      if constexpr (QKV) {  // q, k: the norm + rotary in place, reading the angles (the rounds' first barrier
        if (normed()) {     // orders those reads before the buffer is written)
          mbar_wait(&angles_full[wg], angle_loads++ & 1);
          // rstd [2][M][H]: this thread's rows' first entry for the tile's heads (z M + row) H + n0' / HD
          const int H = qa.nb / HD, row0 = m0 + wg * WM + rr;
          float* const rstd = qa.rstd + ((size_t)(n0 / qa.nb) * M + row0) * H + (n0 % qa.nb) / HD;
          norm_rotary_acc<HD>(acc, my_angles, rr, lane & 3, qa.eps, [&](int h, int hh, float v) {
            if ((lane & 3) == 0 && row0 + 8 * h < M) rstd[(size_t)8 * h * H + hh] = v;
          });
        }
      }
      // the forward: the epilogue in two rounds of 128 columns, the first through the warpgroup's
      // buffer, the second through its half of the tile's last stage (A's part for warpgroup 0, the
      // first half of B's for 1), so that neither waits for the other's store
      static_assert(BN / OC == 2 && BM * BK >= WM * OC && BN * BK / 2 >= WM * OC, "two rounds, the second in a stage");
#pragma unroll
      for (int round = 0; round < BN / OC; round++) {
        const int last = (it0 + nk - 1) % S;
        bf16* const my_c = round == 0 ? sC + wg * WM * OC : wg ? sB + last * BN * BK : sA + last * BM * BK;
        // round 0: the previous tile's rounds have left the buffer (its storer waited at kb == 0)
        if (round == 0) asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
        else asm volatile("bar.sync %0, 256;\n" ::"r"(3 + wg) : "memory");  // the other's wgmmas are done
#pragma unroll
        for (int j = 0; j < OC / 8; j += 2) {  // two n8 blocks, then their stmatrix
          const int jb = round * OC / 8 + j;   // the first's block in the tile
          uint32_t f[4];
          attn::c_to_a(f, acc[jb], acc[jb + 1]);  // u rounded to bf16, in pairs
#pragma unroll
          for (int i = 0; i < 4 && !QKV; i++) f[i] = relu2_bf16x2(f[i]);
          stmatrix_x4(smem_addr(my_c + sw128<WM>(srow, j + (lane >> 4))), f);
        }
        if (QKV) store_round(my_c, &tmO, n0 % qa.nb + round * OC, m0 + wg * WM, wg, storer, n0 / qa.nb);
        else store_round(my_c, &tmO, n0 + round * OC, m0 + wg * WM, wg, storer);
      }
    }
  }
  if (storer) store_wait();  // the stores are complete before the block's shared memory goes
  cluster_sync();             // and the other block signals none of this one's barriers any more
#else
  __trap();  // built for another architecture: mlp_gemm_available() is false there
#endif
}

// The kernel's launch in clusters of two blocks (the multicast pairs them), `clusters` of them;
// *pair holds the cluster attribute the configuration points to.
inline cudaLaunchConfig_t pair_config(unsigned clusters, cudaStream_t stream, cudaLaunchAttribute* pair, int threads = kThreads) {
  pair->id = cudaLaunchAttributeClusterDimension;
  pair->val.clusterDim.x = 2, pair->val.clusterDim.y = 1, pair->val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(2 * clusters, 1, 1), cfg.blockDim = dim3(threads, 1, 1), cfg.dynamicSmemBytes = Shape::kSmem;
  cfg.stream = stream, cfg.attrs = pair, cfg.numAttrs = 1;
  return cfg;
}

// Host: a tensor map of `count` row-major [rows][cols] bf16 matrices one after another (the
// batched output of kQkv), boxes of box_rows rows by 64 columns of one matrix.
inline cudaError_t make_batched_map(CUtensorMap* map, const bf16* base, int count, long long rows, long long cols, int box_rows) {
  const cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)rows, (cuuint64_t)count};
  const cuuint64_t strides[2] = {(cuuint64_t)cols * sizeof(bf16), (cuuint64_t)(rows * cols) * sizeof(bf16)};
  const cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1};
  return attn::make_swizzled_map(map, base, 3, dims, strides, box);
}

template <int MODE, int HD = 0>
inline cudaError_t launch(const bf16* A, const bf16* B, const bf16* R, bf16* out, int M, int N, int K, cudaStream_t stream,
                          QkvArgs qa = {}) {
  if (M < 0 || N <= 0 || K <= 0 || N % 8 || K % 8) return cudaErrorInvalidValue;
  for (const void* p : {(const void*)A, (const void*)B, (const void*)R, (const void*)out})
    if (reinterpret_cast<uintptr_t>(p) % 16) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  auto kernel = mlp_gemm_kernel<MODE, HD>;
  // the clusters that fit the GPU at once (a GPC's SMs pair up; an odd one is left out): the
  // persistent grid
  static int clusters = 0;
  cudaLaunchAttribute pair;
  if (!clusters) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Shape::kSmem);
    const cudaLaunchConfig_t cfg = pair_config(1, 0, &pair);
    if (err == cudaSuccess) err = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
    if (err == cudaSuccess && clusters < 1) err = cudaErrorInvalidConfiguration;
    if (err != cudaSuccess) return clusters = 0, err;
  }
  constexpr bool BWD = MODE == kBackward;
  CUtensorMap ta, tb, tr, to;
  cudaError_t err = attn::make_matrix_map(&ta, A, M, K, BM);
  if (err == cudaSuccess)
    err = BWD ? attn::make_matrix_map(&tb, B, N, K, BN / 2) : attn::make_matrix_map(&tb, B, MODE == kQkv ? 3LL * K : K, N / (MODE == kQkv ? 3 : 1), BK);
  if (err == cudaSuccess) err = BWD ? attn::make_matrix_map(&tr, R, M, N, WM) : attn::make_matrix_map(&tr, A, M, K, WM);  // unused
  if (err == cudaSuccess) err = MODE == kQkv ? make_batched_map(&to, out, 3, M, N / 3, WM) : attn::make_matrix_map(&to, out, M, N, WM);
  if (err != cudaSuccess) return err;
  const long long tiles = (long long)((M + 2 * BM - 1) / (2 * BM)) * ((N + BN - 1) / BN);  // a cluster's, 256 x 256
  const cudaLaunchConfig_t cfg = pair_config((unsigned)std::min<long long>(tiles, clusters), stream, &pair);
  err = cudaLaunchKernelEx(&cfg, kernel, ta, tb, tr, to, M, N, K, qa);
  return err == cudaSuccess ? cudaGetLastError() : err;
}

}  // namespace mlp_sm90

// Whether this device runs the fused products (Hopper, and the binary holds their sm90a code).
inline bool mlp_gemm_available() {
  static int known = -1;
  if (known < 0) {
    int dev = 0, major = 0;
    cudaFuncAttributes attr{};
    known = cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
            major == 9 && cudaFuncGetAttributes(&attr, mlp_sm90::mlp_gemm_kernel<mlp_sm90::kForward>) == cudaSuccess && attr.ptxVersion >= 90;
    cudaGetLastError();  // a failed query leaves no error behind
  }
  return known == 1;
}

// r = max(h Wfc, 0)^2: h [M][K], Wfc [K][N], r [M][N]
inline cudaError_t mlp_up_relu2(const bf16* h, const bf16* Wfc, bf16* r, int M, int K, int N, cudaStream_t stream = 0) {
  return mlp_sm90::launch<mlp_sm90::kForward>(h, Wfc, h, r, M, N, K, stream);
}
// du = 2 sqrt(r) (dx Wproj^T): dx [M][K], Wproj [N][K], r and du [M][N]
inline cudaError_t mlp_down_dx_relu2(const bf16* dx, const bf16* Wproj, const bf16* r, bf16* du, int M, int K, int N,
                                     cudaStream_t stream = 0) {
  return mlp_sm90::launch<mlp_sm90::kBackward>(dx, Wproj, r, du, M, N, K, stream);
}

// Whether qkv_norm_rotary takes this shape: the width a multiple of the tiles' 256 columns (a
// tile lies in one of q, k, v and holds whole heads) and of the K-slices' 64 rows (a slice lies
// in one of Wq, Wk, Wv), head dim 64 or 128.
inline bool qkv_norm_rotary_shape(int C, int D) { return C > 0 && C % mlp_sm90::BN == 0 && C % mlp_sm90::BK == 0 && (D == 64 || D == 128); }

// q, k, v = h Wq, h Wk, h Wv, with q and k then normed per head and rotated as
// qk_norm_rotary_forward does (the angles as rotary_angles_fp16 lays them out): h [M][C]; W: Wq,
// Wk, Wv one after another, each [C][C]; out: qn, kn, v one after another, each [M][C]; rstd:
// q's [M][H], then k's. Hopper (mlp_gemm_available) and qkv_norm_rotary_shape only.
inline cudaError_t qkv_norm_rotary(const bf16* h, const bf16* W, bf16* out, float* rstd, const uint32_t* angles, int M, int C,
                                   int D, float eps, cudaStream_t stream = 0) {
  if (!qkv_norm_rotary_shape(C, D) || !rstd || !angles || !aligned16({angles})) return cudaErrorInvalidValue;
  const mlp_sm90::QkvArgs qa{angles, rstd, eps, C};
  if (D == 128) return mlp_sm90::launch<mlp_sm90::kQkv, 128>(h, W, h, out, M, 3 * C, C, stream, qa);
  return mlp_sm90::launch<mlp_sm90::kQkv, 64>(h, W, h, out, M, 3 * C, C, stream, qa);
}

}  // namespace layers
