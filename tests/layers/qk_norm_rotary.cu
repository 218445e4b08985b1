// The layer test of qk_norm_rotary (tests/layers/gpu_test.h: helpers and tolerances), against rmsnorm then rotary
// (CPU references: model/reference_layers.h). Its backward runs inside attention's backward and is
// tested there (tests/test_attention_gpu.cu).
#include "tests/layers/gpu_test.h"
#include "layers/qk_norm_rotary.cuh"
#include "layers/rotary.cuh"

// ---- q/k norm + rotary, fused (layers/qk_norm_rotary.cuh), q and k in one call, each against
// rmsnorm then rotary in fp64 (model/reference_layers.h); at the speedrun's length (angles up
// to 65535 rad), H = 3 so that a token's 2H = 6 rows are not a multiple of the kernel's batch
// of 4 and rows do not align with warps. q and k hold different values (a swap of the two
// would show). In place, the same bits.
// Tolerances: bf16 outputs rounded once from fp32 math, 4e-3 relative (rms); rstd fp32, 1e-5.
static void test_qk_norm_rotary() {
  for (int D : {128, 64}) {
    const int T = 65536, H = 3;
    const size_t n = (size_t)T * H * D, rows = (size_t)T * H;
    const double eps = 1.0 / 128;
    auto table = layers::rotary_table(T, D);
    float2* dt;
    CUDA_CHECK(cudaMalloc(&dt, table.size() * sizeof(float2)));
    CUDA_CHECK(cudaMemcpy(dt, table.data(), table.size() * sizeof(float2), cudaMemcpyHostToDevice));
    struct One {  // q or k: inputs, references, device buffers
      std::vector<double> x, y, rstd;
      bf16 *dx_in, *dyo;
      float* drstd;
    } t[2];
    for (int w = 0; w < 2; w++) {
      One& o = t[w];
      o.x = random_bf16(n, w ? 1.0 : 3.0), o.y.resize(n), o.rstd.resize(rows);
      std::vector<double> nrm(n);
      model_ref::rmsnorm(o.x.data(), nrm.data(), o.rstd.data(), T * H, D, eps);
      model_ref::rotary(nrm.data(), o.y.data(), T, H, D, 1.0);
      o.dx_in = to_device(o.x), o.dyo = poisoned(n);
      CUDA_CHECK(cudaMalloc(&o.drstd, rows * sizeof(float)));
      CUDA_CHECK(cudaMemset(o.drstd, 0xFF, rows * sizeof(float)));
    }
    CUDA_CHECK(layers::qk_norm_rotary_forward({t[0].dx_in, t[1].dx_in}, {t[0].dyo, t[1].dyo}, {t[0].drstd, t[1].drstd}, dt, T, H, D,
                                              (float)eps));
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int w = 0; w < 2; w++) {
      One& o = t[w];
      std::vector<float> hr(rows);
      CUDA_CHECK(cudaMemcpy(hr.data(), o.drstd, hr.size() * sizeof(float), cudaMemcpyDeviceToHost));
      double rerr = 0;
      for (size_t i = 0; i < hr.size(); i++) rerr = std::max(rerr, std::fabs(hr[i] - o.rstd[i]) / o.rstd[i]);
      const double ey = rel_err(from_device(o.dyo, n), o.y);
      CHECK(rerr < 1e-5 && ey < 4e-3, "qk norm+rotary D=%d %s: rstd %.2e y %.2e", D, w ? "k" : "q", rerr, ey);
      std::printf("qk norm+rotary T=%d H=%d D=%d, %s: rstd %.1e, y %.2e\n", T, H, D, w ? "k" : "q", rerr, ey);
    }
    // in place (the model's pass over the projection's q and k when the fused product does not
    // run): the same bits as into other tensors (each element is read before it is written)
    CUDA_CHECK(layers::qk_norm_rotary_forward({t[0].dx_in, t[1].dx_in}, {t[0].dx_in, t[1].dx_in}, {t[0].drstd, t[1].drstd}, dt, T, H,
                                              D, (float)eps));
    for (int w = 0; w < 2; w++) {
      const std::vector<double> a = from_device(t[w].dx_in, n), b = from_device(t[w].dyo, n);
      CHECK(a == b, "qk norm+rotary D=%d %s: in place differs from out of place", D, w ? "k" : "q");
    }
    CHECK(layers::qk_norm_rotary_forward({t[0].dx_in, t[1].dx_in}, {t[0].dyo, t[1].dyo}, {t[0].drstd, t[1].drstd}, dt, T, H, 96, 0.f) ==
              cudaErrorInvalidValue,
          "qk norm+rotary: D=96 accepted");
    CUDA_CHECK(cudaFree(dt));
    for (One& o : t)
      for (void* q : {(void*)o.drstd, (void*)o.dx_in, (void*)o.dyo}) CUDA_CHECK(cudaFree(q));
  }
}

LAYER_TEST_MAIN("qk_norm_rotary", test_qk_norm_rotary)
