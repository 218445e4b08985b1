// The backward of the per-head RMS norm + rotary embedding that made Q or K (attention.h
// NormRotary), fused into the backward's last touch of dQ and dK, so that the gradient of the
// pre-norm q and k leaves attention without a round trip of dQ or dK through memory:
//   forward (the caller's): n = x rstd, rstd = 1 / sqrt(mean(x^2) + eps) over each head's D dims;
//             y1 = n1 cos + n2 sin, y2 = -n1 sin + n2 cos (halves n1 = [0, D/2), n2 = [D/2, D),
//             angle t f_j from the table [T][D/2] of (cos, sin)); y is the Q or K attention saw
//   backward: dn1 = dy1 cos - dy2 sin, dn2 = dy1 sin + dy2 cos (the rotation's transpose, R^T),
//             then dx = rstd dn - rstd^3 x (dn . x) / D
// Since n = x rstd = R^T y and R is orthogonal (dn . n = dy . y), the same gradient is
//             dx = rstd R^T (dy - y (dy . y) / D)
// which needs y (the Q or K attention was given) instead of x, so x need not be kept at all:
// the key-owning kernels hold their block's tile of K in shared memory, so dK's backward reads
// nothing more from global memory (KeyNormRotary below); dQ's reads Q's row.
//   y: bf16 [T, H, D]; rstd: fp32 [T H]; dy (in) fp32 in registers; dx (out) bf16 [T, H, D].
// norm_rotary_backward_row: one warp a row (t, h), lane l holding dims 64 k + 2 l + {0, 1},
// k < D / 64. At D = 128 dims d and d + 64 (a rotation pair) are in one lane; at D = 64 lane
// l < 16 pairs with lane l + 16. Used by the sm90 fused backward's dQ conversion (dq_order.cuh)
// and, in place on bf16 dQ or dK, by the other backward kernels (norm_rotary_backward_inplace).
// CPU reference: model/reference_layers.h, rotary^T then rmsnorm_bwd (tests/test_attention_gpu.cu).
#pragma once
#include <cuda_bf16.h>

#include "attention/attention.h"

namespace attn {

template <int D>
__device__ __forceinline__ void norm_rotary_backward_row(float (&g)[D / 32], const __nv_bfloat16* __restrict__ y,
                                                           const NormRotary& qn, int t, int h, int H, int lane) {
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  constexpr int N = D / 32;
  const __nv_bfloat16* yr = y + ((size_t)t * H + h) * D;
  float yv[N], c[N], s[N], a[N];
#pragma unroll
  for (int k = 0; k < N / 2; k++) {
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(yr + 64 * k + 2 * lane));
    yv[2 * k] = v.x, yv[2 * k + 1] = v.y;
  }
  // this lane's angles: j = d mod D/2 for its dims, the same j for both halves at D = 128
  const int j = (2 * lane) % (D / 2);
  const float4 cs = *reinterpret_cast<const float4*>(qn.table + (size_t)t * (D / 2) + j);
#pragma unroll
  for (int k = 0; k < N; k += 2) c[k] = cs.x, s[k] = cs.y, c[k + 1] = cs.z, s[k + 1] = cs.w;
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < N; k++) dot += g[k] * yv[k];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffff, dot, o);
  const float r = qn.rstd[(size_t)t * H + h], m = dot / D;
#pragma unroll
  for (int k = 0; k < N; k++) a[k] = g[k] - m * yv[k];  // dy - y (dy . y) / D, then R^T and rstd
  if constexpr (D == 128) {  // a[0..1]: first half at j, j + 1; a[2..3]: second half at the same j
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const float p = a[e], q = a[2 + e];
      g[e] = r * (p * c[e] - q * s[e]);
      g[2 + e] = r * (p * s[e] + q * c[e]);
    }
  } else {  // lanes 0-15 hold the first half, 16-31 the second; the partner is 16 lanes away
    const bool first = lane < 16;
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const float p = __shfl_xor_sync(0xffffffff, a[e], 16);
      g[e] = r * (first ? a[e] * c[e] - p * s[e] : p * s[e] + a[e] * c[e]);
    }
  }
}

// The same in place on a bf16 dQ or dK [T, H, D] (dy; the kernels that write them as bf16), y
// the Q or K they were computed from. One warp a row.
template <int D>
__global__ void norm_rotary_backward_inplace_kernel(__nv_bfloat16* __restrict__ dy, const __nv_bfloat16* __restrict__ y,
                                                    NormRotary qn, int T, int H) {
  const int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (w >= T * H) return;  // uniform in the warp
  __nv_bfloat16* row = dy + (size_t)w * D;
  float g[D / 32];
#pragma unroll
  for (int k = 0; k < D / 64; k++) {
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(row + 64 * k + 2 * lane));
    g[2 * k] = v.x, g[2 * k + 1] = v.y;
  }
  norm_rotary_backward_row<D>(g, y, qn, w / H, w % H, H, lane);
#pragma unroll
  for (int k = 0; k < D / 64; k++)
    *reinterpret_cast<__nv_bfloat162*>(row + 64 * k + 2 * lane) = __floats2bfloat162_rn(g[2 * k], g[2 * k + 1]);
}

inline cudaError_t norm_rotary_backward_inplace(__nv_bfloat16* dy, const __nv_bfloat16* y, const NormRotary& qn, int T, int H,
                                                int D, cudaStream_t stream) {
  const int warps = 8;
  const unsigned blocks = (unsigned)(((size_t)T * H + warps - 1) / warps);
  if (D == 64) norm_rotary_backward_inplace_kernel<64><<<blocks, warps * 32, 0, stream>>>(dy, y, qn, T, H);
  else norm_rotary_backward_inplace_kernel<128><<<blocks, warps * 32, 0, stream>>>(dy, y, qn, T, H);
  return cudaGetLastError();
}

// dK's backward through k's norm + rotary in a key-owning block's store (bwd_key_owner_sm90.cuh),
// in the layout of a wgmma accumulator: this thread holds rows row0 and row0 + 8 of the block's
// keys, columns 8 nb + 2 (lane % 4) + {0, 1}; a row's D columns are the 4 lanes of a quad, and
// the rotation pair of column c < D/2 (c + D/2) is block nb + D/16 of the same thread.
//   dx = rstd R^T (g - y (g . y) / D),  g = scale dK (fp32), y = the block's K tile (bf16)
// load() reads this thread's rstd and angles (issued early, so their latency hides under the
// block's last matmuls); apply() turns the accumulator into dx, which the caller stores.
template <int D>
struct KeyNormRotary {
  static constexpr int NB = D / 8, HALF = D / 16;  // n8 blocks of a row; the second half starts at HALF
  float rstd[2];
  float4 cs[2][HALF];  // (cos, sin) of angles j and j + 1, j = 8 nb + 2 (lane % 4)

  __device__ __forceinline__ void load(const NormRotary& kn, int row0, int T, int H, int h, int lane) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
      const int row = row0 + 8 * r < T ? row0 + 8 * r : 0;  // rows past T: any valid row, not stored
      rstd[r] = kn.rstd[(size_t)row * H + h];
      const float4* p = reinterpret_cast<const float4*>(kn.table + (size_t)row * (D / 2) + 2 * (lane & 3));
#pragma unroll
      for (int nb = 0; nb < HALF; nb++) cs[r][nb] = p[4 * nb];  // a float4 is 2 angles: 8 angles a block
    }
  }
  // acc (scale dK) becomes dx, in place; y_pair(r, nb): the K tile's (row0 + 8 r, 8 nb + 2 (lane %
  // 4) + {0, 1}) as floats. Rows past T come out as numbers that are not stored.
  template <typename YPair>
  __device__ __forceinline__ void apply(float (&acc)[NB][4], float scale, YPair&& y_pair) const {
#pragma unroll
    for (int r = 0; r < 2; r++) {
      float g[NB][2], y[NB][2], dot = 0.f;
#pragma unroll
      for (int nb = 0; nb < NB; nb++) {
        const float2 yy = y_pair(r, nb);
        g[nb][0] = acc[nb][2 * r] * scale, g[nb][1] = acc[nb][2 * r + 1] * scale;
        y[nb][0] = yy.x, y[nb][1] = yy.y;
        dot += g[nb][0] * y[nb][0] + g[nb][1] * y[nb][1];
      }
      dot += __shfl_xor_sync(0xffffffff, dot, 1);  // the row's 4 lanes (every lane runs this)
      dot += __shfl_xor_sync(0xffffffff, dot, 2);
      const float m = dot / D;
#pragma unroll
      for (int nb = 0; nb < HALF; nb++) {
        const float4 t = cs[r][nb];
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const float c = e ? t.z : t.x, s = e ? t.w : t.y;
          const float a = g[nb][e] - m * y[nb][e], b = g[nb + HALF][e] - m * y[nb + HALF][e];
          acc[nb][2 * r + e] = rstd[r] * (a * c - b * s);
          acc[nb + HALF][2 * r + e] = rstd[r] * (a * s + b * c);
        }
      }
    }
  }
};

}  // namespace attn
