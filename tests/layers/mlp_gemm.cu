// The layer test of mlp_gemm (tests/layers/gpu_test.h: helpers and tolerances): the MLP's products
// with ReLU^2 in their epilogue against an fp64 product on the CPU followed by relu2 / relu2_bwd
// (model/reference_layers.h), on fresh random bf16 inputs.
// Shapes: edges in every dimension (M, N and K not multiples of the 128 x 256 x 64 tiles, and
// smaller than one), and more tiles than SMs (each block walks several, through one ring of
// stages).
// Tolerances: forward, u is rounded to bf16 (2^-9 relative) before squaring, which doubles it in
// r, then r is rounded: about 2.5e-3 relative Frobenius error, bound 6e-3. Backward: dr then du
// rounded, about 1.6e-3, bound 4e-3. Rows past M are never written (checked on guard rows).
#include "tests/layers/gpu_test.h"
#include "layers/mlp_gemm.cuh"

#include <omp.h>

// The first MN values of out (MN + guard rows' worth, poisoned before the call) against want,
// and whether the guard rows after them are still poisoned (NaN)
static double out_err(const bf16* out, const std::vector<double>& want, size_t guard_values, bool* guard_ok) {
  const std::vector<double> got = from_device(out, want.size() + guard_values);
  *guard_ok = true;
  for (size_t i = want.size(); i < got.size(); i++) *guard_ok &= std::isnan(got[i]);
  return rel_err(std::vector<double>(got.begin(), got.begin() + want.size()), want);
}

static void test_mlp_gemm() {
  if (!layers::mlp_gemm_available()) {
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
      CUDA_CHECK(layers::mlp_up_relu2(dh, dW, dr, M, K, N));
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
      CUDA_CHECK(layers::mlp_down_dx_relu2(ddx, dWp, drr, ddu, M, K, N));
      bool guard_ok;
      const double e = out_err(ddu, want, (size_t)guard * N, &guard_ok);
      CHECK(e < 4e-3 && guard_ok, "mlp_gemm backward M=%d K=%d N=%d: rel err %.2e, guard rows untouched %d", M, K, N, e, guard_ok);
      std::printf("mlp_gemm backward (du = 2 sqrt(r) dx Wproj^T) M=%d K=%d N=%d: %.2e\n", M, K, N, e);
      for (void* p : {(void*)ddx, (void*)dWp, (void*)drr, (void*)ddu}) CUDA_CHECK(cudaFree(p));
    }
  }
  // shapes the kernel refuses (K or N not a multiple of 8, a misaligned pointer): an error, no launch
  bf16* d = poisoned(64 * 64);
  CHECK(layers::mlp_up_relu2(d, d, d, 8, 12, 64) == cudaErrorInvalidValue, "K = 12 accepted");
  CHECK(layers::mlp_down_dx_relu2(d, d, d, d, 8, 64, 20) == cudaErrorInvalidValue, "N = 20 accepted");
  CHECK(layers::mlp_up_relu2(d + 1, d, d, 8, 64, 64) == cudaErrorInvalidValue, "a misaligned operand accepted");
  CUDA_CHECK(cudaFree(d));
}

LAYER_TEST_MAIN("mlp_gemm", test_mlp_gemm)
