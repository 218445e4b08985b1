// The layer test of mlp_gemm (tests/layers/gpu_test.h: helpers and tolerances): the MLP's products
// with ReLU^2 in their epilogue against an fp64 product on the CPU followed by relu2 / relu2_bwd
// (model/reference_layers.h), and the q, k, v product with q and k's norm + rotary in its
// epilogue against an fp64 product followed by rmsnorm and rotary, on fresh random bf16 inputs.
// Shapes: edges in every dimension (M, N and K not multiples of the 128 x 256 x 64 tiles, and
// smaller than one), and more tiles than SMs (each block walks several, through one ring of
// stages).
// Tolerances: forward, u is rounded to bf16 (2^-9 relative) before squaring, which doubles it in
// r, then r is rounded: about 2.5e-3 relative Frobenius error, bound 6e-3. Backward: dr then du
// rounded, about 1.6e-3, bound 4e-3. Rows past M are never written (checked on guard rows).
#include "tests/layers/gpu_test.h"
#include "gemm/gemm.cuh"
#include "layers/rotary.cuh"

#include <omp.h>

// The first n values of out (n + guard values' worth, poisoned before the call), and whether the
// guard values after them are still poisoned (NaN)
static std::vector<double> guarded(const bf16* out, size_t n, size_t guard_values, bool* guard_ok) {
  std::vector<double> got = from_device(out, n + guard_values);
  *guard_ok = true;
  for (size_t i = n; i < got.size(); i++) *guard_ok &= std::isnan(got[i]);
  got.resize(n);
  return got;
}
// The first MN values of out against want, and whether the guard rows after them are untouched
static double out_err(const bf16* out, const std::vector<double>& want, size_t guard_values, bool* guard_ok) {
  return rel_err(guarded(out, want.size(), guard_values, guard_ok), want);
}

static void test_mlp_gemm() {
  if (!gemm::available()) {
    std::printf("mlp_gemm: skipped, the fused products need an sm90 device (the model then runs cuBLASLt and relu2)\n");
    return;
  }
  struct Shape { int m, k, n; } shapes[] = {{72, 40, 136}, {300, 136, 264}, {2048, 768, 3072}, {8192, 256, 1024}};
  for (const Shape& s : shapes) {
    const int M = s.m, K = s.k, N = s.n, guard = 8;
    const size_t MN = (size_t)M * N;
    // forward: r = max(h W, 0)^2, W [K][N]
    {
      const std::vector<double> h = random_bf16((size_t)M * K), W = random_bf16((size_t)K * N);
      std::vector<double> u(MN, 0.0), want(MN);
#pragma omp parallel for
      for (int i = 0; i < M; i++)
        for (int kk = 0; kk < K; kk++) {
          const double a = h[(size_t)i * K + kk];
          for (int j = 0; j < N; j++) u[(size_t)i * N + j] += a * W[(size_t)kk * N + j];
        }
      model_ref::relu2(u.data(), want.data(), MN);
      bf16 *dh = to_device(h), *dW = to_device(W), *dr = poisoned(MN + (size_t)guard * N);
      CUDA_CHECK(gemm::mlp_up_relu2(dh, dW, dr, M, K, N));
      bool guard_ok;
      const double e = out_err(dr, want, (size_t)guard * N, &guard_ok);
      CHECK(e < 6e-3 && guard_ok, "mlp_gemm forward M=%d K=%d N=%d: rel err %.2e, guard rows untouched %d", M, K, N, e, guard_ok);
      std::printf("mlp_gemm forward (r = relu(h Wfc)^2) M=%d K=%d N=%d: %.2e\n", M, K, N, e);
      for (void* p : {(void*)dh, (void*)dW, (void*)dr}) CUDA_CHECK(cudaFree(p));
    }
    // backward: du = 2 sqrt(r) (dx Wp^T), Wp [N][K], r >= 0 (a square of bf16 values, rounded)
    {
      const std::vector<double> dx = random_bf16((size_t)M * K), Wp = random_bf16((size_t)N * K);
      std::vector<double> r = random_bf16(MN), dr(MN), want(MN);
      for (double& v : r) v = (double)__bfloat162float(__float2bfloat16((float)(v * v)));
#pragma omp parallel for
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double acc = 0;
          for (int kk = 0; kk < K; kk++) acc += dx[(size_t)i * K + kk] * Wp[(size_t)j * K + kk];
          dr[(size_t)i * N + j] = acc;
        }
      for (size_t i = 0; i < MN; i++) want[i] = 2 * std::sqrt(r[i]) * dr[i];
      bf16 *ddx = to_device(dx), *dWp = to_device(Wp), *drr = to_device(r), *ddu = poisoned(MN + (size_t)guard * N);
      CUDA_CHECK(gemm::mlp_down_dx_relu2(ddx, dWp, drr, ddu, M, K, N));
      bool guard_ok;
      const double e = out_err(ddu, want, (size_t)guard * N, &guard_ok);
      CHECK(e < 4e-3 && guard_ok, "mlp_gemm backward M=%d K=%d N=%d: rel err %.2e, guard rows untouched %d", M, K, N, e, guard_ok);
      std::printf("mlp_gemm backward (du = 2 sqrt(r) dx Wproj^T) M=%d K=%d N=%d: %.2e\n", M, K, N, e);
      for (void* p : {(void*)ddx, (void*)dWp, (void*)drr, (void*)ddu}) CUDA_CHECK(cudaFree(p));
    }
  }
  // shapes the kernel refuses (K or N not a multiple of 8, a misaligned pointer): an error, no launch
  bf16* d = poisoned(64 * 64);
  CHECK(gemm::mlp_up_relu2(d, d, d, 8, 12, 64) == cudaErrorInvalidValue, "K = 12 accepted");
  CHECK(gemm::mlp_down_dx_relu2(d, d, d, d, 8, 64, 20) == cudaErrorInvalidValue, "N = 20 accepted");
  CHECK(gemm::mlp_up_relu2(d + 1, d, d, 8, 64, 64) == cudaErrorInvalidValue, "a misaligned operand accepted");
  CUDA_CHECK(cudaFree(d));
}

// q, k, v = h Wq, h Wk, h Wv with q and k normed per head and rotated (qkv_norm_rotary) against
// the fp64 product, its q and k rounded to bf16 (as the kernel rounds them before the norm), then
// rmsnorm and rotary in fp64 with fp64 angles. The inputs are multiples of 1/8 and 1/64 in
// [-1, 1] and [-1/8, 1/8], so every product is exact in fp32 and q and k round to the same bf16
// values on both sides (with random inputs an fp32 sum near a rounding boundary rounds the other
// way now and then, which moves that row's rstd by up to 2^-8 x^2 / sum x^2, 1.5e-3 at D = 64).
// Shapes: rows past a tile's and a warpgroup's edge (300), three widths, both head dims, more
// tiles than SMs; the angles of positions up to 8191.
// Tolerances: qn, kn, v rounded once to bf16 from fp32 math (1.1e-3 relative rms), the angles in
// fp16 (2^-12 absolute, a sixth of that): bound 4e-3; rstd fp32 over D terms, 1e-5. Rows and
// rstd entries past M are never written (guards).
static void test_qkv_norm_rotary() {
  if (!gemm::available()) {
    std::printf("qkv_norm_rotary: skipped, it needs an sm90 device (the model then runs cuBLASLt and qk_norm_rotary)\n");
    return;
  }
  struct Shape { int m, c, d; } shapes[] = {{300, 256, 128}, {2100, 512, 64}, {8192, 768, 128}, {1000, 768, 64}};
  for (const Shape& s : shapes) {
    const int M = s.m, C = s.c, D = s.d, H = C / D, guard = 8;
    const double eps = 1.0 / 128;
    const size_t MC = (size_t)M * C, rows = (size_t)M * H;
    std::vector<double> h(MC), W(3 * (size_t)C * C);
    for (double& v : h) v = (int)(rng() % 17) / 8.0 - 1.0;
    for (double& v : W) v = ((int)(rng() % 17) - 8) / 64.0;
    std::vector<double> out(3 * MC, 0.0), want(3 * MC), rstd_want(2 * rows);
#pragma omp parallel for
    for (int i = 0; i < M; i++)
      for (int z = 0; z < 3; z++)
        for (int kk = 0; kk < C; kk++) {
          const double a = h[(size_t)i * C + kk];
          const double* w = W.data() + ((size_t)z * C + kk) * C;
          double* o = out.data() + (size_t)z * MC + (size_t)i * C;
          for (int j = 0; j < C; j++) o[j] += a * w[j];
        }
    for (int z = 0; z < 2; z++) {  // q, k: bf16, then the norm and the rotation
      std::vector<double> x(MC), n(MC);
      for (size_t i = 0; i < MC; i++) x[i] = (double)__bfloat162float(__float2bfloat16((float)out[(size_t)z * MC + i]));
      model_ref::rmsnorm(x.data(), n.data(), rstd_want.data() + z * rows, M * H, D, eps);
      model_ref::rotary(n.data(), want.data() + (size_t)z * MC, M, H, D, 1.0);
    }
    std::copy(out.begin() + 2 * MC, out.end(), want.begin() + 2 * MC);
    const std::vector<uint32_t> ang = gemm::rotary_angles_fp16(M, D);
    uint32_t* dang;
    float* drstd;
    CUDA_CHECK(cudaMalloc(&dang, ang.size() * sizeof(uint32_t)));
    CUDA_CHECK(cudaMemcpy(dang, ang.data(), ang.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMalloc(&drstd, (2 * rows + guard) * sizeof(float)));
    CUDA_CHECK(cudaMemset(drstd, 0xFF, (2 * rows + guard) * sizeof(float)));
    bf16 *dh = to_device(h), *dW = to_device(W), *dout = poisoned(3 * MC + (size_t)guard * C);
    CUDA_CHECK(gemm::qkv_norm_rotary(dh, dW, dout, drstd, dang, M, C, D, (float)eps));
    bool guard_ok;
    const std::vector<double> all = guarded(dout, 3 * MC, (size_t)guard * C, &guard_ok);
    std::vector<float> rg(2 * rows + guard);
    CUDA_CHECK(cudaMemcpy(rg.data(), drstd, rg.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double rerr = 0;
    for (size_t i = 0; i < 2 * rows; i++) rerr = std::max(rerr, std::fabs(rg[i] - rstd_want[i]) / rstd_want[i]);
    for (size_t i = 2 * rows; i < rg.size(); i++) guard_ok &= std::isnan(rg[i]);
    double e[3];
    for (int z = 0; z < 3; z++)
      e[z] = rel_err(std::vector<double>(all.begin() + z * MC, all.begin() + (z + 1) * MC),
                     std::vector<double>(want.begin() + z * MC, want.begin() + (z + 1) * MC));
    CHECK(e[0] < 4e-3 && e[1] < 4e-3 && e[2] < 4e-3 && rerr < 1e-5 && guard_ok,
          "qkv_norm_rotary M=%d C=%d D=%d: qn %.2e kn %.2e v %.2e rstd %.2e, guards untouched %d", M, C, D, e[0], e[1], e[2], rerr,
          guard_ok);
    std::printf("qkv_norm_rotary M=%d C=%d D=%d: qn %.2e kn %.2e v %.2e rstd %.1e\n", M, C, D, e[0], e[1], e[2], rerr);
    for (void* p : {(void*)dh, (void*)dW, (void*)dout, (void*)dang, (void*)drstd}) CUDA_CHECK(cudaFree(p));
  }
  // widths and head dims it refuses (a tile would straddle q and k, or hold part of a head): an error, no launch
  bf16* d = poisoned(64 * 1024);
  uint32_t* a;
  float* r;
  CUDA_CHECK(cudaMalloc(&a, 64 * 64 * sizeof(uint32_t)));
  CUDA_CHECK(cudaMalloc(&r, 64 * 64 * sizeof(float)));
  CHECK(gemm::qkv_norm_rotary(d, d, d, r, a, 8, 384, 128, 1e-2f) == cudaErrorInvalidValue, "qkv_norm_rotary: C = 384 accepted");
  CHECK(gemm::qkv_norm_rotary(d, d, d, r, a, 8, 256, 96, 1e-2f) == cudaErrorInvalidValue, "qkv_norm_rotary: D = 96 accepted");
  for (void* p : {(void*)d, (void*)a, (void*)r}) CUDA_CHECK(cudaFree(p));
}

LAYER_TEST_MAIN("mlp_gemm", test_mlp_gemm, test_qkv_norm_rotary)
