// Rotary position embedding on q or k (docs/model.md), in place:
//   x: bf16 [T][H][D]; for j < D/2, with x1 = x[.., j], x2 = x[.., D/2 + j] and angle t * f_j,
//   f_j = 10000^(-j/(D/2)):   y1 = x1 cos + x2 sin,   y2 = -x1 sin + x2 cos
//   sign = -1 applies the transpose, which is the backward (rotations are orthogonal).
// cos and sin come from a table [T][D/2] of float2 built once on the host in fp64
// (rotary_table): fp32 sincos of angles up to 65536 rad would be off by up to 4e-3 rad.
// One thread per (t, h) and 4 consecutive j (8-byte loads) when D/2 is a multiple of 4 (D = 64,
// 128), else one thread per (t, h, j). CPU reference: model/reference_layers.h (rotary).
#pragma once
#include <cmath>
#include <vector>

#include "layers/common.cuh"

namespace layers {

inline std::vector<float2> rotary_table(int T, int D) {
  const int half = D / 2;
  std::vector<float2> t((size_t)T * half);
  for (int p = 0; p < T; p++)
    for (int j = 0; j < half; j++) {
      const double ang = p * std::pow(10000.0, -(double)j / half);
      t[(size_t)p * half + j] = make_float2((float)std::cos(ang), (float)std::sin(ang));
    }
  return t;
}

__global__ void rotary_kernel(bf16* __restrict__ x, const float2* __restrict__ table, int T, int H, int D, float sign) {
  const int half = D / 2;
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (size_t)T * H * half) return;
  const int j = (int)(idx % half);
  const size_t th = idx / half;  // t * H + h
  const int t = (int)(th / H);
  const float2 cs = table[(size_t)t * half + j];
  const float s = sign * cs.y;
  bf16* row = x + th * D;
  const float x1 = __bfloat162float(row[j]), x2 = __bfloat162float(row[half + j]);
  row[j] = __float2bfloat16(x1 * cs.x + x2 * s);
  row[half + j] = __float2bfloat16(-x1 * s + x2 * cs.x);
}

__global__ void rotary4_kernel(bf16* __restrict__ x, const float2* __restrict__ table, int T, int H, int D, float sign) {
  const int half = D / 2, q = half / 4;
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (size_t)T * H * q) return;
  const int j = (int)(idx % q) * 4;
  const size_t th = idx / q;  // t * H + h
  const int t = (int)(th / H);
  const float4* cs4 = reinterpret_cast<const float4*>(table + (size_t)t * half + j);
  const float4 c01 = cs4[0], c23 = cs4[1];
  const float c[4] = {c01.x, c01.z, c23.x, c23.z}, sn[4] = {sign * c01.y, sign * c01.w, sign * c23.y, sign * c23.w};
  bf16* row = x + th * D;
  uint2 a = *reinterpret_cast<const uint2*>(row + j), b = *reinterpret_cast<const uint2*>(row + half + j);
  bf16* ea = reinterpret_cast<bf16*>(&a);
  bf16* eb = reinterpret_cast<bf16*>(&b);
#pragma unroll
  for (int k = 0; k < 4; k++) {
    const float x1 = __bfloat162float(ea[k]), x2 = __bfloat162float(eb[k]);
    ea[k] = __float2bfloat16(x1 * c[k] + x2 * sn[k]);
    eb[k] = __float2bfloat16(-x1 * sn[k] + x2 * c[k]);
  }
  *reinterpret_cast<uint2*>(row + j) = a;
  *reinterpret_cast<uint2*>(row + half + j) = b;
}

inline cudaError_t rotary(bf16* x, const float2* table, int T, int H, int D, float sign, cudaStream_t stream = 0) {
  if (D % 2 || T < 0 || H < 0) return cudaErrorInvalidValue;
  const size_t n = (size_t)T * H * (D / 2);
  if (n == 0) return cudaSuccess;
  if ((D / 2) % 4 == 0 && (uintptr_t)x % 8 == 0 && (uintptr_t)table % 16 == 0)
    rotary4_kernel<<<(unsigned)((n / 4 + 255) / 256), 256, 0, stream>>>(x, table, T, H, D, sign);
  else
    rotary_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, table, T, H, D, sign);
  return cudaGetLastError();
}

}  // namespace layers
