// The layer test of sum_slices (tests/layers/gpu_test.h: helpers), against a plain CPU loop that
// adds the N slices in rank order in fp32: bit for bit (no tolerance: the order of the additions
// is fixed, so the result is exactly defined). Both paths (4 floats at a time, and one at a
// time for a q not divisible by 4 or a misaligned pointer), 1 to 8 slices.
#include <cstring>
#include <random>

#include "layers/sum_slices.cuh"
#include "tests/layers/gpu_test.h"

static void one_case(int n, size_t q, size_t shift) {
  std::mt19937 r(11 + n + (unsigned)q);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x((size_t)n * q);
  for (float& v : x) v = nd(r) * (r() % 2 ? 1e-3f : 1e3f);  // mixed magnitudes: the order of the additions shows in the bits
  std::vector<float> want(q);
  for (size_t i = 0; i < q; i++) {
    float s = x[i];
    for (int k = 1; k < n; k++) s += x[(size_t)k * q + i];
    want[i] = s;
  }
  float *dx, *dy;
  CUDA_CHECK(cudaMalloc(&dx, (x.size() + shift) * 4));
  CUDA_CHECK(cudaMalloc(&dy, (q + shift) * 4));
  CUDA_CHECK(cudaMemcpy(dx + shift, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(dy, 0xFF, (q + shift) * 4));
  CUDA_CHECK(layers::sum_slices(dx + shift, n, q, dy + shift));
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(q);
  CUDA_CHECK(cudaMemcpy(got.data(), dy + shift, q * 4, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < q; i++) bad += std::memcmp(&got[i], &want[i], 4) != 0;
  CHECK(bad == 0, "sum_slices: %d slices of %zu (offset %zu floats): %zu of %zu sums differ from the CPU's in rank order", n, q, shift, bad, q);
  CUDA_CHECK(cudaFree(dx));
  CUDA_CHECK(cudaFree(dy));
}

static void test_sum_slices() {
  for (int n : {1, 2, 3, 4, 8})
    for (size_t q : {(size_t)1, (size_t)4, (size_t)1000, (size_t)(1 << 20) + 3, (size_t)(1 << 20)}) one_case(n, q, 0);
  one_case(4, 1 << 16, 1);  // misaligned: one float at a time
  std::printf("sum_slices: 1 to 8 slices, vector and scalar paths, bit for bit\n");
  float* d = nullptr;
  CHECK(layers::sum_slices(d, 0, 4, d) == cudaErrorInvalidValue, "sum_slices: 0 slices accepted");
  CHECK(layers::sum_slices(d, 4, 0, d) == cudaSuccess, "sum_slices: q = 0 refused");
}

LAYER_TEST_MAIN("sum_slices", test_sum_slices)
