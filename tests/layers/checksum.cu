// The layer test of checksum (tests/layers/gpu_test.h: helpers and tolerances), against checksum_cpu
// (CPU references: model/reference_layers.h unless named otherwise).
// The checksum is integer: exact.
#include "tests/layers/gpu_test.h"
#include "layers/checksum.cuh"

// ---- replica checksum: equal to the CPU reference, changed by one flipped bit
static void test_checksum() {
  {
    const size_t n = 3000001;  // not a multiple of the block or grid size
    std::vector<float> h(n);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& v : h) v = nd(rng);
    float* d;
    unsigned long long* dsum;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dsum, sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    unsigned long long g1 = 0, g2 = 0;
    CUDA_CHECK(layers::checksum(d, n * sizeof(float), dsum));
    CUDA_CHECK(cudaMemcpy(&g1, dsum, sizeof(g1), cudaMemcpyDeviceToHost));
    CHECK(g1 == layers::checksum_cpu(h.data(), n * sizeof(float)), "checksum %016llx differs from the CPU reference", g1);
    h[n / 2] = std::nextafter(h[n / 2], 1e30f);  // one bit
    CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(layers::checksum(d, n * sizeof(float), dsum));
    CUDA_CHECK(cudaMemcpy(&g2, dsum, sizeof(g2), cudaMemcpyDeviceToHost));
    CHECK(g2 != g1 && g2 == layers::checksum_cpu(h.data(), n * sizeof(float)), "checksum after a one-bit change: %016llx", g2);
    std::printf("checksum: %016llx, one bit later %016llx (CPU reference agrees)\n", g1, g2);
    CUDA_CHECK(cudaFree(d));
    CUDA_CHECK(cudaFree(dsum));
  }
}

LAYER_TEST_MAIN("checksum", test_checksum)
