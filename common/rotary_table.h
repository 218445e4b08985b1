// The rotary position embedding's table (docs/model.md), which the plain rotation
// (layers/rotary.cuh, layers/qk_norm_rotary.cuh) and the q, k, v product's epilogue
// (gemm/epilogue_qk_norm_rotary.cuh) both read: for j < D/2 and position t, the angle t * f_j with
// f_j = 10000^(-j/(D/2)), as (cos, sin), [T][D/2] float2, built once on the host in fp64: fp32
// sincos of angles up to 65536 rad would be off by up to 4e-3 rad.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

namespace elementwise {

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

}  // namespace elementwise
