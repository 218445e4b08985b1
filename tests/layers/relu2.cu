// The layer test of relu2 (tests/layers/gpu_test.h: helpers and tolerances), against relu2, relu2_bwd
// (CPU references: model/reference_layers.h unless named otherwise).
#include "tests/layers/gpu_test.h"
#include "layers/relu2.cuh"
#include "tests/oracle_kernels.cuh"

// ---- relu^2
static void test_relu2() {
  {
    const size_t n = 1 << 20;
    std::vector<double> u = random_bf16(n), dr = random_bf16(n), r(n), du(n);
    model_ref::relu2(u.data(), r.data(), n);
    model_ref::relu2_bwd(u.data(), dr.data(), du.data(), n);
    bf16 *du_ = to_device(u), *ddr = to_device(dr), *dr_out = poisoned(n), *ddu = poisoned(n);
    CUDA_CHECK(layers::relu2_forward(du_, dr_out, n));
    CUDA_CHECK(oracle::relu2_backward(du_, ddr, ddu, n));
    const double e1 = rel_err(from_device(dr_out, n), r), e2 = rel_err(from_device(ddu, n), du);
    // from the stored output r (bf16): sqrt(r) is max(u, 0) within 2^-9, then du is rounded
    bf16* ddu_r = poisoned(n);
    CUDA_CHECK(layers::relu2_backward_from_r(dr_out, ddr, ddu_r, n));
    const double e3 = rel_err(from_device(ddu_r, n), du);
    CHECK(e1 < 4e-3 && e2 < 4e-3 && e3 < 4e-3, "relu2: forward %.2e backward %.2e backward from r %.2e", e1, e2, e3);
    std::printf("relu2: forward %.2e, backward %.2e, backward from r %.2e\n", e1, e2, e3);
    for (void* p : {(void*)du_, (void*)ddr, (void*)dr_out, (void*)ddu, (void*)ddu_r}) CUDA_CHECK(cudaFree(p));
  }
}

LAYER_TEST_MAIN("relu2", test_relu2)
