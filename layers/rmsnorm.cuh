// RMS normalisation over the last dimension with no weight (docs/model.md), used on the
// residual stream (n = width) and per head on q and k (rows = T * heads, n = head dim):
//   forward:  y = x * rstd,  rstd = 1 / sqrt(mean(x^2) + eps)      x, y: bf16 [rows][n]; rstd: fp32 [rows]
//   backward: dx = rstd * dy - rstd^3 * x * (dy . x) / n           written, or added to dx when accumulate
//             (accumulate: the residual stream's gradient also arrives by the skip connection);
//             with dy_scale (fp32 [rows]), dy's row r taken as dy_scale[r] dy[r] (the fused lm head,
//             gemm/head_ce.cuh, leaves its rows' scales to this backward)
// One warp per row, 16-byte loads, sums in fp32. n must be a multiple of 8.
// CPU reference: model/reference_layers.h (rmsnorm, rmsnorm_bwd).
#pragma once
#include "layers/common.cuh"

namespace layers {

__global__ void rmsnorm_forward_kernel(const bf16* __restrict__ x, bf16* __restrict__ y, float* __restrict__ rstd, int rows,
                                       int n, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (row >= rows) return;
  const bf16* xr = x + (size_t)row * n;
  float ss = 0.f;
  for (int i = lane * 8; i < n; i += 256) {
    Pack8 v = load8(xr + i);
#pragma unroll
    for (int k = 0; k < 8; k++) ss += v.get(k) * v.get(k);
  }
  const float r = rsqrtf(warp_sum(ss) / n + eps);
  for (int i = lane * 8; i < n; i += 256) {
    Pack8 v = load8(xr + i), o;
#pragma unroll
    for (int k = 0; k < 8; k++) o.set(k, v.get(k) * r);
    store8(y + (size_t)row * n + i, o);
  }
  if (lane == 0) rstd[row] = r;
}

__global__ void rmsnorm_backward_kernel(const bf16* __restrict__ x, const float* __restrict__ rstd, const bf16* __restrict__ dy,
                                        bf16* __restrict__ dx, int rows, int n, bool accumulate,
                                        const float* __restrict__ dy_scale) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (row >= rows) return;
  const size_t base = (size_t)row * n;
  float dot = 0.f;
  for (int i = lane * 8; i < n; i += 256) {
    Pack8 a = load8(x + base + i), g = load8(dy + base + i);
#pragma unroll
    for (int k = 0; k < 8; k++) dot += a.get(k) * g.get(k);
  }
  dot = warp_sum(dot);
  const float sc = dy_scale ? dy_scale[row] : 1.f, r = rstd[row] * sc, c = rstd[row] * rstd[row] * r * dot / n;
  for (int i = lane * 8; i < n; i += 256) {
    Pack8 a = load8(x + base + i), g = load8(dy + base + i), o;
    Pack8 prev = accumulate ? load8(dx + base + i) : Pack8{};
#pragma unroll
    for (int k = 0; k < 8; k++) o.set(k, (accumulate ? prev.get(k) : 0.f) + r * g.get(k) - c * a.get(k));
    store8(dx + base + i, o);
  }
}

inline cudaError_t rmsnorm_forward(const bf16* x, bf16* y, float* rstd, int rows, int n, float eps, cudaStream_t stream = 0) {
  if (n % 8 || rows < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  rmsnorm_forward_kernel<<<(rows + 7) / 8, 256, 0, stream>>>(x, y, rstd, rows, n, eps);
  return cudaGetLastError();
}

inline cudaError_t rmsnorm_backward(const bf16* x, const float* rstd, const bf16* dy, bf16* dx, int rows, int n,
                                    bool accumulate, cudaStream_t stream = 0, const float* dy_scale = nullptr) {
  if (n % 8 || rows < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  rmsnorm_backward_kernel<<<(rows + 7) / 8, 256, 0, stream>>>(x, rstd, dy, dx, rows, n, accumulate, dy_scale);
  return cudaGetLastError();
}

}  // namespace layers
