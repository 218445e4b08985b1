// The layer test of cast (tests/layers/gpu_test.h: helpers), against a plain CPU rounding: bf16
// round-to-nearest-even of fp32 values, and the exact widening back, bit for bit (no tolerance:
// both are exactly defined). Values span normal, subnormal, huge and special fp32 numbers.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "layers/cast.cuh"
#include "tests/layers/gpu_test.h"

// fp32 -> bf16 bits, round to nearest even (NaN kept a NaN)
static uint16_t ref_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  const uint32_t lsb = (u >> 16) & 1;
  return (uint16_t)((u + 0x7fff + lsb) >> 16);
}

static void test_cast() {
  const size_t n = (1 << 20) + 37;  // not a multiple of the block
  std::mt19937 rng(7);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; i++) {
    uint32_t u = rng();
    std::memcpy(&x[i], &u, 4);  // every bit pattern: normals, subnormals, infinities, NaNs
  }
  x[0] = 0.f, x[1] = -0.f, x[2] = std::numeric_limits<float>::infinity(), x[3] = 1.f + 1.f / 256;  // a tie: rounds to even
  float *dx, *dy;
  __nv_bfloat16* dh;
  CUDA_CHECK(cudaMalloc(&dx, n * 4));
  CUDA_CHECK(cudaMalloc(&dy, n * 4));
  CUDA_CHECK(cudaMalloc(&dh, n * 2));
  CUDA_CHECK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(layers::cast_to_bf16(dx, dh, n));
  CUDA_CHECK(layers::cast_to_fp32(dh, dy, n));
  std::vector<uint16_t> h(n);
  std::vector<float> y(n);
  CUDA_CHECK(cudaMemcpy(h.data(), dh, n * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(y.data(), dy, n * 4, cudaMemcpyDeviceToHost));
  size_t bad16 = 0, bad32 = 0;
  for (size_t i = 0; i < n; i++) {
    const uint16_t want = ref_bf16(x[i]);
    const bool nan = std::isnan(x[i]);
    if (nan ? ((h[i] & 0x7f80) != 0x7f80 || (h[i] & 0x7f) == 0) : h[i] != want) bad16++;
    uint32_t wide = (uint32_t)h[i] << 16, got;
    std::memcpy(&got, &y[i], 4);
    if (got != wide) bad32++;
  }
  CHECK(bad16 == 0 && bad32 == 0, "cast: %zu of %zu bf16 roundings differ from round-to-nearest-even, %zu widenings inexact", bad16, n, bad32);
  std::printf("cast: %zu values, fp32 -> bf16 -> fp32 bit for bit\n", n);
  CHECK(layers::cast_to_bf16(dx, dh, 0) == cudaSuccess, "cast: n = 0 refused");
  for (void* p : {(void*)dx, (void*)dy, (void*)dh}) CUDA_CHECK(cudaFree(p));
}

LAYER_TEST_MAIN("cast", test_cast)
