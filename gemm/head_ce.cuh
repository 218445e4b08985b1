// The softcapped cross-entropy's second pass after the lm head's fused product (Hopper:
// head_ce_forward, gemm/gemm.cuh, whose epilogue, epilogue_softcap_ce.cuh, wrote for each row r of a
// chunk g[r][j] = bf16(q (1 - tanh^2(z / 30)) / 4), part[r][j] (the sums of q over each tile of
// 256 columns) and zt[r] = z[r][t_r]), one warp a row:
//   S = sum_j part[r][j],  loss[r] = log S + 60 r_t  (= logsumexp(logits) - logit_t, as layers/softcap_ce.cuh)
//   c[r] = 4 grad_scale / S,  g[r][t_r] = bf16((q_t - S) (1 - tanh^2(z_t / 30)) / 4),  hs[r] = bf16(c[r] h[r])
// so that the gradient of the logits is dz = c[r] g[r] (row r scaled), the one-hot term folded
// into the target's element: dz_t = grad_scale (q_t / S - 1) (1 - tanh^2). The head's backward
// then takes g as it is, with the row scale moved to the small operands:
//   dh = diag(c) (g W^T)   (the final norm's backward scales its rows: layers/rmsnorm.cuh)
//   dW += hs^T g
// A target of kIgnoreTarget (-1) gives loss 0 and c = 0 (no gradient); one outside [0, N)
// sets *bad_target, gives loss NaN and c = 0. Special functions as layers/softcap_ce.cuh's
// (SoftcapTerms, common/softcap.cuh); all arithmetic fp32. Against layers/softcap_ce.cuh's two
// passes dz is rounded once (g) instead of twice, and hs once more (its own bf16 rounding, in
// place of dz's second).
// Shapes: h [M][K], K a multiple of 8; part [M][tiles_n(N)] then zt [M] in one scratch
// (head_ce_scratch_floats). CPU reference: model/reference_layers.h softcap_ce
// (tests/layers/head_ce.cu).
#pragma once
#include <cuda_bf16.h>

#include <cmath>

#include "common/bf16_pack.cuh"
#include "common/softcap.cuh"
#include "gemm/tile_scheduler.cuh"

namespace gemm {
namespace head_ce_pass2 {

using elementwise::kIgnoreTarget;
using elementwise::kSoftcap;
using elementwise::load8;
using elementwise::Pack8;
using elementwise::SoftcapTerms;
using elementwise::store8;
using elementwise::warp_sum;

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

}  // namespace head_ce_pass2

// The loss, and with the backward (g, hs, c not nullptr) the row scales, the target's element of
// g and hs = diag(c) h (h [M][K]).
inline cudaError_t head_ce_finalize(const float* scratch, const int* targets, const bf16* h, bf16* g, bf16* hs, float* c, float* loss,
                                    int M, int K, int N, float grad_scale, int* bad_target, cudaStream_t stream = 0) {
  if (M < 0 || N <= 0 || K % 8 || (hs && !h)) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  head_ce_pass2::head_ce_finalize_kernel<<<(M + 7) / 8, 256, 0, stream>>>(scratch, scratch + (size_t)M * tiles_n(N), targets, h, g,
                                                                           hs, c, loss, M, N, K, grad_scale, bad_target);
  return cudaGetLastError();
}

}  // namespace gemm
