// The lm head's product with the softcapped cross-entropy's first pass in its epilogue (Hopper
// only: TMA loads, wgmma), so that the logits are never written and read again by a separate
// pass (docs/model.md). For rows r of a chunk, h [M][K] (the final norm's output), W [K][N]
// (the head, N = vocabulary, contiguous), targets t[M]:
//   z = bf16(h W)                          (rounded as the unfused head's bf16 output)
//   q = exp(30 tanh(z / 30) - 30),  g = bf16(q (1 - tanh^2(z / 30)) / 4)       [M][N], written
//   part[r][j] = sum of q over the columns of tile j (256 wide, columns < N)   [M][ceil(N/256)]
//   zt[r] = z[r][t_r]                                                           [M] (t_r in [0, N))
// then head_ce_finalize, one warp a row:
//   S = sum_j part[r][j],  loss[r] = log S + 60 r_t  (= logsumexp(logits) - logit_t, as softcap_ce.cuh)
//   c[r] = 4 grad_scale / S,  g[r][t_r] = bf16((q_t - S) (1 - tanh^2(z_t / 30)) / 4),  hs[r] = bf16(c[r] h[r])
// so that the gradient of the logits is dz = c[r] g[r] (row r scaled), the one-hot term folded
// into the target's element: dz_t = grad_scale (q_t / S - 1) (1 - tanh^2). The head's backward
// then takes g as it is, with the row scale moved to the small operands:
//   dh = diag(c) (g W^T)   (the final norm's backward scales its rows: layers/rmsnorm.cuh)
//   dW += hs^T g
// A target of kIgnoreTarget (-1) gives loss 0 and c = 0 (no gradient); one outside [0, N)
// sets *bad_target, gives loss NaN and c = 0. Special functions as softcap_ce.cuh's
// (SoftcapTerms); all arithmetic fp32. Against softcap_ce.cuh's two passes dz is rounded once
// (g) instead of twice, and hs once more (its own bf16 rounding, in place of dz's second).
// CPU reference: model/reference_layers.h softcap_ce (tests/layers/head_ce.cu).
//
// Kernel: mlp_gemm.cuh's forward product (128 x 256 tiles, clusters of two sharing B by
// multicast, a producer warp streaming K-slices of 64 through a ring of 4 stages), with the
// epilogue under the next tile's slices: after a tile's last slice each consumer thread packs its
// 128 outputs as bf16 pairs (64 registers beside the 128 accumulators; the producer's warpgroup
// gives registers to the consumers by setmaxnreg: 40 and 232 a thread), and while the tensor
// cores run the next tile's first kSubs slices the consumers compute q and g on those pairs in
// kSubs steps, one a slice, each after the slice's wgmmas are queued and the previous slice's
// stage released (the epilogue's three special functions an element, 6144 cycles of the SM's
// special-function unit a tile, would otherwise stall the tensor cores for half of the tile's
// 12288), and store g by TMA in two rounds of 128 columns through the warpgroup's 16 KB buffer.
// The last tile's epilogue runs alone. Tiles go in m-fastest order: the clusters at work share a
// few 256-column slabs of W and walk h's rows, which stay in L2 (25 MB for the model's 16384
// rows), so W (77 MB) is read from HBM once a call; n-fastest order, mlp_gemm.cuh's, read it
// again for every 256 rows (ncu on one 16384-row chunk on one H200: 4.49 GB read from HBM
// against 1.44 GB).
// Shapes: K and N multiples of 8, any M; pointers 16-byte aligned.
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "attention/tma.cuh"
#include "attention/wgmma.cuh"
#include "layers/common.cuh"
#include "layers/mlp_gemm.cuh"
#include "layers/softcap_ce.cuh"

namespace layers {
namespace head_ce_sm90 {

using mlp_sm90::BK;
using mlp_sm90::BM;
using mlp_sm90::BN;
using mlp_sm90::OC;
using mlp_sm90::Shape;
using mlp_sm90::WM;
constexpr int kConsumerThreads = 256, kThreads = kConsumerThreads + 128;  // two consumer warpgroups, the producer's warpgroup
constexpr int kSubs = 12;        // epilogue steps, one under each of the next tile's first slices (K = 768: all 12)
constexpr int kBlocks = BN / 8;  // n8 blocks of a thread's accumulator: 32
// The n8 blocks epilogue step s takes: [sub_begin(s), sub_begin(s + 1))
__host__ __device__ constexpr int sub_begin(int s) { return s * kBlocks / kSubs; }

__host__ __device__ inline int tiles_n(int N) { return (N + BN - 1) / BN; }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
// the halves of a bf16 pair as fp32 (shifts keep the pair in a register)
__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }
#endif

// g, part and zt as the top comment; targets of rows past M are not read.
__global__ void __launch_bounds__(kThreads, 1)
    head_ce_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                   const __grid_constant__ CUtensorMap tmO, const int* __restrict__ targets, float* __restrict__ part,
                   float* __restrict__ zt, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace attn::sm90;
  using attn::smem_addr;
  constexpr int S = Shape::kStages;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const mlp_sm90::Smem sm(smem_raw);  // B: BK x BN, 4 MN-major panels
  bf16 *sA = sm.sA, *sB = sm.sB, *sC = sm.sC;
  TmaPipe<S> ring{{sm.bars, sm.bars + S}};
  const uint32_t c = cluster_rank(), peer = c ^ 1;  // this block takes rows 128 c.. of the cluster's 256 x 256 tiles
  // tiles in m-fastest order: the clusters at work share a few 256-column slabs of W (77 MB in the
  // model: read from HBM once a call, where n-fastest order read all of it again for every
  // 256 rows) and walk h's rows, which stay in L2 (25 MB for 16384 rows)
  const int tn = tiles_n(N), tm = (M + 2 * BM - 1) / (2 * BM), tiles = tm * tn, nk = (K + BK - 1) / BK;
  const int cluster = blockIdx.x / 2, clusters = gridDim.x / 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (threadIdx.x == kConsumerThreads) ring.init(2 * kConsumerThreads / 32);  // the 8 consumer warps of both blocks
  cluster_sync();  // both blocks' barriers are set before either signals the other's

  if (threadIdx.x >= kConsumerThreads) {  // the producer's warpgroup: one thread issues every load
    setmaxnreg_dec<40>();
    if (threadIdx.x == kConsumerThreads) {
      int it = 0;
      for (int t = cluster; t < tiles; t += clusters) {
        const int m0 = (t % tm) * 2 * BM + c * BM, n0 = (t / tm) * BN;
        for (int kb = 0; kb < nk; kb++, it++) mlp_sm90::load_forward_slice(ring, it, sA, sB, &tmA, &tmB, kb, m0, n0, c);
      }
    }
    __syncwarp();
    cluster_sync();
    return;
  }
  setmaxnreg_inc<232>();

  // the consumer warpgroups: warpgroup wg takes rows 64 wg.. of every tile
  const int wg = threadIdx.x / 128, w = warp % 4;
  const int rr = w * 16 + (lane >> 2);                // this thread's rows of the warpgroup's: rr, rr + 8
  const int c0 = 2 * (lane & 3);                      // and its columns 8 j + c0, + 1
  const int srow = w * 16 + (lane & 7) + (lane & 8);  // the row whose address this lane gives stmatrix
  const bool storer = threadIdx.x % 128 == 0;         // issues the warpgroup's TMA stores
  bf16* my_c = sC + wg * WM * OC;
  auto release = [&](int i) {  // a ring entry's release, in this block and in the other (whose producer also writes into it)
    if (lane == 0) {
      mbar_arrive(&ring.empty[i % S]);
      mbar_arrive_remote(&ring.empty[i % S], peer);
    }
  };
  // The previous tile's epilogue state: its outputs as bf16 pairs (z, then g in place; block j,
  // row rr + 8 h), its origin, the columns left in it (N - pn0), its rows' targets relative to
  // this thread's first column, and this thread's sums of q over its columns, a row each.
  uint32_t pk[kBlocks][2];
  int pm0 = 0, pn0 = 0, pcols = 0, dt[2] = {-1, -1};
  float qsum[2] = {0.f, 0.f};
  for (int ti = 0, t = cluster;; t += clusters, ti++) {
    const bool have = t < tiles, prev = ti > 0;
    if (!have && !prev) break;
    const int m0 = (t % tm) * 2 * BM + c * BM, n0 = (t / tm) * BN;
    const int it0 = ti * nk;  // this tile's first entry in the ring's order
    int tgt[2];               // this tile's rows' targets, loaded now: its epilogue needs them after its slices
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int row = m0 + wg * WM + rr + 8 * h;
      tgt[h] = have && row < M ? targets[row] : -1;
    }
    float acc[kBlocks][4];
    auto issue = [&](int kb) {
      const int it = it0 + kb, s = it % S;
      ring.wait_full(it);
      wgmma_fence();
      const bf16 *a = sA + s * BM * BK, *b = sB + s * BN * BK;
#pragma unroll
      for (int kk = 0; kk < BK / 16; kk++) wgmma_ss<BN, 0, 1>(acc, desc_k<BM>(a, WM * wg, kk), desc_mn<BK>(b, kk), kb > 0 || kk > 0);
      wgmma_commit();
    };
#pragma unroll
    for (int sub = 0; sub < kSubs; sub++) {
      const bool slice = have && sub < nk;
      if (slice) {  // the slice's wgmmas queued behind the previous one's, which is then waited for and its stage released
        issue(sub);
        wgmma_wait<1>();
        if (sub > 0) release(it0 + sub - 1);
      }
      if (prev) {
        // epilogue step: q and g on the pairs of blocks [sub_begin(sub), sub_begin(sub + 1))
#pragma unroll
        for (int j = sub_begin(sub); j < sub_begin(sub + 1); j++)
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const float za = bf16_lo(pk[j][h]), zb = bf16_hi(pk[j][h]);
            const SoftcapTerms a(za), b(zb);
            const float qa = a.q(), qb = b.q();
            if (8 * j < pcols) qsum[h] += qa + qb;  // both columns are inside N, or neither (N % 8 == 0)
            if (dt[h] == 8 * j) zt[pm0 + wg * WM + rr + 8 * h] = za;
            if (dt[h] == 8 * j + 1) zt[pm0 + wg * WM + rr + 8 * h] = zb;
            pk[j][h] = attn::pack_bf16(qa * a.dtanh_4(), qb * b.dtanh_4());
          }
        // a round of 128 columns complete: through the warpgroup's buffer, stored by TMA
        if (sub_begin(sub + 1) % (OC / 8) == 0 && sub_begin(sub + 1) > sub_begin(sub)) {
          const int round = sub_begin(sub + 1) / (OC / 8) - 1;
          if (storer) store_wait_read();  // the previous round has left the buffer
          asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
#pragma unroll
          for (int j = 0; j < OC / 8; j += 2) {
            const int jb = round * OC / 8 + j;
            const uint32_t f[4] = {pk[jb][0], pk[jb][1], pk[jb + 1][0], pk[jb + 1][1]};
            stmatrix_x4(smem_addr(my_c + sw128<WM>(srow, j + (lane >> 4))), f);
          }
          mlp_sm90::store_round(my_c, &tmO, pn0 + round * OC, pm0 + wg * WM, wg, storer);
        }
        if (sub == kSubs - 1) {  // the row sums of the previous tile: the four threads of a row, then one writes
#pragma unroll
          for (int h = 0; h < 2; h++) {
            float v = qsum[h];
            v += __shfl_xor_sync(0xffffffff, v, 1);
            v += __shfl_xor_sync(0xffffffff, v, 2);
            const int row = pm0 + wg * WM + rr + 8 * h;
            if ((lane & 3) == 0 && row < M) part[(size_t)row * tn + pn0 / BN] = v;
            qsum[h] = 0.f;
          }
        }
      }
    }
    if (!have) break;
    for (int kb = kSubs; kb < nk; kb++) {
      issue(kb);
      wgmma_wait<1>();
      release(it0 + kb - 1);
    }
    wgmma_wait<0>();
    reg_fence(acc);
    release(it0 + nk - 1);
    // this tile's z as bf16 pairs, for its epilogue under the next tile's slices
#pragma unroll
    for (int j = 0; j < kBlocks; j++)
#pragma unroll
      for (int h = 0; h < 2; h++) pk[j][h] = attn::pack_bf16(acc[j][2 * h], acc[j][2 * h + 1]);
    pm0 = m0, pn0 = n0, pcols = N - n0;
#pragma unroll
    for (int h = 0; h < 2; h++) dt[h] = tgt[h] - n0 - c0;  // a target < 0 never meets a column
  }
  if (storer) store_wait();  // the stores are complete before the block's shared memory goes
  cluster_sync();             // and the other block signals none of this one's barriers any more
#else
  __trap();  // built for another architecture: head_ce_available() is false there
#endif
}

// One warp a row: S, the loss, c, the target's element of g and hs (see the top comment). g, hs
// and c may be nullptr (a forward without the backward: the loss only).
__global__ void head_ce_finalize_kernel(const float* __restrict__ part, const float* __restrict__ zt, const int* __restrict__ targets,
                                        const bf16* __restrict__ h, bf16* g, bf16* __restrict__ hs, float* __restrict__ c,
                                        float* __restrict__ loss, int M, int N, int K, float grad_scale, int* bad_target) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (row >= M) return;
  const int tn = tiles_n(N);
  float s = 0.f;
  for (int j = lane; j < tn; j += 32) s += part[(size_t)row * tn + j];
  s = warp_sum(s);
  const int t = targets[row];
  float scale = 0.f, l = 0.f;
  if (t == kIgnoreTarget) {
    l = 0.f;
  } else if (t < 0 || t >= N) {
    l = NAN;
    if (lane == 0) atomicExch(bad_target, 1);
  } else {
    const SoftcapTerms st(zt[row]);
    l = logf(s) + 2.f * kSoftcap * st.r;
    scale = 4.f * grad_scale / s;
    if (g && lane == 0) g[(size_t)row * N + t] = __float2bfloat16((st.q() - s) * st.dtanh_4());
  }
  if (lane == 0) {
    loss[row] = l;
    if (c) c[row] = scale;
  }
  if (hs)
    for (int i = lane * 8; i < K; i += 256) {
      const Pack8 v = load8(h + (size_t)row * K + i);
      Pack8 o;
#pragma unroll
      for (int k = 0; k < 8; k++) o.set(k, scale * v.get(k));
      store8(hs + (size_t)row * K + i, o);
    }
}

}  // namespace head_ce_sm90

// Whether this device runs the fused head (Hopper, and the binary holds its sm90a code).
inline bool head_ce_available() {
  static int known = -1;
  if (known < 0) {
    cudaFuncAttributes attr{};
    known = mlp_gemm_available() && cudaFuncGetAttributes(&attr, head_ce_sm90::head_ce_kernel) == cudaSuccess && attr.ptxVersion >= 90;
    cudaGetLastError();
  }
  return known == 1;
}

// Scratch the two calls share: part [M][tiles_n(N)] and zt [M], fp32.
inline size_t head_ce_scratch_floats(int M, int N) { return (size_t)M * (head_ce_sm90::tiles_n(N) + 1); }

// The product and the first pass: g [M][N] (may be where z would go), scratch as above.
inline cudaError_t head_ce_forward(const bf16* h, const bf16* W, const int* targets, bf16* g, float* scratch, int M, int K, int N,
                                   cudaStream_t stream = 0) {
  using namespace head_ce_sm90;
  if (M < 0 || N <= 0 || K <= 0 || N % 8 || K % 8) return cudaErrorInvalidValue;
  for (const void* p : {(const void*)h, (const void*)W, (const void*)g})
    if (reinterpret_cast<uintptr_t>(p) % 16) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  static int clusters = 0;
  cudaLaunchAttribute pair;
  if (!clusters) {
    cudaError_t err = cudaFuncSetAttribute(head_ce_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Shape::kSmem);
    const cudaLaunchConfig_t cfg = mlp_sm90::pair_config(1, 0, &pair, kThreads);
    if (err == cudaSuccess) err = cudaOccupancyMaxActiveClusters(&clusters, head_ce_kernel, &cfg);
    if (err == cudaSuccess && clusters < 1) err = cudaErrorInvalidConfiguration;
    if (err != cudaSuccess) return clusters = 0, err;
  }
  CUtensorMap ta, tb, to;
  cudaError_t err = attn::make_matrix_map(&ta, h, M, K, BM);
  if (err == cudaSuccess) err = attn::make_matrix_map(&tb, W, K, N, BK);
  if (err == cudaSuccess) err = attn::make_matrix_map(&to, g, M, N, WM);
  if (err != cudaSuccess) return err;
  const long long tiles = (long long)((M + 2 * BM - 1) / (2 * BM)) * tiles_n(N);  // a cluster's, 256 x 256
  const cudaLaunchConfig_t cfg = mlp_sm90::pair_config((unsigned)std::min<long long>(tiles, clusters), stream, &pair, kThreads);
  err = cudaLaunchKernelEx(&cfg, head_ce_kernel, ta, tb, to, targets, scratch, scratch + (size_t)M * tiles_n(N), M, N, K);
  return err == cudaSuccess ? cudaGetLastError() : err;
}

// The loss, and with the backward (g, hs, c not nullptr) the row scales, the target's element of
// g and hs = diag(c) h (h [M][K]).
inline cudaError_t head_ce_finalize(const float* scratch, const int* targets, const bf16* h, bf16* g, bf16* hs, float* c, float* loss,
                                    int M, int K, int N, float grad_scale, int* bad_target, cudaStream_t stream = 0) {
  using namespace head_ce_sm90;
  if (M < 0 || N <= 0 || K % 8 || (hs && !h)) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  head_ce_finalize_kernel<<<(M + 7) / 8, 256, 0, stream>>>(scratch, scratch + (size_t)M * tiles_n(N), targets, h, g, hs, c, loss, M, N, K,
                                                          grad_scale, bad_target);
  return cudaGetLastError();
}

}  // namespace layers
