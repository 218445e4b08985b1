// The layer test of norm_mix (tests/layers/gpu_test.h: helpers and tolerances), against the unfused kernels (lambda mix, rmsnorm) and their fp64 compositions
// (CPU references: model/reference_layers.h unless named otherwise).
#include "tests/layers/gpu_test.h"
#include "layers/mix.cuh"
#include "layers/mix_backward.cuh"
#include "layers/norm_mix.cuh"
#include "layers/rmsnorm.cuh"
#include "tests/oracle_kernels.cuh"

// ---- lambda mix + RMS norm fused (layers/norm_mix.cuh): the forward gives the bits of
// lambda_mix then rmsnorm_forward; the backward's outputs against rmsnorm_backward then
// mix_backward (the same arithmetic, x_mix recomputed with the forward's: expected to the bit)
// and against fp64 (bf16 outputs: 4e-3; the scalar sums, fp32: 1e-5 relative to |g||x|)
static void test_norm_mix() {
  {
    const int T = 4097, C = 768;
    const size_t n = (size_t)T * C;
    const double eps = 1.0 / 128;
    std::vector<double> xin = random_bf16(n), x0 = random_bf16(n), dh = random_bf16(n), dx = random_bf16(n), dx0 = random_bf16(n);
    const float l[2] = {0.8f, 0.45f};
    float *dl, *dgl, *dpart, *drs1, *drs2;
    CUDA_CHECK(cudaMalloc(&dl, sizeof(l)));
    CUDA_CHECK(cudaMalloc(&dgl, 4 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dpart, 3 * layers::kDotBlocks * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&drs1, T * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&drs2, T * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dl, l, sizeof(l), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dgl, 0, 4 * sizeof(float)));
    bf16 *dxin = to_device(xin), *dx0_ = to_device(x0), *ddh = to_device(dh);
    bf16 *xm1 = poisoned(n), *h1 = poisoned(n), *xm2 = poisoned(n), *h2 = poisoned(n);
    CUDA_CHECK(layers::mix_rmsnorm_forward(dxin, dx0_, dl, xm1, h1, drs1, T, C, (float)eps));
    CUDA_CHECK(oracle::lambda_mix(dxin, dx0_, xm2, dl, n));
    CUDA_CHECK(layers::rmsnorm_forward(xm2, h2, drs2, T, C, (float)eps));
    std::vector<float> r1(T), r2(T);
    const std::vector<double> hxm = from_device(xm1, n), hh = from_device(h1, n);
    CUDA_CHECK(cudaMemcpy(r1.data(), drs1, T * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(r2.data(), drs2, T * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(hxm == from_device(xm2, n) && hh == from_device(h2, n) && r1 == r2, "mix_rmsnorm_forward: not the bits of lambda_mix + rmsnorm_forward");
    std::vector<double> xm_ref(n), h_ref(n), rs_ref(T);
    for (size_t i = 0; i < n; i++) xm_ref[i] = l[0] * xin[i] + l[1] * x0[i];
    model_ref::rmsnorm(xm_ref.data(), h_ref.data(), rs_ref.data(), T, C, eps);
    const double exm = rel_err(hxm, xm_ref), eh = rel_err(hh, h_ref);
    CHECK(exm < 4e-3 && eh < 8e-3, "mix_rmsnorm_forward: x_mix %.2e h %.2e (h: two roundings, 8e-3)", exm, eh);
    // backward, fused (x_mix recomputed) and unfused (the forward's x_mix), the same rstd
    bf16 *dx1 = to_device(dx), *dx2 = to_device(dx), *dz1 = to_device(dx0), *dz2 = to_device(dx0);
    CUDA_CHECK(layers::rmsnorm_mix_backward(drs1, ddh, dx1, dxin, dx0_, dz1, dl, dgl, T, C, dpart));
    CUDA_CHECK(layers::rmsnorm_backward(xm1, drs1, ddh, dx2, T, C, true));
    CUDA_CHECK(layers::mix_backward(dx2, dxin, dx0_, dz2, true, dl, dgl + 2, n, dpart));
    float got[4];
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(got, dgl, sizeof(got), cudaMemcpyDeviceToHost));
    const std::vector<double> hx1 = from_device(dx1, n), hz1 = from_device(dz1, n), hx2 = from_device(dx2, n), hz2 = from_device(dz2, n);
    std::vector<double> g(n, 0.0), rs(r1.begin(), r1.end()), wx(n), wz(n);
    for (size_t i = 0; i < n; i++) g[i] = dx[i];
    model_ref::rmsnorm_bwd(hxm.data(), rs.data(), dh.data(), g.data(), T, C);
    double sa = 0, sb = 0, gg = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
      wx[i] = l[0] * g[i], wz[i] = dx0[i] + l[1] * g[i];
      sa += g[i] * xin[i], sb += g[i] * x0[i], gg += g[i] * g[i], aa += xin[i] * xin[i], bb += x0[i] * x0[i];
    }
    const double ex = rel_err(hx1, wx), ez = rel_err(hz1, wz), du = std::max(rel_err(hx1, hx2), rel_err(hz1, hz2));
    const double ea = std::fabs(got[0] - sa) / std::sqrt(gg * aa), eb = std::fabs(got[1] - sb) / std::sqrt(gg * bb);
    const double ua = std::fabs(got[0] - got[2]) / std::sqrt(gg * aa), ub = std::fabs(got[1] - got[3]) / std::sqrt(gg * bb);
    // the fused backward recomputes x_mix from x_in and x0 with the forward's arithmetic: its
    // elements are expected to be the unfused path's bits (which reads the forward's x_mix)
    CHECK(ex < 4e-3 && ez < 4e-3 && hx1 == hx2 && hz1 == hz2, "rmsnorm_mix_backward: dx %.2e dx0 %.2e, from the unfused %.2e", ex, ez, du);
    CHECK(ea < 1e-5 && eb < 1e-5 && ua < 1e-5 && ub < 1e-5, "rmsnorm_mix_backward: sums %.2e %.2e from fp64, %.2e %.2e from unfused", ea, eb,
          ua, ub);
    std::printf("mix + rmsnorm: forward the unfused bits (x_mix %.2e, h %.2e); backward dx %.2e dx0 %.2e, sums %.1e %.1e, elements the unfused bits\n",
                exm, eh, ex, ez, ea, eb);
    {  // with add (a skip source's gradient joining dx): the bits of the call without it, then skip_add(dx, add, 1)
      const std::vector<double> add = random_bf16(n);
      const float one = 1.f;
      float* done;
      CUDA_CHECK(cudaMalloc(&done, sizeof(float)));
      CUDA_CHECK(cudaMemcpy(done, &one, sizeof(float), cudaMemcpyHostToDevice));
      bf16 *dadd = to_device(add), *dx3 = to_device(dx), *dz3 = to_device(dx0), *dx4 = to_device(dx), *dz4 = to_device(dx0);
      CUDA_CHECK(layers::rmsnorm_mix_backward(drs1, ddh, dx3, dxin, dx0_, dz3, dl, dgl, T, C, dpart, dadd));
      CUDA_CHECK(layers::rmsnorm_mix_backward(drs1, ddh, dx4, dxin, dx0_, dz4, dl, dgl + 2, T, C, dpart));
      CUDA_CHECK(layers::skip_add(dx4, dadd, done, 0, n));
      const std::vector<double> hx3 = from_device(dx3, n);
      std::vector<double> wxa(n);
      for (size_t i = 0; i < n; i++) wxa[i] = wx[i] + add[i];
      const double exa = rel_err(hx3, wxa);
      CHECK(hx3 == from_device(dx4, n) && from_device(dz3, n) == from_device(dz4, n) && exa < 4e-3,
            "rmsnorm_mix_backward with add: not the bits of the call without it + skip_add, or dx %.2e from fp64", exa);
      std::printf("mix + rmsnorm backward with add: the bits of the call without it + skip_add; dx %.2e\n", exa);
      for (void* q : {(void*)done, (void*)dadd, (void*)dx3, (void*)dz3, (void*)dx4, (void*)dz4}) CUDA_CHECK(cudaFree(q));
    }
    {  // dx0 taken three ways (layers::Dx0): kFirst gives the bits kAdd gives over a zeroed dx0
       // without reading dx0 (poisoned here), with the U-net skip too (the model's layer L - 1);
       // kFold gives dx the bits of kAdd then skip_add(dx, dx0, 1) and leaves dx0 as it was
      const float one = 1.f, sw[2] = {0.f, 0.7f};
      float *done, *dsw, *dgs;
      CUDA_CHECK(cudaMalloc(&done, sizeof(float)));
      CUDA_CHECK(cudaMalloc(&dsw, sizeof(sw)));
      CUDA_CHECK(cudaMalloc(&dgs, 2 * sizeof(float)));
      CUDA_CHECK(cudaMemcpy(done, &one, sizeof(float), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(dsw, sw, sizeof(sw), cudaMemcpyHostToDevice));
      const std::vector<double> src = random_bf16(n);
      bf16* dsrc = to_device(src);
      for (int with_skip = 0; with_skip < 2; with_skip++) {
        bf16 *dxa = to_device(dx), *dza = poisoned(n), *dxb = to_device(dx), *dzb = to_device(std::vector<double>(n, 0.0));
        bf16 *dsa = with_skip ? poisoned(n) : nullptr, *dsb = with_skip ? poisoned(n) : nullptr;
        const layers::SkipGrad ska = with_skip ? layers::SkipGrad{dsrc, dsw, 1, dgs, dsa} : layers::SkipGrad{};
        const layers::SkipGrad skb = with_skip ? layers::SkipGrad{dsrc, dsw, 1, dgs + 1, dsb} : layers::SkipGrad{};
        CUDA_CHECK(layers::rmsnorm_mix_backward(drs1, ddh, dxa, dxin, dx0_, dza, dl, dgl, T, C, dpart, nullptr, ska, layers::Dx0::kFirst));
        CUDA_CHECK(layers::rmsnorm_mix_backward(drs1, ddh, dxb, dxin, dx0_, dzb, dl, dgl + 2, T, C, dpart, nullptr, skb));
        CHECK(from_device(dxa, n) == from_device(dxb, n) && from_device(dza, n) == from_device(dzb, n) &&
                  (!with_skip || from_device(dsa, n) == from_device(dsb, n)),
              "rmsnorm_mix_backward kFirst (skip %d): not the bits of kAdd over a zeroed dx0", with_skip);
        for (void* q : {(void*)dxa, (void*)dza, (void*)dxb, (void*)dzb, (void*)dsa, (void*)dsb}) CUDA_CHECK(cudaFree(q));
      }
      bf16 *dxc = to_device(dx), *dzc = to_device(dx0), *dxd = to_device(dx), *dzd = to_device(dx0);
      CUDA_CHECK(layers::rmsnorm_mix_backward(drs1, ddh, dxc, dxin, dx0_, dzc, dl, dgl, T, C, dpart, nullptr, {}, layers::Dx0::kFold));
      CUDA_CHECK(layers::rmsnorm_mix_backward(drs1, ddh, dxd, dxin, dx0_, dzd, dl, dgl + 2, T, C, dpart));
      CUDA_CHECK(layers::skip_add(dxd, dzd, done, 0, n));
      const std::vector<double> hxc = from_device(dxc, n);
      std::vector<double> wf(n);
      for (size_t i = 0; i < n; i++) wf[i] = wx[i] + wz[i];
      const double ef = rel_err(hxc, wf);
      CHECK(hxc == from_device(dxd, n) && from_device(dzc, n) == dx0 && ef < 4e-3,
            "rmsnorm_mix_backward kFold: not the bits of kAdd + skip_add, dx0 written, or dx %.2e from fp64", ef);
      CHECK(layers::rmsnorm_mix_backward(drs1, ddh, dxc, dxin, dx0_, dzc, dl, dgl, T, C, dpart, dsrc, {}, layers::Dx0::kFold) ==
                cudaErrorInvalidValue,
            "rmsnorm_mix_backward kFold with add accepted");
      std::printf("mix + rmsnorm backward, dx0 first (no read) and folded into dx: the bits of kAdd (+ skip_add); folded dx %.2e\n", ef);
      for (void* q : {(void*)done, (void*)dsw, (void*)dgs, (void*)dsrc, (void*)dxc, (void*)dzc, (void*)dxd, (void*)dzd}) CUDA_CHECK(cudaFree(q));
    }
    {  // with the U-net skip (SkipAdd, SkipGrad): forward the bits of skip_add then the call
       // without it; backward the bits of the call without it then skip_backward (dsrc given, and
       // null: dx += s dx), the skip weight's gradient within 1e-5 of the unfused sum (|dx||src|)
      const std::vector<double> src = random_bf16(n);
      const float sw[3] = {0.f, 0.7f, 1.3f};  // the weight used is s[j], j = 1
      float *dsw, *dgs;
      CUDA_CHECK(cudaMalloc(&dsw, sizeof(sw)));
      CUDA_CHECK(cudaMalloc(&dgs, 4 * sizeof(float)));
      CUDA_CHECK(cudaMemcpy(dsw, sw, sizeof(sw), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemset(dgs, 0, 4 * sizeof(float)));
      bf16 *dsrc = to_device(src), *xi1 = poisoned(n), *xi2 = poisoned(n), *xm3 = poisoned(n), *h3 = poisoned(n), *xm4 = poisoned(n),
           *h4 = poisoned(n);
      CUDA_CHECK(layers::mix_rmsnorm_forward(dxin, dx0_, dl, xm3, h3, drs1, T, C, (float)eps, layers::SkipAdd{dsrc, dsw, 1, xi1}));
      CUDA_CHECK(layers::skip_add(xi2, dxin, dsrc, dsw, 1, n));
      CUDA_CHECK(layers::mix_rmsnorm_forward(xi2, dx0_, dl, xm4, h4, drs2, T, C, (float)eps));
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaMemcpy(r1.data(), drs1, T * sizeof(float), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(r2.data(), drs2, T * sizeof(float), cudaMemcpyDeviceToHost));
      CHECK(from_device(xi1, n) == from_device(xi2, n) && from_device(xm3, n) == from_device(xm4, n) && from_device(h3, n) == from_device(h4, n) &&
                r1 == r2,
            "mix_rmsnorm_forward with the skip: not the bits of skip_add + mix_rmsnorm_forward");
      for (int with_dsrc = 0; with_dsrc < 2; with_dsrc++) {
        bf16 *dx5 = to_device(dx), *dz5 = to_device(dx0), *dx6 = to_device(dx), *dz6 = to_device(dx0);
        bf16 *ds5 = with_dsrc ? poisoned(n) : nullptr, *ds6 = with_dsrc ? poisoned(n) : nullptr;
        CUDA_CHECK(cudaMemset(dgs, 0, 4 * sizeof(float)));
        CUDA_CHECK(layers::rmsnorm_mix_backward(drs1, ddh, dx5, xi1, dx0_, dz5, dl, dgl, T, C, dpart, nullptr,
                                                layers::SkipGrad{dsrc, dsw, 1, dgs, ds5}));
        CUDA_CHECK(layers::rmsnorm_mix_backward(drs1, ddh, dx6, xi1, dx0_, dz6, dl, dgl + 2, T, C, dpart));
        const std::vector<double> plain_dx = from_device(dx6, n);  // d x_in, before the skip's backward
        CUDA_CHECK(layers::skip_backward(dx6, dsrc, dsw, 1, dgs + 2, ds6, n, dpart));
        float gs[4];
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(gs, dgs, sizeof(gs), cudaMemcpyDeviceToHost));
        double gg2 = 0, ss2 = 0;
        for (size_t i = 0; i < n; i++) gg2 += plain_dx[i] * plain_dx[i], ss2 += src[i] * src[i];
        const double es = std::fabs(gs[1] - gs[3]) / std::sqrt(gg2 * ss2);
        const bool same = from_device(dx5, n) == from_device(dx6, n) && from_device(dz5, n) == from_device(dz6, n) &&
                          (!with_dsrc || from_device(ds5, n) == from_device(ds6, n));
        CHECK(same && es < 1e-5, "rmsnorm_mix_backward with the skip (dsrc %s): not the unfused bits, or skip weight gradient %.2e",
              with_dsrc ? "given" : "null", es);
        std::printf("mix + rmsnorm backward with the skip (dsrc %s): the unfused bits; skip weight gradient %.1e from the unfused\n",
                    with_dsrc ? "given" : "null", es);
        for (void* q : {(void*)dx5, (void*)dz5, (void*)dx6, (void*)dz6, (void*)ds5, (void*)ds6}) CUDA_CHECK(cudaFree(q));
      }
      for (void* q : {(void*)dsw, (void*)dgs, (void*)dsrc, (void*)xi1, (void*)xi2, (void*)xm3, (void*)h3, (void*)xm4, (void*)h4})
        CUDA_CHECK(cudaFree(q));
    }
    for (void* q : {(void*)dl, (void*)dgl, (void*)dpart, (void*)drs1, (void*)drs2, (void*)dxin, (void*)dx0_, (void*)ddh, (void*)xm1,
                    (void*)h1, (void*)xm2, (void*)h2, (void*)dx1, (void*)dx2, (void*)dz1, (void*)dz2})
      CUDA_CHECK(cudaFree(q));
  }
}

LAYER_TEST_MAIN("norm_mix", test_norm_mix)
