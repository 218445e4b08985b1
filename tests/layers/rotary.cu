// The layer test of rotary (tests/layers/gpu_test.h: helpers and tolerances), against rotary
// (CPU references: model/reference_layers.h unless named otherwise).
#include "tests/layers/gpu_test.h"
#include "layers/rotary.cuh"
#include "tests/oracle_kernels.cuh"

// ---- rotary at the speedrun's length (angles up to 65535 rad), forward and transpose; D = 128
// takes the 4-wide path, D = 6 the one-pair-a-thread path
static void test_rotary() {
  for (int D : {128, 6}) {
    const int T = 65536, H = 2;
    std::vector<double> x = random_bf16((size_t)T * H * D), y(x.size()), back(x.size());
    model_ref::rotary(x.data(), y.data(), T, H, D, 1.0);
    auto table = layers::rotary_table(T, D);
    float2* dt;
    CUDA_CHECK(cudaMalloc(&dt, table.size() * sizeof(float2)));
    CUDA_CHECK(cudaMemcpy(dt, table.data(), table.size() * sizeof(float2), cudaMemcpyHostToDevice));
    bf16* dxr = to_device(x);
    CUDA_CHECK(oracle::rotary(dxr, dt, T, H, D, 1.f));
    std::vector<double> got = from_device(dxr, x.size());
    const double e = rel_err(got, y);
    CUDA_CHECK(oracle::rotary(dxr, dt, T, H, D, -1.f));
    const double eb = rel_err(from_device(dxr, x.size()), x);
    CHECK(e < 4e-3, "rotary D=%d forward rel err %.2e", D, e);
    CHECK(eb < 8e-3, "rotary D=%d forward then transpose: %.2e from the input (two roundings)", D, eb);
    std::printf("rotary T=%d D=%d: forward %.2e, round trip %.2e\n", T, D, e, eb);
    CUDA_CHECK(cudaFree(dt));
    CUDA_CHECK(cudaFree(dxr));
  }
}

LAYER_TEST_MAIN("rotary", test_rotary)
