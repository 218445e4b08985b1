// The layer test of muon (tests/layers/gpu_test.h: helpers and tolerances), against model/optimizer_reference.cpp's Newton-Schulz, and a bf16 emulation
// (CPU references: model/reference_layers.h unless named otherwise).
// Tolerances: Muon's Newton-Schulz runs in bf16: its update must be within twice the error of a
// CPU emulation of the same bf16 iteration (each matmul accumulated exactly then rounded to
// bf16, each stored tensor rounded), plus 1e-3; its staged path (the data-parallel one) must
// give muon_step's bits; Newton-Schulz batched over matrices of one shape gets the first
// tolerance (its batched products may sum in another order).
#include "tests/layers/gpu_test.h"
#include "optim/muon.cuh"
#include "model/optimizer_reference.h"

static double bf(double x) { return (double)ref::round_bf16((float)x); }
// Newton-Schulz as the GPU runs it, on the CPU: every stored tensor rounded to bf16.
static std::vector<double> ns5_bf16_emulated(std::vector<double> x, int rows, int cols) {
  double fro = 0;
  for (double v : x) fro += v * v;
  fro = std::sqrt(fro);
  const bool tall = rows > cols;
  const int r = tall ? cols : rows, c = tall ? rows : cols;
  std::vector<double> X((size_t)r * c);
  for (int i = 0; i < r; i++)
    for (int j = 0; j < c; j++) X[(size_t)i * c + j] = bf((tall ? x[(size_t)j * cols + i] : x[(size_t)i * c + j]) / (fro + 1e-7));
  for (int it = 0; it < 5; it++) {
    std::vector<double> A((size_t)r * r, 0.0), AA((size_t)r * r, 0.0), BX((size_t)r * c, 0.0);
    for (int i = 0; i < r; i++)
      for (int k = 0; k < r; k++) {
        double sum = 0;
        for (int j = 0; j < c; j++) sum += X[(size_t)i * c + j] * X[(size_t)k * c + j];
        A[(size_t)i * r + k] = bf(sum);
      }
    for (int i = 0; i < r; i++)
      for (int k = 0; k < r; k++) {
        double sum = 0;
        for (int j = 0; j < r; j++) sum += A[(size_t)i * r + j] * A[(size_t)j * r + k];
        AA[(size_t)i * r + k] = bf(sum);
      }
    for (size_t i = 0; i < AA.size(); i++) AA[i] = bf(-4.7750 * A[i] + 2.0315 * AA[i]);
    for (int i = 0; i < r; i++)
      for (int k = 0; k < r; k++) {
        const double b = AA[(size_t)i * r + k];
        for (int j = 0; j < c; j++) BX[(size_t)i * c + j] += b * X[(size_t)k * c + j];
      }
    for (size_t i = 0; i < X.size(); i++) X[i] = bf(3.4445 * X[i] + bf(BX[i]));
  }
  std::vector<double> out((size_t)rows * cols);
  for (int i = 0; i < r; i++)
    for (int j = 0; j < c; j++) (tall ? out[(size_t)j * cols + i] : out[(size_t)i * c + j]) = X[(size_t)i * c + j];
  return out;
}

// ---- Muon: one step on fresh momentum, against fp64 and the bf16 emulation
static void test_muon() {
  {
    layers::Matmul mm;
    optim::MuonScratch scratch(512 * 512, 512 * 512);
    for (auto [rows, cols] : {std::pair<int, int>{128, 512}, {512, 128}, {256, 256}}) {
      const size_t n = (size_t)rows * cols;
      std::normal_distribution<float> nd(0.f, 1.f);
      std::vector<float> g(n), w(n);
      for (auto& v : g) v = nd(rng);
      for (auto& v : w) v = nd(rng) * 0.05f;
      const float mom = 0.85f, lr = 0.05f;
      std::vector<double> u(n);
      for (size_t i = 0; i < n; i++) u[i] = (1 - (double)mom) * g[i] + mom * (1 - (double)mom) * g[i];
      std::vector<double> ns64 = u;
      model_ref::newton_schulz5(ns64, rows, cols);
      std::vector<double> ns16 = ns5_bf16_emulated(u, rows, cols);
      const double scale = lr * std::sqrt(std::max(1.0, (double)cols / rows));  // fan_out / fan_in: W is [in][out]
      std::vector<double> upd_ref(n);
      for (size_t i = 0; i < n; i++) upd_ref[i] = scale * ns64[i];
      const double e16 = rel_err(ns16, ns64);
      std::vector<float> out[2];
      for (int rep = 0; rep < 2; rep++) {
        float *dw, *dg, *dbuf;
        for (float** q : {&dw, &dg, &dbuf}) CUDA_CHECK(cudaMalloc(q, n * sizeof(float)));
        CUDA_CHECK(cudaMemcpy(dw, w.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(dg, g.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemset(dbuf, 0, n * sizeof(float)));
        if (rep == 0) {
          CUDA_CHECK(optim::muon_step(mm, scratch, dw, nullptr, dg, dbuf, rows, cols, lr, mom));
        } else {  // the three stages the data-parallel optimiser calls, X in a buffer of its own
          bf16* X;
          CUDA_CHECK(cudaMalloc(&X, n * sizeof(bf16)));
          CUDA_CHECK(optim::muon_momentum(scratch, dg, dbuf, n, mom, true));
          CUDA_CHECK(optim::muon_orthogonalize(mm, scratch, X, rows, cols));
          CUDA_CHECK(optim::muon_apply(dw, nullptr, X, rows, cols, lr));
          CUDA_CHECK(cudaDeviceSynchronize());
          CUDA_CHECK(cudaFree(X));
        }
        out[rep].resize(n);
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(out[rep].data(), dw, n * sizeof(float), cudaMemcpyDeviceToHost));
        std::vector<float> hb(n);
        CUDA_CHECK(cudaMemcpy(hb.data(), dbuf, n * sizeof(float), cudaMemcpyDeviceToHost));
        double be = 0;
        for (size_t i = 0; i < n; i++) be = std::max(be, std::fabs(hb[i] - (1 - (double)mom) * g[i]));
        CHECK(be < 1e-6, "muon momentum buffer err %.2e (path %d)", be, rep);
        for (void* q : {(void*)dw, (void*)dg, (void*)dbuf}) CUDA_CHECK(cudaFree(q));
      }
      std::vector<double> upd(n);
      for (size_t i = 0; i < n; i++) upd[i] = (double)w[i] - out[0][i];
      const double e = rel_err(upd, upd_ref);
      CHECK(e <= 2 * e16 + 1e-3, "muon %dx%d: update rel err %.2e > 2 x bf16 emulation %.2e + 1e-3", rows, cols, e, e16);
      CHECK(out[0] == out[1], "muon %dx%d: the staged path (momentum, orthogonalize, apply) differs from muon_step", rows, cols);
      std::printf("muon %dx%d: update rel err %.2e (bf16 emulation of Newton-Schulz: %.2e)\n", rows, cols, e, e16);
    }
  }
  // ---- Newton-Schulz batched over matrices of one shape (the optimiser's path): 128 x 512,
  // 512 x 128 (transposed into the same 128 x 512) and 128 x 512 again, their X one stride apart
  // (r c, contiguous, and r c + 64, as padded slots are), each matrix's update against fp64
  // with muon_step's tolerance
  {
    layers::Matmul mm;
    optim::MuonScratch scratch(512 * 512, 512 * 512);
    const int r = 128, c = 512, count = 3;
    const std::pair<int, int> shapes[count] = {{128, 512}, {512, 128}, {128, 512}};
    for (long long stride : {(long long)r * c, (long long)r * c + 64}) {
      bf16 *X, *A, *AA, *BX;
      CUDA_CHECK(cudaMalloc(&X, count * stride * sizeof(bf16)));
      CUDA_CHECK(cudaMalloc(&A, count * r * r * sizeof(bf16)));
      CUDA_CHECK(cudaMalloc(&AA, count * r * r * sizeof(bf16)));
      CUDA_CHECK(cudaMalloc(&BX, count * (size_t)r * c * sizeof(bf16)));
      std::vector<std::vector<float>> g(count), w(count);
      float *dw[count], *dg[count], *dbuf[count];
      const float mom = 0.85f, lr = 0.05f;
      std::normal_distribution<float> nd(0.f, 1.f);
      for (int i = 0; i < count; i++) {
        const size_t n = (size_t)r * c;
        g[i].resize(n), w[i].resize(n);
        for (auto& x : g[i]) x = nd(rng);
        for (auto& x : w[i]) x = nd(rng) * 0.05f;
        for (float** q : {&dw[i], &dg[i], &dbuf[i]}) CUDA_CHECK(cudaMalloc(q, n * sizeof(float)));
        CUDA_CHECK(cudaMemcpy(dw[i], w[i].data(), n * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(dg[i], g[i].data(), n * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemset(dbuf[i], 0, n * sizeof(float)));
        CUDA_CHECK(optim::muon_momentum(scratch, dg[i], dbuf[i], n, mom, true));
        CUDA_CHECK(optim::muon_normalize(scratch, X + i * stride, shapes[i].first, shapes[i].second));
      }
      optim::newton_schulz5_batched(mm, X, count, stride, r, c, A, AA, BX);
      CUDA_CHECK(cudaGetLastError());
      for (int i = 0; i < count; i++) {
        const int rows = shapes[i].first, cols = shapes[i].second;
        const size_t n = (size_t)rows * cols;
        CUDA_CHECK(optim::muon_apply(dw[i], nullptr, X + i * stride, rows, cols, lr));
        std::vector<float> out(n);
        CUDA_CHECK(cudaMemcpy(out.data(), dw[i], n * sizeof(float), cudaMemcpyDeviceToHost));
        std::vector<double> u(n), upd(n), upd_ref(n);
        for (size_t k = 0; k < n; k++) u[k] = (1 - (double)mom) * g[i][k] + mom * (1 - (double)mom) * g[i][k];
        std::vector<double> ns64 = u;
        model_ref::newton_schulz5(ns64, rows, cols);
        const double e16 = rel_err(ns5_bf16_emulated(u, rows, cols), ns64);
        const double scale = lr * std::sqrt(std::max(1.0, (double)cols / rows));
        for (size_t k = 0; k < n; k++) upd[k] = (double)w[i][k] - out[k], upd_ref[k] = scale * ns64[k];
        const double e = rel_err(upd, upd_ref);
        CHECK(e <= 2 * e16 + 1e-3, "muon batched (stride %lld) matrix %d, %dx%d: update rel err %.2e > 2 x bf16 emulation %.2e + 1e-3",
              stride, i, rows, cols, e, e16);
        std::printf("muon batched (stride %lld) matrix %d, %dx%d: update rel err %.2e (bf16 emulation %.2e)\n", stride, i, rows, cols, e,
                    e16);
        for (void* q : {(void*)dw[i], (void*)dg[i], (void*)dbuf[i]}) CUDA_CHECK(cudaFree(q));
      }
      for (void* q : {(void*)X, (void*)A, (void*)AA, (void*)BX}) CUDA_CHECK(cudaFree(q));
    }
  }
}

LAYER_TEST_MAIN("muon", test_muon)
