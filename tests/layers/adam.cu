// The layer test of adam (tests/layers/gpu_test.h: helpers and tolerances), against model/optimizer_reference.cpp's Adam group
// (CPU references: model/reference_layers.h unless named otherwise).
// Tolerances: Adam works in fp32: 1e-5.
#include "tests/layers/gpu_test.h"
#include "optim/adam.cuh"
#include "model/optimizer_reference.h"

// ---- Adam against the reference optimiser's Adam group (embed, lr 0.6), three steps
static void test_adam() {
  {
    model_ref::Config cfg;
    cfg.vocab = 64;
    cfg.width = 32;
    cfg.heads = 2;
    cfg.layers = 2;
    cfg.hidden = 64;
    model_ref::Params p(cfg);
    p.init(4, false);
    const model_ref::Tensor& emb = p.t("embed");
    const size_t n = emb.size();
    std::vector<float> hp(p.data.begin() + emb.offset, p.data.begin() + emb.offset + n);
    float *dp, *dg, *dm, *dv;
    for (float** q : {&dp, &dg, &dm, &dv}) CUDA_CHECK(cudaMalloc(q, n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dp, hp.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dm, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(dv, 0, n * sizeof(float)));
    model_ref::OptimizerState st;
    model_ref::Schedule sched;
    for (int step = 0; step < 3; step++) {
      std::vector<double> g(p.data.size());
      std::normal_distribution<double> nd(0, 1);
      for (auto& v : g) v = nd(rng);
      std::vector<float> hg(g.begin() + emb.offset, g.begin() + emb.offset + n);
      model_ref::optimizer_step(p, g, st, step, sched);
      CUDA_CHECK(cudaMemcpy(dg, hg.data(), n * sizeof(float), cudaMemcpyHostToDevice));
      CUDA_CHECK(optim::adam_step(dp, nullptr, dg, dm, dv, n, 0.6f, step + 1));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(hp.data(), dp, n * sizeof(float), cudaMemcpyDeviceToHost));
    double e = 0;
    for (size_t i = 0; i < n; i++) e = std::max(e, std::fabs(hp[i] - p.data[emb.offset + i]));
    CHECK(e < 1e-5, "Adam after three steps: max abs err %.2e", e);
    std::printf("adam: three steps, max abs err %.2e against the fp64 reference\n", e);
    for (void* q : {(void*)dp, (void*)dg, (void*)dm, (void*)dv}) CUDA_CHECK(cudaFree(q));
  }
}

LAYER_TEST_MAIN("adam", test_adam)
