// The backward of the per-head RMS norm + rotary embedding that made Q, fused into the last pass
// over dQ (attention.h QNormRotary), so that the gradient of the pre-norm q leaves attention
// without a round trip of dQ through memory:
//   forward (the caller's): n = x rstd, rstd = 1 / sqrt(mean(x^2) + eps) over each head's D dims;
//             q1 = n1 cos + n2 sin, q2 = -n1 sin + n2 cos (halves n1 = [0, D/2), n2 = [D/2, D),
//             angle t f_j from the table [T][D/2] of (cos, sin))
//   backward: dn1 = dq1 cos - dq2 sin, dn2 = dq1 sin + dq2 cos (the rotation's transpose), then
//             dx = rstd dn - rstd^3 x (dn . x) / D
//   x: bf16 [T, H, D]; rstd: fp32 [T H]; dq (in) fp32 in registers; dx (out) bf16 [T, H, D].
// One warp a row (t, h): lane l holds dims 64 k + 2 l + {0, 1}, k < D / 64. At D = 128 dims d
// and d + 64 (a rotation pair) are in one lane; at D = 64 lane l < 16 pairs with lane l + 16.
// The same math as layers/qk_norm_rotary.cuh (the model's unfused path, which still does k);
// it reads dq there as bf16, here in fp32 where the caller has it.
// Used by the sm90 fused backward's dQ conversion (dq_order.cuh) and, in place on bf16 dQ, by the
// other backward kernels (q_norm_rotary_backward_inplace below).
#pragma once
#include <cuda_bf16.h>

#include "attention/attention.h"

namespace attn {

template <int D>
__device__ __forceinline__ void q_norm_rotary_backward_row(float (&g)[D / 32], const QNormRotary& qn, int t, int h, int H,
                                                           int lane) {
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  constexpr int N = D / 32;
  const __nv_bfloat16* xr = qn.x + ((size_t)t * H + h) * D;
  float x[N], c[N], s[N], dn[N];
#pragma unroll
  for (int k = 0; k < N / 2; k++) {
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(xr + 64 * k + 2 * lane));
    x[2 * k] = v.x, x[2 * k + 1] = v.y;
  }
  // this lane's angles: j = d mod D/2 for its dims, the same j for both halves at D = 128
  const int j = (2 * lane) % (D / 2);
  const float4 cs = *reinterpret_cast<const float4*>(qn.table + (size_t)t * (D / 2) + j);
#pragma unroll
  for (int k = 0; k < N; k += 2) c[k] = cs.x, s[k] = cs.y, c[k + 1] = cs.z, s[k + 1] = cs.w;
  if constexpr (D == 128) {  // g[0..1]: first half at j, j + 1; g[2..3]: second half at the same j
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const float a = g[e], b = g[2 + e];
      dn[e] = a * c[e] - b * s[e];
      dn[2 + e] = a * s[e] + b * c[e];
    }
  } else {  // lanes 0-15 hold the first half, 16-31 the second; the partner is 16 lanes away
    const bool first = lane < 16;
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const float p = __shfl_xor_sync(0xffffffff, g[e], 16);
      dn[e] = first ? g[e] * c[e] - p * s[e] : p * s[e] + g[e] * c[e];
    }
  }
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < N; k++) dot += dn[k] * x[k];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffff, dot, o);
  const float r = qn.rstd[(size_t)t * H + h], cc = r * r * r * dot / D;
#pragma unroll
  for (int k = 0; k < N; k++) g[k] = r * dn[k] - cc * x[k];
}

// The same in place on a bf16 dQ [T, H, D] (the kernels that write dQ as bf16). One warp a row.
template <int D>
__global__ void q_norm_rotary_backward_inplace_kernel(__nv_bfloat16* __restrict__ dq, QNormRotary qn, int T, int H) {
  const int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (w >= T * H) return;  // uniform in the warp
  __nv_bfloat16* row = dq + (size_t)w * D;
  float g[D / 32];
#pragma unroll
  for (int k = 0; k < D / 64; k++) {
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(row + 64 * k + 2 * lane));
    g[2 * k] = v.x, g[2 * k + 1] = v.y;
  }
  q_norm_rotary_backward_row<D>(g, qn, w / H, w % H, H, lane);
#pragma unroll
  for (int k = 0; k < D / 64; k++)
    *reinterpret_cast<__nv_bfloat162*>(row + 64 * k + 2 * lane) = __floats2bfloat162_rn(g[2 * k], g[2 * k + 1]);
}

inline cudaError_t q_norm_rotary_backward_inplace(__nv_bfloat16* dq, const QNormRotary& qn, int T, int H, int D,
                                                  cudaStream_t stream) {
  const int warps = 8;
  const unsigned blocks = (unsigned)(((size_t)T * H + warps - 1) / warps);
  if (D == 64) q_norm_rotary_backward_inplace_kernel<64><<<blocks, warps * 32, 0, stream>>>(dq, qn, T, H);
  else q_norm_rotary_backward_inplace_kernel<128><<<blocks, warps * 32, 0, stream>>>(dq, qn, T, H);
  return cudaGetLastError();
}

}  // namespace attn
