// The layer test of softcap_ce (tests/layers/gpu_test.h: helpers and tolerances), against fp64 softcap and log-sum-exp, written out here
// (CPU references: model/reference_layers.h unless named otherwise).
// Tolerances: loss 1e-5 (fp32 over 50304 terms), dz 4e-3 (bf16 output); exp2_fma 4e-7.
#include "tests/layers/gpu_test.h"
#include "layers/softcap_ce.cuh"

// ---- softcapped cross-entropy: the real vocabulary (16-byte path) and an odd one (scalar
// path); logits large enough to saturate, and a few extreme ones (+-8192, where tanh is +-1).
// Tolerances: the loss is fp32 arithmetic on bf16 inputs the reference sees too: 1e-5
// relative; dz is rounded to bf16 once: 4e-3 relative (rms), as every bf16 output here.
static void test_softcap_ce() {
  for (const int V : {50304, 1001}) {
    const int rows = 48;
    std::vector<double> z = random_bf16((size_t)rows * V, 20.0);
    z[7] = 8192, z[V + 9] = -8192;  // exact in bf16
    std::vector<int> tg(rows);
    for (int r = 0; r < rows; r++) tg[r] = (int)(rng() % V);
    tg[0] = 7, tg[1] = 9;  // targets on the extreme logits
    const double scale = 1.0 / 1000;
    std::vector<double> loss_ref(rows), dz_ref(z.size());
    for (int r = 0; r < rows; r++) {
      double mx = -INFINITY, sum = 0;
      for (int i = 0; i < V; i++) mx = std::max(mx, 30 * std::tanh(z[(size_t)r * V + i] / 30.0));
      for (int i = 0; i < V; i++) sum += std::exp(30 * std::tanh(z[(size_t)r * V + i] / 30.0) - mx);
      const double lse = mx + std::log(sum);
      loss_ref[r] = lse - 30 * std::tanh(z[(size_t)r * V + tg[r]] / 30.0);
      for (int i = 0; i < V; i++) {
        const double th = std::tanh(z[(size_t)r * V + i] / 30.0);
        dz_ref[(size_t)r * V + i] = scale * (std::exp(30 * th - lse) - (i == tg[r])) * (1 - th * th);
      }
    }
    float* dloss;
    int *dtg, *dbad;
    bf16 *dzin = to_device(z), *ddz = poisoned(z.size());
    CUDA_CHECK(cudaMalloc(&dloss, rows * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dtg, rows * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&dbad, sizeof(int)));
    CUDA_CHECK(cudaMemset(dbad, 0, sizeof(int)));
    CUDA_CHECK(cudaMemcpy(dtg, tg.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
    auto losses = [&]() {
      std::vector<float> hl(rows);
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaMemcpy(hl.data(), dloss, rows * sizeof(float), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemset(dloss, 0xFF, rows * sizeof(float)));  // poisoned for the next call
      return hl;
    };
    // out of place, then loss only, then in place (as the model calls it)
    CUDA_CHECK(cudaMemset(dloss, 0xFF, rows * sizeof(float)));
    CUDA_CHECK(layers::softcap_ce(dzin, dtg, ddz, dloss, rows, V, (float)scale, dbad));
    const std::vector<float> hl = losses();
    CUDA_CHECK(layers::softcap_ce(dzin, dtg, nullptr, dloss, rows, V, (float)scale, dbad));
    const std::vector<float> hl_only = losses();
    CUDA_CHECK(layers::softcap_ce(dzin, dtg, dzin, dloss, rows, V, (float)scale, dbad));
    const std::vector<float> hl_inplace = losses();
    int bad = -1;
    CUDA_CHECK(cudaMemcpy(&bad, dbad, sizeof(int), cudaMemcpyDeviceToHost));
    double le = 0;
    for (int r = 0; r < rows; r++) le = std::max(le, std::fabs(hl[r] - loss_ref[r]) / loss_ref[r]);
    const std::vector<double> dz_out = from_device(ddz, z.size()), dz_in = from_device(dzin, z.size());
    const double de = rel_err(dz_out, dz_ref);
    CHECK(le < 1e-5 && de < 4e-3 && bad == 0, "softcap CE (V=%d): loss %.2e dz %.2e bad flag %d", V, le, de, bad);
    CHECK(hl_only == hl && hl_inplace == hl && dz_in == dz_out, "softcap CE (V=%d): loss-only or in-place call differs", V);
    std::printf("softcap CE (V=%d): loss %.2e, dz %.2e; loss-only and in-place calls give the same bits\n", V, le, de);
    CUDA_CHECK(cudaFree(dzin));
    dzin = to_device(z);  // the in-place call overwrote z
    tg[5] = V + 3;  // a target out of range is reported, not read
    CUDA_CHECK(cudaMemcpy(dtg, tg.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(layers::softcap_ce(dzin, dtg, ddz, dloss, rows, V, (float)scale, dbad));
    const std::vector<float> hl_bad = losses();
    CUDA_CHECK(cudaMemcpy(&bad, dbad, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(bad == 1 && std::isnan(hl_bad[5]) && hl_bad[4] == hl[4], "softcap CE (V=%d): out-of-range target not reported", V);
    // an ignored target (-1, prefix-LM) gives loss 0 and a zero dz row, in place, and is not an error
    CUDA_CHECK(cudaFree(dzin));
    dzin = to_device(z);
    tg[5] = tg[2];
    tg[3] = tg[40] = layers::kIgnoreTarget;
    CUDA_CHECK(cudaMemcpy(dtg, tg.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dbad, 0, sizeof(int)));
    CUDA_CHECK(layers::softcap_ce(dzin, dtg, dzin, dloss, rows, V, (float)scale, dbad));
    const std::vector<float> hl_ign = losses();
    CUDA_CHECK(cudaMemcpy(&bad, dbad, sizeof(int), cudaMemcpyDeviceToHost));
    const std::vector<double> dz_ign = from_device(dzin, z.size());
    bool zero_rows = true, others_same = true;
    for (size_t i = 0; i < (size_t)V; i++) {
      zero_rows &= dz_ign[3 * (size_t)V + i] == 0.0 && dz_ign[40 * (size_t)V + i] == 0.0;
      others_same &= dz_ign[4 * (size_t)V + i] == dz_out[4 * (size_t)V + i];
    }
    CHECK(bad == 0 && hl_ign[3] == 0.f && hl_ign[40] == 0.f && hl_ign[4] == hl[4] && zero_rows && others_same,
          "softcap CE (V=%d): ignored targets: bad %d, losses %g %g, zero dz rows %d, other rows unchanged %d", V, bad, hl_ign[3],
          hl_ign[40], zero_rows, others_same);
    for (void* p : {(void*)dzin, (void*)dloss, (void*)dtg, (void*)dbad, (void*)ddz}) CUDA_CHECK(cudaFree(p));
  }
}

// ---- exp2_fma, the first pass's 2^(a b) on the FMA pipe, against exp2 in fp64 over its whole
// range: a on a fine grid of [0, 1] (and its ends) times the kernel's b = -60 log2(e).
// Tolerance: 4e-7 relative, the polynomial's 2.3e-7 plus fp32 rounding of the evaluation
// (the special-function unit's ex2 is within about 2 ulp, 2.4e-7).
__global__ void exp2_fma_kernel(const float* a, float b, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = layers::exp2_fma(a[i], b);
}
static void test_exp2_fma() {
  const int n = 1 << 20;
  std::vector<float> a(n);
  for (int i = 0; i < n; i++) a[i] = (float)i / (n - 1);
  a[1] = 1e-30f, a[2] = std::nextafter(1.f, 0.f);
  const float b = layers::SoftcapTerms::kLogit;
  float *da, *dout;
  CUDA_CHECK(cudaMalloc(&da, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dout, n * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  exp2_fma_kernel<<<n / 256, 256>>>(da, b, dout, n);
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> out(n);
  CUDA_CHECK(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int i = 0; i < n; i++) worst = std::max(worst, std::fabs(out[i] / std::exp2((double)a[i] * b) - 1));
  CHECK(worst < 4e-7, "exp2_fma: relative error %.2e", worst);
  std::printf("exp2_fma over [%g, 0]: relative error %.2e\n", (double)b, worst);
  CUDA_CHECK(cudaFree(da));
  CUDA_CHECK(cudaFree(dout));
}

LAYER_TEST_MAIN("softcap_ce", test_softcap_ce, test_exp2_fma)
