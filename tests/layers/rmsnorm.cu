// The layer test of rmsnorm (tests/layers/gpu_test.h: helpers and tolerances), against rmsnorm, rmsnorm_bwd
// (CPU references: model/reference_layers.h unless named otherwise).
#include "tests/layers/gpu_test.h"
#include "layers/rmsnorm.cuh"

// ---- RMS norm: residual rows (n = 768) and head rows (n = 128); half the rows small
static void test_rmsnorm() {
  for (int n : {768, 128}) {
    const int rows = 3001;
    std::vector<double> x = random_bf16((size_t)rows * n), dy = random_bf16((size_t)rows * n), acc0 = random_bf16((size_t)rows * n);
    for (int r = 0; r < rows; r += 2)
      for (int j = 0; j < n; j++) x[(size_t)r * n + j] = (double)__bfloat162float(__float2bfloat16((float)(x[(size_t)r * n + j] * 0.03)));
    std::vector<double> y(x.size()), rstd(rows), dx(x.size(), 0.0), dx_acc = acc0;
    model_ref::rmsnorm(x.data(), y.data(), rstd.data(), rows, n, eps);
    model_ref::rmsnorm_bwd(x.data(), rstd.data(), dy.data(), dx.data(), rows, n);
    model_ref::rmsnorm_bwd(x.data(), rstd.data(), dy.data(), dx_acc.data(), rows, n);
    bf16 *dx_ = to_device(x), *ddy = to_device(dy), *dy_out = poisoned(x.size()), *dgrad = poisoned(x.size()), *dacc = to_device(acc0);
    float* drstd;
    CUDA_CHECK(cudaMalloc(&drstd, rows * sizeof(float)));
    CUDA_CHECK(cudaMemset(drstd, 0xFF, rows * sizeof(float)));
    CUDA_CHECK(layers::rmsnorm_forward(dx_, dy_out, drstd, rows, n, (float)eps));
    CUDA_CHECK(layers::rmsnorm_backward(dx_, drstd, ddy, dgrad, rows, n, false));
    CUDA_CHECK(layers::rmsnorm_backward(dx_, drstd, ddy, dacc, rows, n, true));
    std::vector<float> hr(rows);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(hr.data(), drstd, rows * sizeof(float), cudaMemcpyDeviceToHost));
    double rerr = 0;
    for (int r = 0; r < rows; r++) rerr = std::max(rerr, std::fabs(hr[r] - rstd[r]) / rstd[r]);
    const double ey = rel_err(from_device(dy_out, x.size()), y), eg = rel_err(from_device(dgrad, x.size()), dx),
                 ea = rel_err(from_device(dacc, x.size()), dx_acc);
    CHECK(rerr < 1e-5, "rmsnorm n=%d: rstd rel err %.2e", n, rerr);
    CHECK(ey < 4e-3 && eg < 4e-3 && ea < 4e-3, "rmsnorm n=%d: y %.2e dx %.2e dx(accumulate) %.2e", n, ey, eg, ea);
    std::printf("rmsnorm n=%d: rstd %.1e, y %.2e, dx %.2e, dx accumulated %.2e\n", n, rerr, ey, eg, ea);
    // dy's rows scaled by dy_scale (the fused lm head's row scales): against the reference on
    // the scaled dy (random scales, one row 0); bound 4e-3 as dx's
    {
      std::vector<float> sc(rows);
      std::vector<double> dys(dy.size()), dx_s(x.size(), 0.0);
      for (int r = 0; r < rows; r++) sc[r] = r == 7 ? 0.f : (float)std::ldexp(1.0 + random_bf16(1)[0] * 0.1, (int)(rng() % 40) - 20);
      for (size_t i = 0; i < dy.size(); i++) dys[i] = dy[i] * sc[i / n];
      model_ref::rmsnorm_bwd(x.data(), rstd.data(), dys.data(), dx_s.data(), rows, n);
      float* dsc;
      CUDA_CHECK(cudaMalloc(&dsc, rows * sizeof(float)));
      CUDA_CHECK(cudaMemcpy(dsc, sc.data(), rows * sizeof(float), cudaMemcpyHostToDevice));
      CUDA_CHECK(layers::rmsnorm_backward(dx_, drstd, ddy, dgrad, rows, n, false, 0, dsc));
      const std::vector<double> got = from_device(dgrad, x.size());
      bool zero_row = true;
      for (int j = 0; j < n; j++) zero_row &= got[(size_t)7 * n + j] == 0.0;
      const double es = rel_err(got, dx_s);
      CHECK(es < 4e-3 && zero_row, "rmsnorm n=%d: dx with dy's rows scaled %.2e, the row scaled by 0 is 0: %d", n, es, zero_row);
      std::printf("rmsnorm n=%d: dx with dy's rows scaled %.2e\n", n, es);
      CUDA_CHECK(cudaFree(dsc));
    }
    for (void* p : {(void*)dx_, (void*)ddy, (void*)dy_out, (void*)dgrad, (void*)dacc, (void*)drstd}) CUDA_CHECK(cudaFree(p));
  }
  CHECK(layers::rmsnorm_forward(nullptr, nullptr, nullptr, 4, 100, 0.f) == cudaErrorInvalidValue, "n not a multiple of 8 accepted");
}

LAYER_TEST_MAIN("rmsnorm", test_rmsnorm)
