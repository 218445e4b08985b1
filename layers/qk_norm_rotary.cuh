// The per-head RMS norm of q and k followed by the rotary embedding (docs/model.md), fused:
//   forward:  n = x * rstd, rstd = 1 / sqrt(mean(x^2) + eps) over each head's D dims;
//             y1 = n1 cos + n2 sin, y2 = -n1 sin + n2 cos  (halves n1 = [0, D/2), n2 = [D/2, D),
//             angle t f_j as in layers/rotary.cuh, from its fp64-built table [T][D/2])
//   backward: dn1 = dy1 cos - dy2 sin, dn2 = dy1 sin + dy2 cos  (the rotation's transpose), then
//             dx = rstd dn - rstd^3 x (dn . x) / D
//   x, y, dy, dx: bf16 [T][H][D]; rstd: fp32 [T * H]. D = 64 or 128.
// One row (t, h) is D / 8 lanes of a warp, 8 elements (16 bytes) a lane: lane l < D/16 holds
// dims [8l, 8l + 8) of the first half and its partner l + D/16 the same dims of the second, so
// the rotation pairs are one shuffle apart. The normalised values stay in fp32 between the two
// steps (the unfused kernels rounded them to bf16 in between). One read and one write of the
// tensor, against two of each for rmsnorm then rotary.
// CPU reference: model/reference_layers.h, rmsnorm then rotary (and their backwards).
#pragma once
#include "layers/common.cuh"

namespace layers {

template <int D>
struct QkRow {
  static constexpr int kLanes = D / 8, kHalf = kLanes / 2;
  size_t row;
  int lane;  // within the row
  bool valid;
  __device__ __forceinline__ QkRow(size_t rows) {
    const size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    row = g / kLanes;
    lane = (int)(g % kLanes);
    valid = row < rows;
  }
  __device__ __forceinline__ static float row_sum(float v) {
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
  }
  // cos and sin of this lane's 8 angles
  __device__ __forceinline__ void angles(const float2* table, int H, float* c, float* s) const {
    const size_t t = row / H;
    const float4* p = reinterpret_cast<const float4*>(table + t * (D / 2) + (lane % kHalf) * 8);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const float4 v = p[k];
      c[2 * k] = v.x, s[2 * k] = v.y, c[2 * k + 1] = v.z, s[2 * k + 1] = v.w;
    }
  }
};

template <int D>
__global__ void qk_norm_rotary_forward_kernel(const bf16* __restrict__ x, bf16* __restrict__ y, float* __restrict__ rstd,
                                              const float2* __restrict__ table, size_t rows, int H, float eps) {
  using R = QkRow<D>;
  const R q(rows);
  const Pack8 v = q.valid ? load8(x + q.row * D + q.lane * 8) : Pack8{};  // every lane takes part in the shuffles
  float f[8], ss = 0.f;
#pragma unroll
  for (int k = 0; k < 8; k++) f[k] = v.get(k), ss += f[k] * f[k];
  const float r = rsqrtf(R::row_sum(ss) / D + eps);
  float p[8];
#pragma unroll
  for (int k = 0; k < 8; k++) f[k] *= r;
#pragma unroll
  for (int k = 0; k < 8; k++) p[k] = __shfl_xor_sync(0xffffffff, f[k], R::kHalf);
  if (!q.valid) return;
  float c[8], s[8];
  q.angles(table, H, c, s);
  const bool first = q.lane < R::kHalf;
  Pack8 o;
#pragma unroll
  for (int k = 0; k < 8; k++) o.set(k, first ? f[k] * c[k] + p[k] * s[k] : -p[k] * s[k] + f[k] * c[k]);
  store8(y + q.row * D + q.lane * 8, o);
  if (q.lane == 0) rstd[q.row] = r;
}

template <int D>
__global__ void qk_norm_rotary_backward_kernel(const bf16* __restrict__ x, const float* __restrict__ rstd, const bf16* __restrict__ dy,
                                               bf16* __restrict__ dx, const float2* __restrict__ table, size_t rows, int H) {
  using R = QkRow<D>;
  const R q(rows);
  const size_t at = q.row * D + q.lane * 8;
  const Pack8 gv = q.valid ? load8(dy + at) : Pack8{}, xv = q.valid ? load8(x + at) : Pack8{};
  float g[8], p[8], c[8], s[8];
#pragma unroll
  for (int k = 0; k < 8; k++) g[k] = gv.get(k);
#pragma unroll
  for (int k = 0; k < 8; k++) p[k] = __shfl_xor_sync(0xffffffff, g[k], R::kHalf);
  if (q.valid) q.angles(table, H, c, s);
  const bool first = q.lane < R::kHalf;
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < 8; k++) {
    if (q.valid) g[k] = first ? g[k] * c[k] - p[k] * s[k] : p[k] * s[k] + g[k] * c[k];  // dn
    dot += g[k] * xv.get(k);
  }
  dot = R::row_sum(dot);
  if (!q.valid) return;
  const float r = rstd[q.row], cc = r * r * r * dot / D;
  Pack8 o;
#pragma unroll
  for (int k = 0; k < 8; k++) o.set(k, r * g[k] - cc * xv.get(k));
  store8(dx + at, o);
}

inline cudaError_t qk_norm_rotary_forward(const bf16* x, bf16* y, float* rstd, const float2* table, int T, int H, int D, float eps,
                                          cudaStream_t st = 0) {
  if ((D != 64 && D != 128) || T < 0 || H < 0 || ((uintptr_t)x | (uintptr_t)y | (uintptr_t)table) % 16) return cudaErrorInvalidValue;
  const size_t rows = (size_t)T * H, threads = rows * (D / 8);
  if (!rows) return cudaSuccess;
  if (D == 128) qk_norm_rotary_forward_kernel<128><<<(unsigned)((threads + 255) / 256), 256, 0, st>>>(x, y, rstd, table, rows, H, eps);
  else qk_norm_rotary_forward_kernel<64><<<(unsigned)((threads + 255) / 256), 256, 0, st>>>(x, y, rstd, table, rows, H, eps);
  return cudaGetLastError();
}
inline cudaError_t qk_norm_rotary_backward(const bf16* x, const float* rstd, const bf16* dy, bf16* dx, const float2* table, int T, int H,
                                           int D, cudaStream_t st = 0) {
  if ((D != 64 && D != 128) || T < 0 || H < 0 || ((uintptr_t)x | (uintptr_t)dy | (uintptr_t)dx | (uintptr_t)table) % 16)
    return cudaErrorInvalidValue;
  const size_t rows = (size_t)T * H, threads = rows * (D / 8);
  if (!rows) return cudaSuccess;
  if (D == 128) qk_norm_rotary_backward_kernel<128><<<(unsigned)((threads + 255) / 256), 256, 0, st>>>(x, rstd, dy, dx, table, rows, H);
  else qk_norm_rotary_backward_kernel<64><<<(unsigned)((threads + 255) / 256), 256, 0, st>>>(x, rstd, dy, dx, table, rows, H);
  return cudaGetLastError();
}

}  // namespace layers
