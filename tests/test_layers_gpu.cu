// The CUDA layers (layers/) against their fp64 CPU references (model/reference_layers.h) on
// fresh random inputs, outputs poisoned (NaN) before each run.
// Tolerance: these layers round only their output to bf16 (sums in fp32), so the relative
// Frobenius error is one bf16 rounding, about 2^-9 / sqrt(3) = 1.1e-3 on average: the bound is
// 4e-3. rstd is fp32: 1e-5. Rows with small values (mean x^2 << eps) make eps matter.
#include <cmath>
#include <random>
#include <vector>

#include "layers/relu2.cuh"
#include "layers/rmsnorm.cuh"
#include "layers/rotary.cuh"
#include "model/reference_layers.h"
#include "tests/check.h"
#include "tests/cuda_check.h"

using layers::bf16;
static std::mt19937_64 rng(99);

static std::vector<double> random_bf16(size_t n, double scale = 1.0) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<double> x(n);
  for (auto& v : x) v = (double)__bfloat162float(__float2bfloat16((float)(nd(rng) * scale)));
  return x;
}
static bf16* to_device(const std::vector<double>& x) {
  std::vector<bf16> h(x.size());
  for (size_t i = 0; i < x.size(); i++) h[i] = __float2bfloat16((float)x[i]);
  bf16* d;
  CUDA_OK(cudaMalloc(&d, h.size() * sizeof(bf16)));
  CUDA_OK(cudaMemcpy(d, h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  return d;
}
static bf16* poisoned(size_t n) {
  bf16* d;
  CUDA_OK(cudaMalloc(&d, n * sizeof(bf16)));
  CUDA_OK(cudaMemset(d, 0xFF, n * sizeof(bf16)));
  return d;
}
static std::vector<double> from_device(const bf16* d, size_t n) {
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<bf16> h(n);
  CUDA_OK(cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  std::vector<double> x(n);
  for (size_t i = 0; i < n; i++) x[i] = __bfloat162float(h[i]);
  return x;
}
static double rel_err(const std::vector<double>& x, const std::vector<double>& r) {
  double num = 0, den = 0;
  for (size_t i = 0; i < r.size(); i++) {
    if (!std::isfinite(x[i])) return INFINITY;
    num += (x[i] - r[i]) * (x[i] - r[i]);
    den += r[i] * r[i];
  }
  return std::sqrt(num / den);
}

int main() {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("test_layers_gpu: no GPU\n");
    return 1;
  }
  const double eps = 1.0 / 128;
  // ---- RMS norm: residual rows (n = 768) and head rows (n = 128); half the rows small
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
    CUDA_OK(cudaMalloc(&drstd, rows * sizeof(float)));
    CUDA_OK(cudaMemset(drstd, 0xFF, rows * sizeof(float)));
    CUDA_OK(layers::rmsnorm_forward(dx_, dy_out, drstd, rows, n, (float)eps));
    CUDA_OK(layers::rmsnorm_backward(dx_, drstd, ddy, dgrad, rows, n, false));
    CUDA_OK(layers::rmsnorm_backward(dx_, drstd, ddy, dacc, rows, n, true));
    std::vector<float> hr(rows);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(hr.data(), drstd, rows * sizeof(float), cudaMemcpyDeviceToHost));
    double rerr = 0;
    for (int r = 0; r < rows; r++) rerr = std::max(rerr, std::fabs(hr[r] - rstd[r]) / rstd[r]);
    const double ey = rel_err(from_device(dy_out, x.size()), y), eg = rel_err(from_device(dgrad, x.size()), dx),
                 ea = rel_err(from_device(dacc, x.size()), dx_acc);
    CHECK(rerr < 1e-5, "rmsnorm n=%d: rstd rel err %.2e", n, rerr);
    CHECK(ey < 4e-3 && eg < 4e-3 && ea < 4e-3, "rmsnorm n=%d: y %.2e dx %.2e dx(accumulate) %.2e", n, ey, eg, ea);
    std::printf("rmsnorm n=%d: rstd %.1e, y %.2e, dx %.2e, dx accumulated %.2e\n", n, rerr, ey, eg, ea);
    for (void* p : {(void*)dx_, (void*)ddy, (void*)dy_out, (void*)dgrad, (void*)dacc, (void*)drstd}) CUDA_OK(cudaFree(p));
  }
  CHECK(layers::rmsnorm_forward(nullptr, nullptr, nullptr, 4, 100, 0.f) == cudaErrorInvalidValue, "n not a multiple of 8 accepted");

  // ---- rotary at the speedrun's length (angles up to 65535 rad), forward and transpose
  {
    const int T = 65536, H = 2, D = 128;
    std::vector<double> x = random_bf16((size_t)T * H * D), y(x.size()), back(x.size());
    model_ref::rotary(x.data(), y.data(), T, H, D, 1.0);
    auto table = layers::rotary_table(T, D);
    float2* dt;
    CUDA_OK(cudaMalloc(&dt, table.size() * sizeof(float2)));
    CUDA_OK(cudaMemcpy(dt, table.data(), table.size() * sizeof(float2), cudaMemcpyHostToDevice));
    bf16* dxr = to_device(x);
    CUDA_OK(layers::rotary(dxr, dt, T, H, D, 1.f));
    std::vector<double> got = from_device(dxr, x.size());
    const double e = rel_err(got, y);
    CUDA_OK(layers::rotary(dxr, dt, T, H, D, -1.f));
    const double eb = rel_err(from_device(dxr, x.size()), x);
    CHECK(e < 4e-3, "rotary forward rel err %.2e", e);
    CHECK(eb < 8e-3, "rotary forward then transpose: %.2e from the input (two roundings)", eb);
    std::printf("rotary T=%d: forward %.2e, round trip %.2e\n", T, e, eb);
    CUDA_OK(cudaFree(dt));
    CUDA_OK(cudaFree(dxr));
  }

  // ---- relu^2
  {
    const size_t n = 1 << 20;
    std::vector<double> u = random_bf16(n), dr = random_bf16(n), r(n), du(n);
    model_ref::relu2(u.data(), r.data(), n);
    model_ref::relu2_bwd(u.data(), dr.data(), du.data(), n);
    bf16 *du_ = to_device(u), *ddr = to_device(dr), *dr_out = poisoned(n), *ddu = poisoned(n);
    CUDA_OK(layers::relu2_forward(du_, dr_out, n));
    CUDA_OK(layers::relu2_backward(du_, ddr, ddu, n));
    const double e1 = rel_err(from_device(dr_out, n), r), e2 = rel_err(from_device(ddu, n), du);
    CHECK(e1 < 4e-3 && e2 < 4e-3, "relu2: forward %.2e backward %.2e", e1, e2);
    std::printf("relu2: forward %.2e, backward %.2e\n", e1, e2);
    for (void* p : {(void*)du_, (void*)ddr, (void*)dr_out, (void*)ddu}) CUDA_OK(cudaFree(p));
  }
  return test_summary("layers-gpu");
}
