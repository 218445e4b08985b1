// The layer test of head_ce (tests/layers/gpu_test.h: helpers and tolerances): the lm head's
// product with the softcapped cross-entropy in its epilogue, then the finalize, against an fp64
// product on the CPU followed by model_ref::softcap_ce (model/reference_layers.h), on fresh
// random inputs. What the model uses is checked: the loss, dz = c[r] g[r] (the row scale times
// the kernel's g, the target's element folded in), c and hs = bf16(c h).
// Shapes: the real vocabulary (50304, not a multiple of the 256-column tile), M and N not
// multiples of the tiles, K smaller than a slice, and more tiles than SMs (each block walks
// many, so the epilogue runs under the next tile's slices).
// Inputs: "exact": h and W multiples of 1/8 in [-1, 1], so every product and partial sum is
// exact in fp32 and the kernel's z = bf16(h W) is the reference's to the bit, whatever the
// order of its sums; "normal": unit normal h, W of scale 1 (z of rms about sqrt(K), saturating
// the softcap), where a z within fp32 rounding of a bf16 rounding boundary may round the other
// way (about 1e-5 of the elements).
// Tolerances: loss, fp32 sums over N terms of exact special functions (1e-5 relative) on the
// exact inputs, 1e-4 on the normal ones (a flipped z moves its q by up to 1 ulp of z / 30
// relative); dz: one bf16 rounding (g, 2^-8 relative at most) plus about 1e-5 from the special
// functions (q = 2^(r kLogit) with |r kLogit| up to 87 and r within 1 ulp): 4e-3 on every
// element whose reference is a normal number (exact inputs), 4e-3 rms (both); c: as the loss; hs:
// one rounding, 4e-3 an element. Rows past M are never written (guard rows stay NaN).
#include "tests/layers/gpu_test.h"
#include "gemm/gemm.cuh"
#include "gemm/head_ce.cuh"

#include <omp.h>

#include <cstring>

static std::vector<double> random_eighths(size_t n) {
  std::vector<double> x(n);
  for (auto& v : x) v = (double)((int)(rng() % 17) - 8) / 8;
  return x;
}

static void test_head_ce() {
  if (!gemm::available()) {
    std::printf("head_ce: skipped, the fused head needs an sm90 device (the model then runs cuBLASLt and softcap_ce)\n");
    return;
  }
  struct Case { int m, k, n; bool exact; } cases[] = {
      {300, 768, 50304, true}, {72, 40, 136, true}, {700, 136, 1000, true}, {2048, 768, 50304, true}, {300, 768, 50304, false}};
  for (const Case& cs : cases) {
    const int M = cs.m, K = cs.k, N = cs.n, guard = 8;
    const size_t MN = (size_t)M * N;
    const std::vector<double> h = cs.exact ? random_eighths((size_t)M * K) : random_bf16((size_t)M * K);
    const std::vector<double> W = cs.exact ? random_eighths((size_t)K * N) : random_bf16((size_t)K * N);
    std::vector<int> tg(M);
    for (int r = 0; r < M; r++) tg[r] = (int)(rng() % N);
    tg[1] = N - 1;                       // the last column, in the last (partial) tile
    tg[2] = elementwise::kIgnoreTarget;  // left out of the loss
    tg[M - 1] = N + 5;                   // out of range: reported, loss NaN, no gradient
    const double scale = 1.0 / 1000;
    // the reference: z = bf16(h W) in fp64, then the row's loss and dz
    std::vector<double> z(MN, 0.0), dz_ref(MN, 0.0), loss_ref(M, 0.0), c_ref(M, 0.0);
#pragma omp parallel for
    for (int i = 0; i < M; i++) {
      double* zr = z.data() + (size_t)i * N;
      for (int kk = 0; kk < K; kk++) {
        const double a = h[(size_t)i * K + kk];
        if (a != 0)
          for (int j = 0; j < N; j++) zr[j] += a * W[(size_t)kk * N + j];
      }
      for (int j = 0; j < N; j++) zr[j] = (double)__bfloat162float(__float2bfloat16((float)zr[j]));
      if (tg[i] < 0 || tg[i] >= N) continue;
      loss_ref[i] = model_ref::softcap_ce(zr, N, tg[i], scale, dz_ref.data() + (size_t)i * N);
      const double lse = loss_ref[i] + 30 * std::tanh(zr[tg[i]] / 30.0);
      c_ref[i] = 4 * scale * std::exp(30 - lse);
    }
    bf16 *dh = to_device(h), *dW = to_device(W), *dg = poisoned(MN + (size_t)guard * N), *dhs = poisoned((size_t)M * K);
    int *dtg, *dbad;
    float *dscr, *dc, *dloss;
    CUDA_CHECK(cudaMalloc(&dtg, M * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&dbad, sizeof(int)));
    CUDA_CHECK(cudaMalloc(&dscr, gemm::head_ce_scratch_floats(M, N) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dc, M * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dloss, M * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dtg, tg.data(), M * sizeof(int), cudaMemcpyHostToDevice));
    auto run = [&](bool grad, std::vector<float>* loss, std::vector<float>* c, std::vector<double>* g, std::vector<double>* hs) {
      CUDA_CHECK(cudaMemset(dbad, 0, sizeof(int)));
      CUDA_CHECK(cudaMemset(dloss, 0xFF, M * sizeof(float)));
      CUDA_CHECK(cudaMemset(dc, 0xFF, M * sizeof(float)));
      CUDA_CHECK(gemm::head_ce_forward(dh, dW, dtg, dg, dscr, M, K, N));
      CUDA_CHECK(gemm::head_ce_finalize(dscr, dtg, dh, grad ? dg : nullptr, grad ? dhs : nullptr, grad ? dc : nullptr, dloss, M, K, N,
                                          (float)scale, dbad));
      CUDA_CHECK(cudaDeviceSynchronize());
      loss->resize(M);
      CUDA_CHECK(cudaMemcpy(loss->data(), dloss, M * sizeof(float), cudaMemcpyDeviceToHost));
      int bad = -1;
      CUDA_CHECK(cudaMemcpy(&bad, dbad, sizeof(int), cudaMemcpyDeviceToHost));
      CHECK(bad == 1, "head_ce M=%d K=%d N=%d: the out-of-range target not reported", M, K, N);
      if (!grad) return;
      c->resize(M);
      CUDA_CHECK(cudaMemcpy(c->data(), dc, M * sizeof(float), cudaMemcpyDeviceToHost));
      *g = from_device(dg, MN + (size_t)guard * N);
      *hs = from_device(dhs, (size_t)M * K);
    };
    std::vector<float> loss, c, loss2, c2, loss_only, unused_c;
    std::vector<double> g, hs, g2, hs2, unused_g, unused_hs;
    run(true, &loss, &c, &g, &hs);
    run(true, &loss2, &c2, &g2, &hs2);
    run(false, &loss_only, &unused_c, &unused_g, &unused_hs);
    // the loss, and the rows without a target
    double le = 0;
    for (int r = 0; r < M; r++)
      if (r != 2 && r != M - 1) le = std::max(le, std::fabs(loss[r] - loss_ref[r]) / loss_ref[r]);
    const bool special = loss[2] == 0.f && c[2] == 0.f && std::isnan(loss[M - 1]) && c[M - 1] == 0.f;
    // dz = c g against the reference, rms and element by element; c; hs = bf16(c h)
    std::vector<double> dz(MN);
    double ce = 0, hse = 0, dmax = 0;
    for (size_t i = 0; i < MN; i++) dz[i] = (double)c[i / N] * g[i];
    for (size_t i = 0; i < MN; i++)
      if (std::fabs(dz_ref[i]) > 1e-30) dmax = std::max(dmax, std::fabs(dz[i] - dz_ref[i]) / std::fabs(dz_ref[i]));
    for (int r = 0; r < M; r++) {
      if (c_ref[r] > 0) ce = std::max(ce, std::fabs(c[r] - c_ref[r]) / c_ref[r]);
      for (int k = 0; k < K; k++) {
        const double want = (double)__bfloat162float(__float2bfloat16((float)(c[r] * h[(size_t)r * K + k])));
        if (want != 0) hse = std::max(hse, std::fabs(hs[(size_t)r * K + k] - want) / std::fabs(want));
        else if (hs[(size_t)r * K + k] != 0) hse = INFINITY;
      }
    }
    bool guard_ok = true;
    for (size_t i = MN; i < g.size(); i++) guard_ok &= std::isnan(g[i]);
    const double drms = rel_err(dz, dz_ref);
    const double loss_tol = cs.exact ? 1e-5 : 1e-4, dmax_tol = cs.exact ? 4e-3 : INFINITY;
    CHECK(le < loss_tol && drms < 4e-3 && dmax < dmax_tol && ce < loss_tol && hse < 4e-3 && special && guard_ok,
          "head_ce M=%d K=%d N=%d %s: loss %.2e dz %.2e rms %.2e max, c %.2e, hs %.2e; ignored / bad rows %d; guard rows "
          "untouched %d",
          M, K, N, cs.exact ? "exact" : "normal", le, drms, dmax, ce, hse, special, guard_ok);
    auto bits = [](const auto& x, const auto& y) {  // the same bits (NaN where NaN: the bad row's loss, g's guard rows)
      return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
    };
    const bool same = bits(loss, loss2) && bits(c, c2) && bits(g, g2) && bits(hs, hs2) && bits(loss, loss_only);
    CHECK(same, "head_ce M=%d K=%d N=%d: a second run, or the loss-only run, gives other bits", M, K, N);
    std::printf("head_ce M=%d K=%d N=%d (%s inputs): loss %.2e, dz %.2e rms, %.2e max, c %.2e, hs %.2e; repeat and loss-only runs "
                "the same bits: %d\n",
                M, K, N, cs.exact ? "exact" : "normal", le, drms, dmax, ce, hse, same);
    for (void* p : {(void*)dh, (void*)dW, (void*)dg, (void*)dhs, (void*)dtg, (void*)dbad, (void*)dscr, (void*)dc, (void*)dloss})
      CUDA_CHECK(cudaFree(p));
  }
  // shapes the kernel refuses: an error, no launch
  bf16* d = poisoned(64 * 64);
  CHECK(gemm::head_ce_forward(d, d, nullptr, d, nullptr, 8, 12, 64) == cudaErrorInvalidValue, "K = 12 accepted");
  CHECK(gemm::head_ce_forward(d, d, nullptr, d, nullptr, 8, 64, 20) == cudaErrorInvalidValue, "N = 20 accepted");
  CHECK(gemm::head_ce_forward(d + 1, d, nullptr, d, nullptr, 8, 64, 64) == cudaErrorInvalidValue, "a misaligned operand accepted");
  CUDA_CHECK(cudaFree(d));
}

LAYER_TEST_MAIN("head_ce", test_head_ce)
