// What the layer tests (tests/layers/*.cu, one binary a layer) share: fresh random bf16 inputs,
// device copies, outputs poisoned (NaN) before each run, the relative Frobenius error, and
// main(), which runs a file's tests and prints "layer-NAME: N passed, N failed".
// Tolerances, stated again beside each check: these layers round only their output to bf16
// (sums in fp32), so the relative Frobenius error is one bf16 rounding, about 2^-9 / sqrt(3) =
// 1.1e-3 on average: the bound is 4e-3. fp32 outputs (rstd, fp32 matmul outputs, the loss,
// Adam, the embedding's backward): 1e-5. Bitwise where a fused kernel replaces unfused ones with
// the same arithmetic, and for integer checksums.
#pragma once
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "common/cuda_check.h"
#include "layers/common.cuh"
#include "model/reference_layers.h"
#include "tests/check.h"

using layers::bf16;
static std::mt19937_64 rng(99);

inline std::vector<double> random_bf16(size_t n, double scale = 1.0) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<double> x(n);
  for (auto& v : x) v = (double)__bfloat162float(__float2bfloat16((float)(nd(rng) * scale)));
  return x;
}
inline bf16* to_device(const std::vector<double>& x) {
  std::vector<bf16> h(x.size());
  for (size_t i = 0; i < x.size(); i++) h[i] = __float2bfloat16((float)x[i]);
  bf16* d;
  CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(bf16)));
  CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  return d;
}
inline bf16* poisoned(size_t n) {
  bf16* d;
  CUDA_CHECK(cudaMalloc(&d, n * sizeof(bf16)));
  CUDA_CHECK(cudaMemset(d, 0xFF, n * sizeof(bf16)));
  return d;
}
inline std::vector<double> from_device(const bf16* d, size_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<bf16> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  std::vector<double> x(n);
  for (size_t i = 0; i < n; i++) x[i] = __bfloat162float(h[i]);
  return x;
}
inline double rel_err(const std::vector<double>& x, const std::vector<double>& r) {
  double num = 0, den = 0;
  for (size_t i = 0; i < r.size(); i++) {
    if (!std::isfinite(x[i])) return INFINITY;
    num += (x[i] - r[i]) * (x[i] - r[i]);
    den += r[i] * r[i];
  }
  return std::sqrt(num / den);
}

static const double eps = 1.0 / 128;  // the norms' eps (docs/model.md)

// main() of a layer test: NAME is the suite's name, the arguments the test functions to run
#define LAYER_TEST_MAIN(NAME, ...)                                        \
  int main() {                                                           \
    int ndev = 0;                                                        \
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {         \
      std::printf("layer-%s: no GPU\n", NAME);                           \
      return 1;                                                          \
    }                                                                    \
    for (void (*f)() : {__VA_ARGS__}) f();                               \
    return test_summary("layer-" NAME);                                  \
  }
