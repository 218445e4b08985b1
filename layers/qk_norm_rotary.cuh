// The per-head RMS norm of q and k followed by the rotary embedding (docs/model.md), fused, for
// q and k in one pass:
//   n = x * rstd, rstd = 1 / sqrt(mean(x^2) + eps) over each head's D dims;
//   y1 = n1 cos + n2 sin, y2 = -n1 sin + n2 cos  (halves n1 = [0, D/2), n2 = [D/2, D), angle
//   t f_j as in layers/rotary.cuh, from its fp64-built table [T][D/2])
//   x, y: bf16 [T][H][D], one each for q and k; rstd: fp32 [T * H] each. D = 64 or 128.
// The backward runs inside attention's backward, as dQ and dK leave it
// (attention/norm_rotary_bwd.cuh), so no pass of its own reads them back.
// One row (t, h) is D / 8 lanes of a warp, 8 elements (16 bytes) a lane: lane l < D/16 holds
// dims [8l, 8l + 8) of the first half and its partner l + D/16 the same dims of the second, so
// the rotation pairs are one shuffle apart. The normalised values stay in fp32 between the two
// steps (the unfused kernels rounded them to bf16 in between). One read and one write of each
// tensor, against two of each for rmsnorm then rotary.
// The D / 8 lanes of a token take all 2H rows of that token (q's heads, then k's), four at a
// time with their loads issued together: the lane's 8 angles are read from the table once for
// the 2H rows (a kernel per tensor and row read them 2H times, mostly from L2, and ran at half
// the memory bandwidth), and four loads are in flight per lane. The arithmetic of a row is the
// same as with one row a lane group, so the bits are too.
// The same arithmetic also runs in the epilogue of the product that makes q, k and v (Hopper:
// gemm/epilogue_qk_norm_rotary.cuh), so q and k are never written before their norm; the pass
// here serves the other devices and shapes, in place there.
// CPU reference: model/reference_layers.h, rmsnorm then rotary.
#pragma once
#include <cuda_fp16.h>

#include <cstring>
#include <vector>

#include "layers/common.cuh"
#include "layers/rotary.cuh"

namespace layers {

template <typename P>
struct QK {  // one pointer for q, one for k
  P q, k;
};

template <int D>
struct QkToken {
  static constexpr int kLanes = D / 8, kHalf = kLanes / 2, kBatch = 4;  // rows whose loads go out together
  size_t t;
  int lane;  // within the token's lane group
  bool valid;
  __device__ __forceinline__ explicit QkToken(int T) {
    const size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    t = g / kLanes;
    lane = (int)(g % kLanes);
    valid = t < (size_t)T;
  }
  __device__ __forceinline__ static float row_sum(float v) {
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
  }
  // cos and sin of this lane's 8 angles
  __device__ __forceinline__ void angles(const float2* table, float* c, float* s) const {
    const float4* p = reinterpret_cast<const float4*>(table + t * (D / 2) + (lane % kHalf) * 8);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const float4 v = p[k];
      c[2 * k] = v.x, s[2 * k] = v.y, c[2 * k + 1] = v.z, s[2 * k + 1] = v.w;
    }
  }
  // row j of the token's 2H (q's heads, then k's): its offset in the tensor and which tensor
  __device__ __forceinline__ size_t at(int j, int H) const { return (t * H + (j < H ? j : j - H)) * D + lane * 8; }
};

template <int D>
__global__ void qk_norm_rotary_forward_kernel(QK<const bf16*> x, QK<bf16*> y, QK<float*> rstd, const float2* __restrict__ table, int T,
                                              int H, float eps) {
  using R = QkToken<D>;
  const R q(T);
  float c[8], s[8];
  if (q.valid) q.angles(table, c, s);
  const bool first = q.lane < R::kHalf;
  for (int j0 = 0; j0 < 2 * H; j0 += R::kBatch) {  // j0, j: the same in every lane (the shuffles need the whole warp)
    Pack8 v[R::kBatch];
#pragma unroll
    for (int u = 0; u < R::kBatch; u++) {
      const int j = j0 + u;
      v[u] = q.valid && j < 2 * H ? load8((j < H ? x.q : x.k) + q.at(j, H)) : Pack8{};
    }
#pragma unroll
    for (int u = 0; u < R::kBatch; u++) {
      const int j = j0 + u;
      if (j >= 2 * H) break;
      float f[8], ss = 0.f;
#pragma unroll
      for (int k = 0; k < 8; k++) f[k] = v[u].get(k), ss += f[k] * f[k];
      const float r = rsqrtf(R::row_sum(ss) / D + eps);
      float p[8];
#pragma unroll
      for (int k = 0; k < 8; k++) f[k] *= r;
#pragma unroll
      for (int k = 0; k < 8; k++) p[k] = __shfl_xor_sync(0xffffffff, f[k], R::kHalf);
      if (!q.valid) continue;
      Pack8 o;
#pragma unroll
      for (int k = 0; k < 8; k++) o.set(k, first ? f[k] * c[k] + p[k] * s[k] : -p[k] * s[k] + f[k] * c[k]);
      store8((j < H ? y.q : y.k) + q.at(j, H), o);
      if (q.lane == 0) (j < H ? rstd.q : rstd.k)[q.t * H + (j < H ? j : j - H)] = r;
    }
  }
}

inline cudaError_t qk_norm_rotary_forward(QK<const bf16*> x, QK<bf16*> y, QK<float*> rstd, const float2* table, int T, int H, int D,
                                          float eps, cudaStream_t st = 0) {
  if ((D != 64 && D != 128) || T < 0 || H < 0 || !aligned16({x.q, x.k, y.q, y.k, table})) return cudaErrorInvalidValue;
  const size_t threads = (size_t)T * (D / 8);
  if (!threads || !H) return cudaSuccess;
  const unsigned blocks = (unsigned)((threads + 255) / 256);
  if (D == 128) qk_norm_rotary_forward_kernel<128><<<blocks, 256, 0, st>>>(x, y, rstd, table, T, H, eps);
  else qk_norm_rotary_forward_kernel<64><<<blocks, 256, 0, st>>>(x, y, rstd, table, T, H, eps);
  return cudaGetLastError();
}

}  // namespace layers
