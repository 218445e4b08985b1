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
// Kernel: persistent, one block an SM, its two consumer warpgroups taking turns on output tiles
// of 128 x 128 (the block's tiles alternate between them; tiles in n-fastest order, so the
// blocks at work share the rows of the first operand and all of the second in L2): while one
// runs its tile's matmuls, the other runs its epilogue, so the tensor cores never wait for an
// epilogue. One producer warp issues the TMA loads of K-slices of 64 (A: 128 x 64, B: 128 x 64,
// 32 KB a stage) into one ring of stages, in the order the tiles come, so the two warpgroups
// meet only there. Per slice a warpgroup issues two m64n128k16 wgmmas a k16 step (its rows 0-63
// and 64-127 against the same B), leaving one slice's group in flight while the next is issued.
// The epilogue writes the tile into a buffer of the warpgroup's own (stmatrix, SW128 panels),
// from which one thread stores it by TMA: whole 128-byte lines, and the store runs on while the
// warpgroup goes on to its next tile's matmuls. (Storing straight from registers, 16 bytes a row
// at a time, cost 23% of the forward's time at full occupancy, against 3% on a quarter of the
// SMs: the scattered stores contend with the loads.) The backward's epilogue reads r from the
// same buffer, where the producer loads r's tile by TMA halfway through the tile's slices, and
// writes du over it in place.
// Stages: what bounds these products is the loads' latency, the slices in flight while one is
// consumed, not L2's or shared memory's bandwidth (docs/runs/2026-11-24_mlp_gemm_coop_tried_h200.txt).
// So the forward writes its tile in two rounds of one 64-column panel, through a buffer half the
// size, and takes 6 stages where the backward, which needs r's whole tile at once, keeps 5.
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "attention/tma.cuh"
#include "attention/wgmma.cuh"
#include "common/fast_math.cuh"
#include "layers/common.cuh"

namespace layers {
namespace mlp_sm90 {

constexpr int BM = 128, BN = 128, BK = 64;
constexpr int kConsumerThreads = 256, kThreads = kConsumerThreads + 32;  // two warpgroups and the producer warp
// The forward writes a tile in two rounds of one 64-column panel through its warpgroup's output
// buffer, which leaves room for a sixth stage; the backward needs the whole tile of r at once.
template <bool BWD>
struct Shape {
  static constexpr int kStages = BWD ? 5 : 6;
  static constexpr int kPanels = BWD ? 2 : 1;  // 64-column panels an epilogue round
  static constexpr size_t kStageBytes = (size_t)(BM + BN) * BK * sizeof(bf16);
  static constexpr size_t kOutBytes = (size_t)BM * 64 * kPanels * sizeof(bf16);  // a warpgroup's output buffer
  // the stages, the two output buffers, 2 barriers a stage and 2 an output buffer (the
  // backward's r), and room to align the tiles to 1024 bytes
  static constexpr size_t kSmem = kStages * kStageBytes + 2 * kOutBytes + (2 * kStages + 4) * sizeof(uint64_t) + 1024;
  static_assert(kSmem <= 232448, "more shared memory than a block may have");
};

// bf16 rounding as the unfused path's bf16 tensors round
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

// BWD = false: out = r of the forward (B = Wfc, [K][N]: MN-major for wgmma); true: out = du of
// the backward (B = Wproj, [N][K]: K-major), reading r through tmR; out is written through tmO.
// (168 registers at most: the SM allocates a block's registers by whole warpgroups, so 288
// threads take the room of 384.)
template <bool BWD>
__global__ void __launch_bounds__(kThreads, 1)
    mlp_gemm_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                    const __grid_constant__ CUtensorMap tmR, const __grid_constant__ CUtensorMap tmO, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace attn::sm90;
  using attn::smem_addr;
  constexpr int S = Shape<BWD>::kStages, P = Shape<BWD>::kPanels, JB = 8 * P;  // JB: n8 blocks a round
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned pad = (1024 - (smem_addr(smem_raw) & 1023)) & 1023;
  bf16* sA = reinterpret_cast<bf16*>(smem_raw + pad);  // S stages of BM x BK (one SW128 panel)
  bf16* sB = sA + S * BM * BK;                          // S stages of BN x BK (K-major) or BK x BN (2 panels)
  bf16* sC = sB + S * BN * BK;                          // P panels of BM x 64 a warpgroup
  // the ring of stages (a stage released by the 4 warps of the warpgroup that took its slice),
  // and BWD: each warpgroup's output buffer as a pipe of one for r (its j-th tile, ti = 2 j + wg,
  // is step j; released by the thread that stores du from it)
  uint64_t* bars = reinterpret_cast<uint64_t*>(sC + 2 * BM * 64 * P);
  TmaPipe<S> ring{{bars, bars + S}};
  auto rpipe = [&](int w) { return TmaPipe<1>{{bars + 2 * S + 2 * w, bars + 2 * S + 2 * w + 1}}; };
  const int tiles_n = (N + BN - 1) / BN, tiles = ((M + BM - 1) / BM) * tiles_n, nk = (K + BK - 1) / BK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (threadIdx.x == kConsumerThreads) {
    ring.init(4);
    rpipe(0).init(1);
    rpipe(1).init(1);
  }
  __syncthreads();

  if (warp == kConsumerThreads / 32) {  // the producer warp: one thread issues every load
    if (lane == 0) {
      constexpr uint32_t kStageTx = (uint32_t)Shape<BWD>::kStageBytes, kRTx = (uint32_t)Shape<BWD>::kOutBytes;
      int it = 0;  // slices loaded so far
      for (int ti = 0, t = blockIdx.x; t < tiles; t += gridDim.x, ti++) {
        const int m0 = (t / tiles_n) * BM, n0 = (t % tiles_n) * BN;
        for (int kb = 0; kb < nk; kb++, it++) {
          const int s = it % S;
          ring.wait_empty(it);
          mbar_arrive_expect_tx(ring.full_of(it), kStageTx);
          tma_load_panel(sA + s * BM * BK, &tmA, ring.full_of(it), kb * BK, m0);
          bf16* b = sB + s * BN * BK;
          if (BWD) {  // Wproj rows n0.., columns (k) kb * BK..: one K-major panel of 128 rows
            tma_load_panel(b, &tmB, ring.full_of(it), kb * BK, n0);
          } else {  // Wfc rows (k) kb * BK.., columns n0..: two MN-major panels of 64 columns
#pragma unroll
            for (int p = 0; p < BN / 64; p++) tma_load_panel(b + p * BK * 64, &tmB, ring.full_of(it), n0 + 64 * p, kb * BK);
          }
          // r of this tile into its warpgroup's buffer, once that warpgroup has read its
          // previous tile's (two tiles back): halfway through the tile's slices, so that its
          // first slices are not queued behind it (that warpgroup is at work on this tile by
          // then, so the wait is over)
          if (BWD && kb == nk / 2) {
            TmaPipe<1> rp = rpipe(ti & 1);
            rp.wait_empty(ti / 2);
            mbar_arrive_expect_tx(rp.full_of(ti / 2), kRTx);
#pragma unroll
            for (int p = 0; p < BN / 64; p++)
              tma_load_panel(sC + (ti & 1) * BM * BN + p * BM * 64, &tmR, rp.full_of(ti / 2), n0 + 64 * p, m0);
          }
        }
      }
    }
    return;  // the consumers wait on every load issued, so none is left in flight at the block's end
  }

  // the consumer warpgroups: wg takes the block's tiles wg, wg + 2, ...
  const int wg = threadIdx.x / 128, w = warp % 4;
  const int rr = w * 16 + (lane >> 2);  // this thread's rows in each 64-row half of the tile: rr, rr + 8
  const int c0 = 2 * (lane & 3);        // and its columns 8 j + c0, + 1
  const int srow = w * 16 + (lane & 7) + (lane & 8);  // the row whose address this lane gives stmatrix
  const bool storer = threadIdx.x % 128 == 0;         // issues the warpgroup's TMA stores
  bf16* my_c = sC + wg * BM * 64 * P;
  for (int ti = wg, t = blockIdx.x + wg * gridDim.x; t < tiles; t += 2 * gridDim.x, ti += 2) {
    const int m0 = (t / tiles_n) * BM, n0 = (t % tiles_n) * BN;
    float acc[2][BN / 8][4];  // rows 0-63 and 64-127 of the tile
    int it = ti * nk;         // this tile's first slice in the ring's order
    // Turns: a warpgroup starts its tile's slices once the other has waited for all of the tile
    // before (named barrier 1 + wg: the waiting warpgroup syncs, the other arrives). Besides
    // making the two alternate, this keeps every wait on a stage's barrier within one phase of
    // the slice it wants (a parity names only the last two phases: running a whole tile ahead,
    // the second warpgroup would take an older phase's completion for its slice's).
    if (ti > 0) asm volatile("bar.sync %0, 256;\n" ::"r"(1 + wg) : "memory");
    for (int kb = 0; kb < nk; kb++, it++) {
      const int s = it % S;
      ring.wait_full(it);
      wgmma_fence();
      const bf16 *a = sA + s * BM * BK, *b = sB + s * BN * BK;
#pragma unroll
      for (int kk = 0; kk < BK / 16; kk++) {
        const uint64_t db = BWD ? desc_k<BN>(b, 0, kk) : desc_mn<BK>(b, kk);
#pragma unroll
        for (int half = 0; half < 2; half++) wgmma_ss<BN, 0, BWD ? 0 : 1>(acc[half], desc_k<BM>(a, 64 * half, kk), db, kb > 0 || kk > 0);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous slice's wgmmas are done: its stage is free
      if (kb > 0) ring.release(it - 1);
    }
    if (t + gridDim.x < tiles) asm volatile("bar.arrive %0, 256;\n" ::"r"(2 - wg) : "memory");  // the next tile's turn
    wgmma_wait<0>();
    reg_fence(acc[0]);
    reg_fence(acc[1]);
    ring.release(it - 1);

    // the epilogue, in BN / 64 / P rounds of P panels through the warpgroup's buffer
#pragma unroll
    for (int q = 0; q < BN / 64 / P; q++) {
      if (BWD) {
        rpipe(wg).wait_full(ti / 2);  // r has landed (its buffer was released once the last du had left it)
      } else {
        if (storer) store_wait_read();  // the previous round has left the buffer
        asm volatile("bar.sync %0, 128;\n" ::"r"(3 + wg) : "memory");
      }
#pragma unroll
      for (int half = 0; half < 2; half++)
#pragma unroll
        for (int j = q * JB; j < q * JB + JB; j += 2) {  // two n8 blocks, then their stmatrix
#pragma unroll
          for (int jj = j; jj < j + 2; jj++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
              const int rs = 64 * half + rr + 8 * h;  // row in the tile
              const float x0 = round_bf16(acc[half][jj][2 * h]), x1 = round_bf16(acc[half][jj][2 * h + 1]);
              float y0, y1;
              if (BWD) {
                const float2 rf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(my_c + sw128<BM>(rs, jj - q * JB) + c0));
                y0 = 2.f * sqrt_approx(rf.x) * x0, y1 = 2.f * sqrt_approx(rf.y) * x1;  // as relu2.cuh
              } else {
                const float u0 = fmaxf(x0, 0.f), u1 = fmaxf(x1, 0.f);
                y0 = u0 * u0, y1 = u1 * u1;
              }
              acc[half][jj][2 * h] = y0, acc[half][jj][2 * h + 1] = y1;
            }
          // BWD: over r in place. The stmatrix writes blocks j, j + 1 of this warp's rows, whose
          // r every lane has read before it (a warp's shared-memory accesses complete in order).
          uint32_t f[4];
          attn::c_to_a(f, acc[half][j], acc[half][j + 1]);
          stmatrix_x4(smem_addr(my_c + sw128<BM>(64 * half + srow, j - q * JB + (lane >> 4))), f);
        }
      fence_proxy_async();
      asm volatile("bar.sync %0, 128;\n" ::"r"(3 + wg) : "memory");
      if (storer) {
#pragma unroll
        for (int p = 0; p < P; p++) tma_store_panel(my_c + p * BM * 64, &tmO, n0 + 64 * (q * P + p), m0);
        store_commit();
        if (BWD) {
          store_wait_read();
          rpipe(wg).release(ti / 2);  // the producer may load the next r into it
        }
      }
    }
  }
  if (storer) store_wait();  // the stores are complete before the block's shared memory goes
#else
  __trap();  // built for another architecture: mlp_gemm_available() is false there
#endif
}

template <bool BWD>
inline cudaError_t launch(const bf16* A, const bf16* B, const bf16* R, bf16* out, int M, int N, int K, cudaStream_t stream) {
  if (M < 0 || N <= 0 || K <= 0 || N % 8 || K % 8) return cudaErrorInvalidValue;
  for (const void* p : {(const void*)A, (const void*)B, (const void*)R, (const void*)out})
    if (reinterpret_cast<uintptr_t>(p) % 16) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  auto kernel = mlp_gemm_kernel<BWD>;
  static int sms = 0;
  if (!sms) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Shape<BWD>::kSmem);
    int dev = 0;
    if (err == cudaSuccess) err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return sms = 0, err;
  }
  CUtensorMap ta, tb, tr, to;
  cudaError_t err = attn::make_matrix_map(&ta, A, M, K, BM);
  if (err == cudaSuccess) err = BWD ? attn::make_matrix_map(&tb, B, N, K, BN) : attn::make_matrix_map(&tb, B, K, N, BK);
  if (err == cudaSuccess) err = BWD ? attn::make_matrix_map(&tr, R, M, N, BM) : attn::make_matrix_map(&tr, A, M, K, BM);  // unused
  if (err == cudaSuccess) err = attn::make_matrix_map(&to, out, M, N, BM);
  if (err != cudaSuccess) return err;
  const long long tiles = (long long)((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  // two tiles a block at least, one a warpgroup
  kernel<<<(unsigned)std::min<long long>((tiles + 1) / 2, sms), kThreads, Shape<BWD>::kSmem, stream>>>(ta, tb, tr, to, M, N, K);
  return cudaGetLastError();
}

}  // namespace mlp_sm90

// Whether this device runs the fused products (Hopper, and the binary holds their sm90a code).
inline bool mlp_gemm_available() {
  static int known = -1;
  if (known < 0) {
    int dev = 0, major = 0;
    cudaFuncAttributes attr{};
    known = cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
            major == 9 && cudaFuncGetAttributes(&attr, mlp_sm90::mlp_gemm_kernel<false>) == cudaSuccess && attr.ptxVersion >= 90;
    cudaGetLastError();  // a failed query leaves no error behind
  }
  return known == 1;
}

// r = max(h Wfc, 0)^2: h [M][K], Wfc [K][N], r [M][N]
inline cudaError_t mlp_up_relu2(const bf16* h, const bf16* Wfc, bf16* r, int M, int K, int N, cudaStream_t stream = 0) {
  return mlp_sm90::launch<false>(h, Wfc, h, r, M, N, K, stream);
}
// du = 2 sqrt(r) (dx Wproj^T): dx [M][K], Wproj [N][K], r and du [M][N]
inline cudaError_t mlp_down_dx_relu2(const bf16* dx, const bf16* Wproj, const bf16* r, bf16* du, int M, int K, int N,
                                     cudaStream_t stream = 0) {
  return mlp_sm90::launch<true>(dx, Wproj, r, du, M, N, K, stream);
}

}  // namespace layers
