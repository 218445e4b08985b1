// The MLP's activation (docs/model.md): r = max(u, 0)^2, backward du = 2 max(u, 0) dr (the
// backward from u itself, which the model does not keep, is an oracle in tests/oracle_kernels.cuh).
//   u, r, dr, du: bf16 [n], n a multiple of 8; math in fp32, 16-byte loads.
// relu2_backward_from_r takes the output r instead of u: max(u, 0) = sqrt(r), so the model keeps
// r only (u is 4 x width a token and layer); sqrt of the bf16-rounded r is max(u, 0) within
// 2^-9 relative, under the bf16 rounding of du itself (so the special-function unit's sqrt,
// within 1 ulp of fp32, serves: the same one as the fused path's, gemm/epilogue_relu2.cuh).
// CPU reference: model/reference_layers.h (relu2, relu2_bwd).
#pragma once
#include "common/fast_math.cuh"
#include "layers/common.cuh"

namespace layers {

__global__ void relu2_forward_kernel(const bf16* __restrict__ u, bf16* __restrict__ r, size_t n8) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  Pack8 a = load8(u + 8 * i), o;
#pragma unroll
  for (int k = 0; k < 8; k++) {
    const float v = fmaxf(a.get(k), 0.f);
    o.set(k, v * v);
  }
  store8(r + 8 * i, o);
}

__global__ void relu2_backward_from_r_kernel(const bf16* __restrict__ r, const bf16* __restrict__ dr, bf16* __restrict__ du, size_t n8) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  Pack8 a = load8(r + 8 * i), g = load8(dr + 8 * i), o;
#pragma unroll
  for (int k = 0; k < 8; k++) o.set(k, 2.f * sqrt_approx(a.get(k)) * g.get(k));
  store8(du + 8 * i, o);
}

inline cudaError_t relu2_forward(const bf16* u, bf16* r, size_t n, cudaStream_t stream = 0) {
  if (n % 8) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  relu2_forward_kernel<<<(unsigned)((n / 8 + 255) / 256), 256, 0, stream>>>(u, r, n / 8);
  return cudaGetLastError();
}

inline cudaError_t relu2_backward_from_r(const bf16* r, const bf16* dr, bf16* du, size_t n, cudaStream_t stream = 0) {
  if (n % 8) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  relu2_backward_from_r_kernel<<<(unsigned)((n / 8 + 255) / 256), 256, 0, stream>>>(r, dr, du, n / 8);
  return cudaGetLastError();
}

}  // namespace layers
