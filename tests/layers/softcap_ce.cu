// The layer test of softcap_ce (tests/layers/gpu_test.h: helpers and tolerances), against fp64 softcap and log-sum-exp, written out here
// (CPU references: model/reference_layers.h unless named otherwise).
// Tolerances: loss 1e-5 (fp32 over 50304 terms), dz 4e-3 rms and 8e-3 an element (two bf16 roundings).
#include "tests/layers/gpu_test.h"
#include "layers/softcap_ce.cuh"

// ---- softcapped cross-entropy: the real vocabulary (16-byte path) and an odd one (scalar
// path); logits large enough to saturate, and a few extreme ones (+-8192, where tanh is +-1).
// Tolerances: the loss is fp32 arithmetic on bf16 inputs the reference sees too: 1e-5
// relative; dz: 4e-3 relative (rms, which the targets' elements dominate), as every bf16 output
// here, and 8e-3 relative on every element whose reference is a normal number (above 1e-30):
// the kernel rounds g = q (1 - tanh^2) / 4 to bf16 and then g 4 scale / S again, each rounding
// within bf16's unit roundoff 2^-8, so (1 + 2^-8)^2 - 1 = 7.83e-3, plus about 1e-5 from the
// special functions (q = 2^(r kLogit) with |r kLogit| up to 87 and r within 1 ulp).
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
    double de_max = 0;
    for (size_t i = 0; i < dz_ref.size(); i++)
      if (std::fabs(dz_ref[i]) > 1e-30) de_max = std::max(de_max, std::fabs(dz_out[i] - dz_ref[i]) / std::fabs(dz_ref[i]));
    CHECK(le < 1e-5 && de < 4e-3 && de_max < 8e-3 && bad == 0,
          "softcap CE (V=%d): loss %.2e dz %.2e (rms) %.2e (max) bad flag %d", V, le, de, de_max, bad);
    CHECK(hl_only == hl && hl_inplace == hl && dz_in == dz_out, "softcap CE (V=%d): loss-only or in-place call differs", V);
    // g kept in dz between the passes instead of in shared memory (the path of rows too long for
    // it): the same bits, in place and loss only
    CUDA_CHECK(cudaFree(dzin));
    dzin = to_device(z);
    CUDA_CHECK(layers::softcap_ce(dzin, dtg, nullptr, dloss, rows, V, (float)scale, dbad, 0, /*allow_smem=*/false));
    const std::vector<float> hl_global_only = losses();
    CUDA_CHECK(layers::softcap_ce(dzin, dtg, dzin, dloss, rows, V, (float)scale, dbad, 0, /*allow_smem=*/false));
    const std::vector<float> hl_global = losses();
    CHECK(hl_global == hl && hl_global_only == hl && from_device(dzin, z.size()) == dz_out,
          "softcap CE (V=%d): g through dz differs from g through shared memory", V);
    std::printf("softcap CE (V=%d, row in shared memory: %d): loss %.2e, dz %.2e rms, %.2e max; loss-only, in-place and "
                "g-through-dz calls give the same bits\n",
                V, V % 8 == 0 && layers::softcap_ce_row_fits_smem(V), le, de, de_max);
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

LAYER_TEST_MAIN("softcap_ce", test_softcap_ce)
