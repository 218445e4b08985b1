// The layer test of mix (tests/layers/gpu_test.h: helpers and tolerances), against dot, scale, skip_add and their fp64 compositions
// (CPU references: model/reference_layers.h unless named otherwise).
#include "tests/layers/gpu_test.h"
#include "layers/embedding.cuh"
#include "layers/mix.cuh"
#include "layers/mix_backward.cuh"
#include "layers/reduce.cuh"
#include "tests/oracle_kernels.cuh"

// ---- fused mix backward and value-embedding mix: the bits of the unfused kernels they replace
// (dot, scale, skip_add; embedding_forward then lambda_mix), and the fp64 references
static void test_mix_backward_and_value_embed() {
  {
    const int T = 4099, C = 768, V = 1000;
    const size_t n = (size_t)T * C;
    std::vector<double> g = random_bf16(n), a = random_bf16(n), b = random_bf16(n), gb0 = random_bf16(n), table = random_bf16((size_t)V * C);
    std::vector<int> tok(T);
    for (auto& t : tok) t = (int)(rng() % V);
    const float c[2] = {0.7f, -1.3f};
    float *dc, *dgc, *dpart;
    int* dtok;
    CUDA_CHECK(cudaMalloc(&dc, sizeof(c)));
    CUDA_CHECK(cudaMalloc(&dgc, 4 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dpart, 2 * layers::kDotBlocks * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dtok, T * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(dc, c, sizeof(c), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dtok, tok.data(), T * sizeof(int), cudaMemcpyHostToDevice));
    const float gc0[4] = {0.5f, -0.25f, 0.5f, -0.25f};  // the gradients accumulate onto these
    CUDA_CHECK(cudaMemcpy(dgc, gc0, sizeof(gc0), cudaMemcpyHostToDevice));
    for (const bool acc : {false, true}) {
      bf16 *dg1 = to_device(g), *dg2 = to_device(g), *da = to_device(a), *db = to_device(b);
      bf16 *dgb1 = acc ? to_device(gb0) : poisoned(n), *dgb2 = acc ? to_device(gb0) : to_device(g);
      CUDA_CHECK(layers::mix_backward(dg1, da, db, dgb1, acc, dc, dgc, n, dpart));
      // unfused: dots of the original g, then gb = c1 g (copy + scale) or gb += c1 g, then g *= c0
      CUDA_CHECK(layers::dot(dg2, da, n, dgc + 2, dpart, true));
      CUDA_CHECK(layers::dot(dg2, db, n, dgc + 3, dpart, true));
      if (acc) CUDA_CHECK(layers::skip_add(dgb2, dg2, dc, 1, n));
      else CUDA_CHECK(layers::scale(dgb2, dc, 1, n));
      CUDA_CHECK(layers::scale(dg2, dc, 0, n));
      float got[4];
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaMemcpy(got, dgc, sizeof(got), cudaMemcpyDeviceToHost));
      double ra = 0, rb = 0, aa = 0, bb = 0, gg = 0;
      std::vector<double> wg(n), wgb(n);
      for (size_t i = 0; i < n; i++) {
        ra += g[i] * a[i], rb += g[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i], gg += g[i] * g[i];
        wg[i] = c[0] * g[i];
        wgb[i] = (acc ? gb0[i] : 0.0) + c[1] * g[i];
      }
      const std::vector<double> hg1 = from_device(dg1, n), hgb1 = from_device(dgb1, n);
      const double eg = rel_err(hg1, wg), egb = rel_err(hgb1, wgb);
      CHECK(got[0] == got[2] && got[1] == got[3] && hg1 == from_device(dg2, n) && hgb1 == from_device(dgb2, n),
            "mix backward (accumulate %d): differs from dot + scale + skip_add (sums %.9g %.9g vs %.9g %.9g)", acc, got[0], got[1], got[2],
            got[3]);
      CHECK(eg < 4e-3 && egb < 4e-3, "mix backward (accumulate %d): g %.2e gb %.2e", acc, eg, egb);
      if (!acc) {  // the sums against fp64, relative to |g||a| (fp32 sums: 1e-5)
        const double ea = std::fabs(got[0] - gc0[0] - ra) / std::sqrt(gg * aa), eb = std::fabs(got[1] - gc0[1] - rb) / std::sqrt(gg * bb);
        CHECK(ea < 1e-5 && eb < 1e-5, "mix backward: sums %.2e %.2e from fp64", ea, eb);
        std::printf("mix backward: sums %.1e %.1e, g %.2e, gb %.2e; the unfused kernels' bits\n", ea, eb, eg, egb);
      }
      for (void* q : {(void*)dg1, (void*)dg2, (void*)da, (void*)db, (void*)dgb1, (void*)dgb2}) CUDA_CHECK(cudaFree(q));
    }
    // value_embed_mix == embedding_forward then lambda_mix, and the fp64 mix of the gathered rows
    bf16 *dvl = to_device(a), *dtab = to_device(table), *dve = poisoned(n), *dv1 = poisoned(n), *dv2 = poisoned(n);
    {  // mix_backward_gather == mix_backward on the gathered rows, to the bit; and without gb
       // (the model's call: b's gradient goes elsewhere), g and the sums the same again
      bf16 *g1 = to_device(g), *g2 = to_device(g), *g3 = to_device(g), *gb1 = poisoned(n), *gb2 = poisoned(n);
      CUDA_CHECK(layers::embedding_forward(dtab, dtok, dve, T, C));
      float* dgc3;
      CUDA_CHECK(cudaMalloc(&dgc3, 2 * sizeof(float)));
      CUDA_CHECK(cudaMemset(dgc, 0, 4 * sizeof(float)));
      CUDA_CHECK(cudaMemset(dgc3, 0, 2 * sizeof(float)));
      CUDA_CHECK(layers::mix_backward(g1, dvl, dve, gb1, false, dc, dgc, n, dpart));
      CUDA_CHECK(layers::mix_backward_gather(g2, dvl, dtab, dtok, T, C, gb2, false, dc, dgc + 2, dpart));
      CUDA_CHECK(layers::mix_backward_gather(g3, dvl, dtab, dtok, T, C, nullptr, false, dc, dgc3, dpart));
      float got[6];
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaMemcpy(got, dgc, 4 * sizeof(float), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(got + 4, dgc3, 2 * sizeof(float), cudaMemcpyDeviceToHost));
      CHECK(got[0] == got[2] && got[1] == got[3] && from_device(g1, n) == from_device(g2, n) && from_device(gb1, n) == from_device(gb2, n),
            "mix_backward_gather differs from mix_backward on the gathered rows");
      CHECK(got[4] == got[2] && got[5] == got[3] && from_device(g3, n) == from_device(g2, n),
            "mix_backward_gather without gb differs from it with gb");
      for (void* q : {(void*)g1, (void*)g2, (void*)g3, (void*)gb1, (void*)gb2, (void*)dgc3}) CUDA_CHECK(cudaFree(q));
    }
    CUDA_CHECK(layers::value_embed_mix(dvl, dtab, dtok, dv1, dc, T, C));
    CUDA_CHECK(layers::embedding_forward(dtab, dtok, dve, T, C));
    CUDA_CHECK(oracle::lambda_mix(dvl, dve, dv2, dc, n));
    std::vector<double> want(n);
    for (int t = 0; t < T; t++)
      for (int k = 0; k < C; k++) want[(size_t)t * C + k] = c[0] * a[(size_t)t * C + k] + c[1] * table[(size_t)tok[t] * C + k];
    const std::vector<double> hv1 = from_device(dv1, n);
    const double ev = rel_err(hv1, want);
    CHECK(hv1 == from_device(dv2, n) && ev < 4e-3, "value_embed_mix: rel err %.2e, or differs from embedding_forward + lambda_mix", ev);
    std::printf("value_embed_mix: %.2e, the unfused kernels' bits\n", ev);
    for (void* q : {(void*)dc, (void*)dgc, (void*)dpart, (void*)dtok, (void*)dvl, (void*)dtab, (void*)dve, (void*)dv1, (void*)dv2})
      CUDA_CHECK(cudaFree(q));
  }
}

// ---- mixes and the deterministic dot, on the 8-wide path (n % 8 == 0) and the scalar one
static void test_mixes_and_dot() {
  for (size_t n : {(size_t)1 << 21, (size_t)1000003}) {
    std::vector<double> x = random_bf16(n), y = random_bf16(n);
    const float sc[2] = {0.75f, -1.25f};
    float *dsc, *dpart, *dout;
    CUDA_CHECK(cudaMalloc(&dsc, sizeof(sc)));
    CUDA_CHECK(cudaMalloc(&dpart, layers::kDotBlocks * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dout, sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dsc, sc, sizeof(sc), cudaMemcpyHostToDevice));
    bf16 *dx = to_device(x), *dy = to_device(y), *dm = poisoned(n);
    std::vector<double> mix(n), skip(n), scaled(n);
    double dot_ref = 0;
    for (size_t i = 0; i < n; i++) {
      mix[i] = sc[0] * x[i] + sc[1] * y[i];
      skip[i] = x[i] + sc[1] * y[i];
      scaled[i] = sc[0] * x[i];
      dot_ref += x[i] * y[i];
    }
    CUDA_CHECK(oracle::lambda_mix(dx, dy, dm, dsc, n));
    const double em = rel_err(from_device(dm, n), mix);
    float d1 = 0, d2 = 0;
    CUDA_CHECK(layers::dot(dx, dy, n, dout, dpart, false));
    CUDA_CHECK(cudaMemcpy(&d1, dout, sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(layers::dot(dx, dy, n, dout, dpart, false));
    CUDA_CHECK(cudaMemcpy(&d2, dout, sizeof(float), cudaMemcpyDeviceToHost));
    double xx = 0, yy = 0;
    for (size_t i = 0; i < n; i++) xx += x[i] * x[i], yy += y[i] * y[i];
    const double ed = std::fabs(d1 - dot_ref) / std::sqrt(xx * yy);  // relative to |x||y|: fp32 sums
    bf16* dso = poisoned(n);
    CUDA_CHECK(layers::skip_add(dso, dx, dy, dsc, 1, n));  // out = x + s[1] y, x untouched
    CHECK(from_device(dx, n) == x, "n=%zu: out-of-place skip_add changed its input", n);
    CUDA_CHECK(layers::skip_add(dx, dy, dsc, 1, n));  // x += s[1] y
    const double es = rel_err(from_device(dx, n), skip);
    CHECK(from_device(dso, n) == from_device(dx, n), "n=%zu: out-of-place skip_add differs from in place", n);
    CUDA_CHECK(cudaFree(dso));
    bf16* dx2 = to_device(x);
    CUDA_CHECK(layers::scale(dx2, dsc, 0, n));
    const double ec = rel_err(from_device(dx2, n), scaled);
    CHECK(em < 4e-3 && es < 4e-3 && ec < 4e-3, "n=%zu: lambda_mix %.2e, skip_add %.2e, scale %.2e (bf16 output: 4e-3)", n, em, es, ec);
    CHECK(ed < 1e-5 && d1 == d2, "n=%zu: dot err %.2e relative to |x||y| (fp32: 1e-5), repeat equal %d", n, ed, d1 == d2);
    std::printf("mixes n=%zu: lambda_mix %.2e, skip_add %.2e, scale %.2e; dot %.2e, deterministic\n", n, em, es, ec, ed);
    for (void* q : {(void*)dsc, (void*)dpart, (void*)dout, (void*)dx, (void*)dy, (void*)dm, (void*)dx2}) CUDA_CHECK(cudaFree(q));
  }
}

// ---- the U-net skip's backward (skip_backward): the bits of dot + skip_add into a zeroed buffer
// (and then skip_add(dx, that, 1) when the source's gradient joins dx), and fp64 (bf16
// outputs 4e-3; the sum, fp32, 1e-5 relative to |dx||src|)
static void test_skip_backward() {
  const size_t n = (size_t)4099 * 768;
  const std::vector<double> dx = random_bf16(n), src = random_bf16(n);
  const float sc[3] = {0.6f, -1.7f, 1.f};  // s[0], s[1], and the 1 of the unfused add
  float *dsc, *dgs, *dpart;
  CUDA_CHECK(cudaMalloc(&dsc, sizeof(sc)));
  CUDA_CHECK(cudaMalloc(&dgs, 4 * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dpart, layers::kDotBlocks * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(dsc, sc, sizeof(sc), cudaMemcpyHostToDevice));
  double ref = 0, xx = 0, yy = 0;
  for (size_t i = 0; i < n; i++) ref += dx[i] * src[i], xx += dx[i] * dx[i], yy += src[i] * src[i];
  for (const bool apart : {true, false}) {
    const float gs0[4] = {0.25f, -0.5f, 0.25f, -0.5f};  // added to
    CUDA_CHECK(cudaMemcpy(dgs, gs0, sizeof(gs0), cudaMemcpyHostToDevice));
    bf16 *dx1 = to_device(dx), *dx2 = to_device(dx), *dsrc = to_device(src), *ds1 = poisoned(n), *ds2 = to_device(std::vector<double>(n, 0.0));
    CUDA_CHECK(layers::skip_backward(dx1, dsrc, dsc, 1, dgs, apart ? ds1 : nullptr, n, dpart));
    CUDA_CHECK(layers::dot(dx2, dsrc, n, dgs + 3, dpart, true));
    CUDA_CHECK(layers::skip_add(ds2, dx2, dsc, 1, n));
    if (!apart) CUDA_CHECK(layers::skip_add(dx2, ds2, dsc, 2, n));
    float got[4];
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(got, dgs, sizeof(got), cudaMemcpyDeviceToHost));
    const std::vector<double> hx1 = from_device(dx1, n), hx2 = from_device(dx2, n), hs2 = from_device(ds2, n);
    std::vector<double> want(n);
    for (size_t i = 0; i < n; i++) want[i] = apart ? sc[1] * dx[i] : (1 + sc[1]) * dx[i];
    const double e = rel_err(apart ? from_device(ds1, n) : hx1, want), es = std::fabs(got[1] - gs0[1] - ref) / std::sqrt(xx * yy);
    const bool same = got[1] == got[3] && got[0] == gs0[0] && hx1 == hx2 && (!apart || from_device(ds1, n) == hs2);
    CHECK(same, "skip_backward (source %s): not the bits of dot + skip_add", apart ? "apart" : "in the stream");
    CHECK(e < 4e-3 && es < 1e-5, "skip_backward (source %s): gradient %.2e, sum %.2e from fp64", apart ? "apart" : "in the stream", e, es);
    std::printf("skip_backward (source %s): gradient %.2e, sum %.1e; the bits of dot + skip_add\n", apart ? "apart" : "in the stream", e, es);
    for (void* q : {(void*)dx1, (void*)dx2, (void*)dsrc, (void*)ds1, (void*)ds2}) CUDA_CHECK(cudaFree(q));
  }
  for (void* q : {(void*)dsc, (void*)dgs, (void*)dpart}) CUDA_CHECK(cudaFree(q));
}

LAYER_TEST_MAIN("mix", test_mix_backward_and_value_embed, test_mixes_and_dot, test_skip_backward)
