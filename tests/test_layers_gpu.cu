// The CUDA layers (layers/) against their fp64 CPU references (model/reference_layers.h) on
// fresh random inputs, outputs poisoned (NaN) before each run.
// Tolerance: these layers round only their output to bf16 (sums in fp32), so the relative
// Frobenius error is one bf16 rounding, about 2^-9 / sqrt(3) = 1.1e-3 on average: the bound is
// 4e-3. rstd is fp32: 1e-5. Rows with small values (mean x^2 << eps) make eps matter.
// Matmul: bf16 output 4e-3 (the output rounding dominates fp32 accumulation over k <= 3072);
// fp32 output 1e-5. Cross-entropy: loss 1e-5 (fp32 over 50304 terms), dz 4e-3 (bf16 output).
// Embedding backward and Adam work in fp32: 1e-5. Muon's Newton-Schulz runs in bf16: its update
// must be within twice the error of a CPU emulation of the same bf16 iteration (each matmul
// accumulated exactly then rounded to bf16, each stored tensor rounded), plus 1e-3; its staged
// path (the data-parallel one) must give muon_step's bits. The replica checksum is integer: exact.
#include <cmath>
#include <random>
#include <vector>

#include "layers/adam.cuh"
#include "layers/checksum.cuh"
#include "layers/embedding.cuh"
#include "layers/matmul.cuh"
#include "layers/mix.cuh"
#include "layers/muon.cuh"
#include "layers/reduce.cuh"
#include "layers/relu2.cuh"
#include "layers/softcap_ce.cuh"
#include "model/optimizer_reference.h"
#include "layers/rmsnorm.cuh"
#include "layers/rotary.cuh"
#include "tests/oracle_kernels.cuh"
#include "layers/qk_norm_rotary.cuh"
#include "layers/mix_backward.cuh"
#include "layers/norm_mix.cuh"
#include "model/reference_layers.h"
#include "tests/check.h"
#include "common/cuda_check.h"

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
  CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(bf16)));
  CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  return d;
}
static bf16* poisoned(size_t n) {
  bf16* d;
  CUDA_CHECK(cudaMalloc(&d, n * sizeof(bf16)));
  CUDA_CHECK(cudaMemset(d, 0xFF, n * sizeof(bf16)));
  return d;
}
static std::vector<double> from_device(const bf16* d, size_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<bf16> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
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

static const double eps = 1.0 / 128;  // the norms' eps (docs/model.md)

// ---- RMS norm: residual rows (n = 768) and head rows (n = 128); half the rows small
static void test_rmsnorm() {
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
    CUDA_CHECK(cudaMalloc(&drstd, rows * sizeof(float)));
    CUDA_CHECK(cudaMemset(drstd, 0xFF, rows * sizeof(float)));
    CUDA_CHECK(layers::rmsnorm_forward(dx_, dy_out, drstd, rows, n, (float)eps));
    CUDA_CHECK(layers::rmsnorm_backward(dx_, drstd, ddy, dgrad, rows, n, false));
    CUDA_CHECK(layers::rmsnorm_backward(dx_, drstd, ddy, dacc, rows, n, true));
    std::vector<float> hr(rows);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(hr.data(), drstd, rows * sizeof(float), cudaMemcpyDeviceToHost));
    double rerr = 0;
    for (int r = 0; r < rows; r++) rerr = std::max(rerr, std::fabs(hr[r] - rstd[r]) / rstd[r]);
    const double ey = rel_err(from_device(dy_out, x.size()), y), eg = rel_err(from_device(dgrad, x.size()), dx),
                 ea = rel_err(from_device(dacc, x.size()), dx_acc);
    CHECK(rerr < 1e-5, "rmsnorm n=%d: rstd rel err %.2e", n, rerr);
    CHECK(ey < 4e-3 && eg < 4e-3 && ea < 4e-3, "rmsnorm n=%d: y %.2e dx %.2e dx(accumulate) %.2e", n, ey, eg, ea);
    std::printf("rmsnorm n=%d: rstd %.1e, y %.2e, dx %.2e, dx accumulated %.2e\n", n, rerr, ey, eg, ea);
    for (void* p : {(void*)dx_, (void*)ddy, (void*)dy_out, (void*)dgrad, (void*)dacc, (void*)drstd}) CUDA_CHECK(cudaFree(p));
  }
  CHECK(layers::rmsnorm_forward(nullptr, nullptr, nullptr, 4, 100, 0.f) == cudaErrorInvalidValue, "n not a multiple of 8 accepted");
}

// ---- q/k norm + rotary, fused (layers/qk_norm_rotary.cuh), q and k in one call, each against
// rmsnorm then rotary in fp64 (model/reference_layers.h), and its backward against rotary^T
// then rmsnorm_bwd; at the speedrun's length (angles up to 65535 rad), H = 3 so that a token's
// 2H = 6 rows are not a multiple of the kernel's batch of 4 and rows do not align with warps.
// q and k hold different values (a swap of the two would show).
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
      std::vector<double> x, dy, y, rstd, dx;
      bf16 *dx_in, *ddy, *dyo, *ddx;
      float* drstd;
    } t[2];
    for (int w = 0; w < 2; w++) {
      One& o = t[w];
      o.x = random_bf16(n, w ? 1.0 : 3.0), o.dy = random_bf16(n), o.y.resize(n), o.rstd.resize(rows), o.dx.assign(n, 0.0);
      std::vector<double> nrm(n), dn(n);
      model_ref::rmsnorm(o.x.data(), nrm.data(), o.rstd.data(), T * H, D, eps);
      model_ref::rotary(nrm.data(), o.y.data(), T, H, D, 1.0);
      model_ref::rotary(o.dy.data(), dn.data(), T, H, D, -1.0);
      model_ref::rmsnorm_bwd(o.x.data(), o.rstd.data(), dn.data(), o.dx.data(), T * H, D);
      o.dx_in = to_device(o.x), o.ddy = to_device(o.dy), o.dyo = poisoned(n), o.ddx = poisoned(n);
      CUDA_CHECK(cudaMalloc(&o.drstd, rows * sizeof(float)));
      CUDA_CHECK(cudaMemset(o.drstd, 0xFF, rows * sizeof(float)));
    }
    CUDA_CHECK(layers::qk_norm_rotary_forward({t[0].dx_in, t[1].dx_in}, {t[0].dyo, t[1].dyo}, {t[0].drstd, t[1].drstd}, dt, T, H, D,
                                              (float)eps));
    CUDA_CHECK(layers::qk_norm_rotary_backward({t[0].dx_in, t[1].dx_in}, {t[0].drstd, t[1].drstd}, {t[0].ddy, t[1].ddy},
                                               {t[0].ddx, t[1].ddx}, dt, T, H, D));
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int w = 0; w < 2; w++) {
      One& o = t[w];
      std::vector<float> hr(rows);
      CUDA_CHECK(cudaMemcpy(hr.data(), o.drstd, hr.size() * sizeof(float), cudaMemcpyDeviceToHost));
      double rerr = 0;
      for (size_t i = 0; i < hr.size(); i++) rerr = std::max(rerr, std::fabs(hr[i] - o.rstd[i]) / o.rstd[i]);
      const double ey = rel_err(from_device(o.dyo, n), o.y), ex = rel_err(from_device(o.ddx, n), o.dx);
      CHECK(rerr < 1e-5 && ey < 4e-3 && ex < 4e-3, "qk norm+rotary D=%d %s: rstd %.2e y %.2e dx %.2e", D, w ? "k" : "q", rerr, ey, ex);
      std::printf("qk norm+rotary T=%d H=%d D=%d, %s: rstd %.1e, y %.2e, dx %.2e\n", T, H, D, w ? "k" : "q", rerr, ey, ex);
    }
    CHECK(layers::qk_norm_rotary_forward({t[0].dx_in, t[1].dx_in}, {t[0].dyo, t[1].dyo}, {t[0].drstd, t[1].drstd}, dt, T, H, 96, 0.f) ==
              cudaErrorInvalidValue,
          "qk norm+rotary: D=96 accepted");
    CUDA_CHECK(cudaFree(dt));
    for (One& o : t)
      for (void* q : {(void*)o.drstd, (void*)o.dx_in, (void*)o.ddy, (void*)o.dyo, (void*)o.ddx}) CUDA_CHECK(cudaFree(q));
  }
}

// ---- lambda mix + RMS norm fused (layers/norm_mix.cuh): the forward gives the bits of
// lambda_mix then rmsnorm_forward; the backward's outputs against rmsnorm_backward then
// mix_backward (the same arithmetic: expected to the bit, and at most a rounding apart,
// 2e-3) and against fp64 (bf16 outputs: 4e-3; the scalar sums, fp32: 1e-5 relative to |g||x|)
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
    CUDA_CHECK(cudaMalloc(&dpart, 2 * layers::kDotBlocks * sizeof(float)));
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
    // backward, fused and unfused, from the same x_mix (the device's) and rstd
    bf16 *dx1 = to_device(dx), *dx2 = to_device(dx), *dz1 = to_device(dx0), *dz2 = to_device(dx0);
    CUDA_CHECK(layers::rmsnorm_mix_backward(xm1, drs1, ddh, dx1, dxin, dx0_, dz1, dl, dgl, T, C, dpart));
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
    CHECK(ex < 4e-3 && ez < 4e-3 && du < 2e-3, "rmsnorm_mix_backward: dx %.2e dx0 %.2e, from the unfused %.2e", ex, ez, du);
    CHECK(ea < 1e-5 && eb < 1e-5 && ua < 1e-5 && ub < 1e-5, "rmsnorm_mix_backward: sums %.2e %.2e from fp64, %.2e %.2e from unfused", ea, eb,
          ua, ub);
    std::printf("mix + rmsnorm: forward the unfused bits (x_mix %.2e, h %.2e); backward dx %.2e dx0 %.2e, sums %.1e %.1e, %s\n", exm, eh, ex,
                ez, ea, eb, hx1 == hx2 && hz1 == hz2 ? "elements the unfused bits" : "elements within a rounding of the unfused");
    for (void* q : {(void*)dl, (void*)dgl, (void*)dpart, (void*)drs1, (void*)drs2, (void*)dxin, (void*)dx0_, (void*)ddh, (void*)xm1,
                    (void*)h1, (void*)xm2, (void*)h2, (void*)dx1, (void*)dx2, (void*)dz1, (void*)dz2})
      CUDA_CHECK(cudaFree(q));
  }
}

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
    {  // mix_backward_gather == mix_backward on the gathered rows, to the bit
      bf16 *g1 = to_device(g), *g2 = to_device(g), *gb1 = poisoned(n), *gb2 = poisoned(n);
      CUDA_CHECK(layers::embedding_forward(dtab, dtok, dve, T, C));
      CUDA_CHECK(cudaMemset(dgc, 0, 4 * sizeof(float)));
      CUDA_CHECK(layers::mix_backward(g1, dvl, dve, gb1, false, dc, dgc, n, dpart));
      CUDA_CHECK(layers::mix_backward_gather(g2, dvl, dtab, dtok, T, C, gb2, false, dc, dgc + 2, dpart));
      float got[4];
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaMemcpy(got, dgc, sizeof(got), cudaMemcpyDeviceToHost));
      CHECK(got[0] == got[2] && got[1] == got[3] && from_device(g1, n) == from_device(g2, n) && from_device(gb1, n) == from_device(gb2, n),
            "mix_backward_gather differs from mix_backward on the gathered rows");
      for (void* q : {(void*)g1, (void*)g2, (void*)gb1, (void*)gb2}) CUDA_CHECK(cudaFree(q));
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

// ---- rotary at the speedrun's length (angles up to 65535 rad), forward and transpose; D = 128
// takes the 4-wide path, D = 6 the one-pair-a-thread path
static void test_rotary() {
  for (int D : {128, 6}) {
    const int T = 65536, H = 2;
    std::vector<double> x = random_bf16((size_t)T * H * D), y(x.size()), back(x.size());
    model_ref::rotary(x.data(), y.data(), T, H, D, 1.0);
    auto table = layers::rotary_table(T, D);
    float2* dt;
    CUDA_CHECK(cudaMalloc(&dt, table.size() * sizeof(float2)));
    CUDA_CHECK(cudaMemcpy(dt, table.data(), table.size() * sizeof(float2), cudaMemcpyHostToDevice));
    bf16* dxr = to_device(x);
    CUDA_CHECK(oracle::rotary(dxr, dt, T, H, D, 1.f));
    std::vector<double> got = from_device(dxr, x.size());
    const double e = rel_err(got, y);
    CUDA_CHECK(oracle::rotary(dxr, dt, T, H, D, -1.f));
    const double eb = rel_err(from_device(dxr, x.size()), x);
    CHECK(e < 4e-3, "rotary D=%d forward rel err %.2e", D, e);
    CHECK(eb < 8e-3, "rotary D=%d forward then transpose: %.2e from the input (two roundings)", D, eb);
    std::printf("rotary T=%d D=%d: forward %.2e, round trip %.2e\n", T, D, e, eb);
    CUDA_CHECK(cudaFree(dt));
    CUDA_CHECK(cudaFree(dxr));
  }
}

// ---- relu^2
static void test_relu2() {
  {
    const size_t n = 1 << 20;
    std::vector<double> u = random_bf16(n), dr = random_bf16(n), r(n), du(n);
    model_ref::relu2(u.data(), r.data(), n);
    model_ref::relu2_bwd(u.data(), dr.data(), du.data(), n);
    bf16 *du_ = to_device(u), *ddr = to_device(dr), *dr_out = poisoned(n), *ddu = poisoned(n);
    CUDA_CHECK(layers::relu2_forward(du_, dr_out, n));
    CUDA_CHECK(oracle::relu2_backward(du_, ddr, ddu, n));
    const double e1 = rel_err(from_device(dr_out, n), r), e2 = rel_err(from_device(ddu, n), du);
    // from the stored output r (bf16): sqrt(r) is max(u, 0) within 2^-9, then du is rounded
    bf16* ddu_r = poisoned(n);
    CUDA_CHECK(layers::relu2_backward_from_r(dr_out, ddr, ddu_r, n));
    const double e3 = rel_err(from_device(ddu_r, n), du);
    CHECK(e1 < 4e-3 && e2 < 4e-3 && e3 < 4e-3, "relu2: forward %.2e backward %.2e backward from r %.2e", e1, e2, e3);
    std::printf("relu2: forward %.2e, backward %.2e, backward from r %.2e\n", e1, e2, e3);
    for (void* p : {(void*)du_, (void*)ddr, (void*)dr_out, (void*)ddu, (void*)ddu_r}) CUDA_CHECK(cudaFree(p));
  }
}

// ---- matmul: forward, both backward forms, accumulate, fp32 output
static void test_matmul() {
  {
    layers::Matmul mm;
    struct Shape { int m, n, k; bool ta, tb, acc, f32; } shapes[] = {
        {256, 768, 768, false, false, false, false}, {128, 3072, 768, false, true, false, false},
        {768, 512, 256, true, false, true, false},   {64, 1024, 768, false, false, false, true},
        {256, 768, 3072, false, false, true, false}};  // the residual add of the MLP's output projection
    for (auto sh : shapes) {
      std::vector<double> A = random_bf16((size_t)sh.m * sh.k), B = random_bf16((size_t)sh.k * sh.n), C0 = random_bf16((size_t)sh.m * sh.n);
      std::vector<double> want = sh.acc ? C0 : std::vector<double>((size_t)sh.m * sh.n, 0.0);
      auto a = [&](int i, int kk) { return sh.ta ? A[(size_t)kk * sh.m + i] : A[(size_t)i * sh.k + kk]; };
      auto b = [&](int kk, int j) { return sh.tb ? B[(size_t)j * sh.k + kk] : B[(size_t)kk * sh.n + j]; };
      for (int i = 0; i < sh.m; i++)
        for (int kk = 0; kk < sh.k; kk++) {
          const double av = a(i, kk);
          for (int j = 0; j < sh.n; j++) want[(size_t)i * sh.n + j] += av * b(kk, j);
        }
      bf16 *dA = to_device(A), *dB = to_device(B);
      double e;
      if (sh.f32) {
        float* dC;
        CUDA_CHECK(cudaMalloc(&dC, want.size() * sizeof(float)));
        CUDA_CHECK(cudaMemset(dC, 0xFF, want.size() * sizeof(float)));
        mm(dA, dB, dC, sh.m, sh.n, sh.k, sh.ta, sh.tb, false, true);
        std::vector<float> h(want.size());
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(h.data(), dC, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
        e = rel_err(std::vector<double>(h.begin(), h.end()), want);
        CUDA_CHECK(cudaFree(dC));
      } else {
        bf16* dC = sh.acc ? to_device(C0) : poisoned(want.size());
        mm(dA, dB, dC, sh.m, sh.n, sh.k, sh.ta, sh.tb, sh.acc, false);
        const std::vector<double> got = from_device(dC, want.size());
        e = rel_err(got, want);
        CUDA_CHECK(cudaFree(dC));
        if (sh.acc) {  // add(): D = C + AB into another buffer (cuBLASLt's out-of-place epilogue: not
                       // the in-place call's bits on H200), C untouched; same bf16 tolerance
          bf16 *dCin = to_device(C0), *dD = poisoned(want.size());
          mm.add(dA, dB, dCin, dD, sh.m, sh.n, sh.k, sh.ta, sh.tb);
          const double ea = rel_err(from_device(dD, want.size()), want);
          CHECK(ea < 4e-3 && from_device(dCin, want.size()) == C0, "matmul add m=%d n=%d k=%d: rel err %.2e, or C changed", sh.m, sh.n,
                sh.k, ea);
          std::printf("matmul add (D = C + AB, D another buffer) m=%d n=%d k=%d: %.2e\n", sh.m, sh.n, sh.k, ea);
          CUDA_CHECK(cudaFree(dCin));
          CUDA_CHECK(cudaFree(dD));
        }
      }
      CHECK(e < (sh.f32 ? 1e-5 : 4e-3), "matmul m=%d n=%d k=%d ta=%d tb=%d acc=%d fp32=%d: rel err %.2e", sh.m, sh.n, sh.k, sh.ta, sh.tb,
            sh.acc, sh.f32, e);
      std::printf("matmul m=%d n=%d k=%d ta=%d tb=%d acc=%d fp32=%d: %.2e\n", sh.m, sh.n, sh.k, sh.ta, sh.tb, sh.acc, sh.f32, e);
      CUDA_CHECK(cudaFree(dA));
      CUDA_CHECK(cudaFree(dB));
    }
  }
}

// ---- matmul's tuned choice (layers/matmul.cuh): at the model's shapes, where cuBLASLt offers
// several algorithms, the tuned Matmul gives exactly the first choice's bits (bitwise equality,
// no tolerance: that is the rule the tuning keeps), and its first call, which runs the trials,
// adds into an in-place output once (an extra addition would change the bits). A fresh tuned
// Matmul first gets a zero A (as the model's first backward does: its projections start at
// zero), which must leave the output as a zero product does and must not tune (on zeros every
// algorithm agrees, a split-K one too); then two calls on random A, the one that tunes and a
// later one, each with the first choice's bits.
static void test_matmul_tuned() {
  struct Shape { const char* name; int m, n, k; bool ta, tb, acc, f32, add; } shapes[] = {
      {"x W (C x C)", 8192, 768, 768, false, false, false, false, false},
      {"dX = dy W^T, 4C x C", 8192, 3072, 768, false, true, false, false, false},
      {"dX += dy W^T (in place)", 8192, 768, 768, false, true, true, false, false},
      {"x + r Wproj (add, out of place)", 8192, 768, 3072, false, false, false, false, true},
      {"dW += x^T dy (fp32, in place)", 768, 3072, 8192, true, false, true, true, false}};
  for (const Shape& sh : shapes) {
    const size_t nc = (size_t)sh.m * sh.n, esize = sh.f32 ? 4 : 2;
    std::vector<double> A = random_bf16((size_t)sh.m * sh.k), B = random_bf16((size_t)sh.k * sh.n), C0 = random_bf16(nc);
    bf16 *dA = to_device(A), *dB = to_device(B), *dC0 = to_device(C0);
    void *out[2], *start;  // the first choice's output, the tuned one's; the starting output
    std::vector<float> C0f(C0.begin(), C0.end());
    CUDA_CHECK(cudaMalloc(&start, nc * esize));
    if (sh.f32)
      CUDA_CHECK(cudaMemcpy(start, C0f.data(), nc * 4, cudaMemcpyHostToDevice));
    else
      CUDA_CHECK(cudaMemcpy(start, dC0, nc * 2, cudaMemcpyDeviceToDevice));
    bf16* dZero;  // a zero A
    CUDA_CHECK(cudaMalloc(&dZero, A.size() * sizeof(bf16)));
    CUDA_CHECK(cudaMemset(dZero, 0, A.size() * sizeof(bf16)));
    std::vector<std::vector<unsigned char>> got[2];
    std::string algo, algo_after_zero;
    auto call = [&](layers::Matmul& mm, const bf16* a, void* o) {
      CUDA_CHECK(cudaMemcpy(o, start, nc * esize, cudaMemcpyDeviceToDevice));
      if (sh.add)
        mm.add(a, dB, dC0, (bf16*)o, sh.m, sh.n, sh.k, sh.ta, sh.tb);
      else
        mm(a, dB, o, sh.m, sh.n, sh.k, sh.ta, sh.tb, sh.acc, sh.f32);
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<unsigned char> h(nc * esize);
      CUDA_CHECK(cudaMemcpy(h.data(), o, h.size(), cudaMemcpyDeviceToHost));
      return h;
    };
    std::vector<unsigned char> zero_product(nc * esize, 0), start_bytes(nc * esize);
    CUDA_CHECK(cudaMemcpy(start_bytes.data(), start, start_bytes.size(), cudaMemcpyDeviceToHost));
    bool zero_ok = false;
    for (int which = 0; which < 2; which++) {
      layers::Matmul mm(32u << 20, which == 0 ? 0 : layers::Matmul::kTuned);
      CUDA_CHECK(cudaMalloc(&out[which], nc * esize));
      if (which == 1) {
        const std::vector<unsigned char> z = call(mm, dZero, out[which]);
        zero_ok = z == (sh.acc || sh.add ? start_bytes : zero_product);  // add(): C0 = start
        algo_after_zero = mm.algorithm(sh.m, sh.n, sh.k, sh.ta, sh.tb, sh.f32, sh.acc || sh.add);
      }
      for (int c = 0; c < 2; c++) got[which].push_back(call(mm, dA, out[which]));
      if (which == 1) algo = mm.algorithm(sh.m, sh.n, sh.k, sh.ta, sh.tb, sh.f32, sh.acc || sh.add);
    }
    const bool same = got[1][0] == got[0][0] && got[1][1] == got[0][0] && got[0][1] == got[0][0];
    CHECK(zero_ok && algo_after_zero.find("first's bits") == std::string::npos, "matmul tuned %s: after a zero A: output %s, plan %s",
          sh.name, zero_ok ? "right" : "WRONG", algo_after_zero.c_str());
    CHECK(same && algo.find("first's bits") != std::string::npos, "matmul tuned %s: the first choice's bits %s (%s)", sh.name,
          same ? "kept" : "NOT kept", algo.c_str());
    std::printf("matmul tuned, %s: a zero product left untuned; bitwise the first choice's; runs %s\n", sh.name, algo.c_str());
    for (void* p : {(void*)dA, (void*)dB, (void*)dC0, (void*)dZero, out[0], out[1], start}) CUDA_CHECK(cudaFree(p));
  }
}

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

// ---- embedding: forward copies rows, backward sums per token deterministically into fp32
static void test_embedding() {
  {
    const int V = 1000, C = 768, T = 4096;
    std::vector<int> tok(T);
    for (int t = 0; t < T; t++) tok[t] = (int)((rng() % 97) * (rng() % 11)) % V;  // heavy repeats
    std::vector<double> table = random_bf16((size_t)V * C), dout = random_bf16((size_t)T * C);
    std::vector<float> dtab0((size_t)V * C);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& v : dtab0) v = nd(rng);
    std::vector<double> want(dtab0.begin(), dtab0.end());
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++) want[(size_t)tok[t] * C + c] += dout[(size_t)t * C + c];
    layers::TokenIndex ix(tok.data(), T, V);
    int *dtok, *dix;
    float* dpart;
    const std::vector<int> packed = ix.packed();
    CHECK(ix.slots() > 0 && ix.slots() <= (int)layers::TokenIndex::max_slots(T) && packed.size() <= layers::TokenIndex::max_packed(T),
          "token index: %d partial-sum slots (frequent tokens cut into chunks of %d), %zu packed ints", ix.slots(),
          layers::TokenIndex::kChunk, packed.size());
    CUDA_CHECK(cudaMalloc(&dtok, T * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&dix, packed.size() * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&dpart, std::max(ix.slots(), 1) * (size_t)C * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dtok, tok.data(), T * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dix, packed.data(), packed.size() * sizeof(int), cudaMemcpyHostToDevice));
    const layers::TokenIndexView ixv(ix, dix, dpart);
    bf16 *dtable = to_device(table), *dout_d = to_device(dout), *demb = poisoned((size_t)T * C);
    CUDA_CHECK(layers::embedding_forward(dtable, dtok, demb, T, C));
    std::vector<double> emb = from_device(demb, (size_t)T * C);
    bool same = true;
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++) same &= emb[(size_t)t * C + c] == table[(size_t)tok[t] * C + c];
    CHECK(same, "embedding forward is not an exact copy of the rows");
    std::vector<float> got[2];
    for (int rep = 0; rep < 2; rep++) {
      float* dg;
      CUDA_CHECK(cudaMalloc(&dg, dtab0.size() * sizeof(float)));
      CUDA_CHECK(cudaMemcpy(dg, dtab0.data(), dtab0.size() * sizeof(float), cudaMemcpyHostToDevice));
      CUDA_CHECK(layers::embedding_backward(dout_d, ixv, dg, C));
      got[rep].resize(dtab0.size());
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaMemcpy(got[rep].data(), dg, dtab0.size() * sizeof(float), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaFree(dg));
    }
    const double e = rel_err(std::vector<double>(got[0].begin(), got[0].end()), want);
    CHECK(e < 1e-5, "embedding backward rel err %.2e", e);
    CHECK(got[0] == got[1], "embedding backward is not deterministic");
    std::printf("embedding: %zu distinct tokens of %d (%d chunk sums of frequent tokens), backward %.2e, deterministic\n",
                ix.unique.size(), T, ix.slots(), e);
    for (void* p : {(void*)dtok, (void*)dix, (void*)dpart, (void*)dtable, (void*)dout_d, (void*)demb}) CUDA_CHECK(cudaFree(p));
  }
}

// ---- Adam against the reference optimiser's Adam group (embed, lr 0.6), three steps
static void test_adam() {
  {
    model_ref::Config cfg;
    cfg.vocab = 64;
    cfg.width = 32;
    cfg.heads = 2;
    cfg.layers = 2;
    cfg.hidden = 64;
    model_ref::Params p(cfg);
    p.init(4, false);
    const model_ref::Tensor& emb = p.t("embed");
    const size_t n = emb.size();
    std::vector<float> hp(p.data.begin() + emb.offset, p.data.begin() + emb.offset + n);
    float *dp, *dg, *dm, *dv;
    for (float** q : {&dp, &dg, &dm, &dv}) CUDA_CHECK(cudaMalloc(q, n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dp, hp.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dm, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(dv, 0, n * sizeof(float)));
    model_ref::OptimizerState st;
    model_ref::Schedule sched;
    for (int step = 0; step < 3; step++) {
      std::vector<double> g(p.data.size());
      std::normal_distribution<double> nd(0, 1);
      for (auto& v : g) v = nd(rng);
      std::vector<float> hg(g.begin() + emb.offset, g.begin() + emb.offset + n);
      model_ref::optimizer_step(p, g, st, step, sched);
      CUDA_CHECK(cudaMemcpy(dg, hg.data(), n * sizeof(float), cudaMemcpyHostToDevice));
      CUDA_CHECK(layers::adam_step(dp, nullptr, dg, dm, dv, n, 0.6f, step + 1));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(hp.data(), dp, n * sizeof(float), cudaMemcpyDeviceToHost));
    double e = 0;
    for (size_t i = 0; i < n; i++) e = std::max(e, std::fabs(hp[i] - p.data[emb.offset + i]));
    CHECK(e < 1e-5, "Adam after three steps: max abs err %.2e", e);
    std::printf("adam: three steps, max abs err %.2e against the fp64 reference\n", e);
    for (void* q : {(void*)dp, (void*)dg, (void*)dm, (void*)dv}) CUDA_CHECK(cudaFree(q));
  }
}

// ---- Muon: one step on fresh momentum, against fp64 and the bf16 emulation
static void test_muon() {
  {
    layers::Matmul mm;
    layers::MuonScratch scratch(512 * 512, 512 * 512);
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
          CUDA_CHECK(layers::muon_step(mm, scratch, dw, nullptr, dg, dbuf, rows, cols, lr, mom));
        } else {  // the three stages the data-parallel optimiser calls, X in a buffer of its own
          bf16* X;
          CUDA_CHECK(cudaMalloc(&X, n * sizeof(bf16)));
          CUDA_CHECK(layers::muon_momentum(scratch, dg, dbuf, n, mom, true));
          CUDA_CHECK(layers::muon_orthogonalize(mm, scratch, X, rows, cols));
          CUDA_CHECK(layers::muon_apply(dw, nullptr, X, rows, cols, lr));
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

// ---- replica checksum: equal to the CPU reference, changed by one flipped bit
static void test_checksum() {
  {
    const size_t n = 3000001;  // not a multiple of the block or grid size
    std::vector<float> h(n);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& v : h) v = nd(rng);
    float* d;
    unsigned long long* dsum;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dsum, sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    unsigned long long g1 = 0, g2 = 0;
    CUDA_CHECK(layers::checksum(d, n * sizeof(float), dsum));
    CUDA_CHECK(cudaMemcpy(&g1, dsum, sizeof(g1), cudaMemcpyDeviceToHost));
    CHECK(g1 == layers::checksum_cpu(h.data(), n * sizeof(float)), "checksum %016llx differs from the CPU reference", g1);
    h[n / 2] = std::nextafter(h[n / 2], 1e30f);  // one bit
    CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(layers::checksum(d, n * sizeof(float), dsum));
    CUDA_CHECK(cudaMemcpy(&g2, dsum, sizeof(g2), cudaMemcpyDeviceToHost));
    CHECK(g2 != g1 && g2 == layers::checksum_cpu(h.data(), n * sizeof(float)), "checksum after a one-bit change: %016llx", g2);
    std::printf("checksum: %016llx, one bit later %016llx (CPU reference agrees)\n", g1, g2);
    CUDA_CHECK(cudaFree(d));
    CUDA_CHECK(cudaFree(dsum));
  }
}

int main() {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("test_layers_gpu: no GPU\n");
    return 1;
  }
  test_rmsnorm();
  test_qk_norm_rotary();
  test_norm_mix();
  test_mix_backward_and_value_embed();
  test_rotary();
  test_relu2();
  test_matmul();
  test_matmul_tuned();
  test_softcap_ce();
  test_embedding();
  test_adam();
  test_muon();
  test_mixes_and_dot();
  test_checksum();
  return test_summary("layers-gpu");
}
