// The model's matrix products at the speedrun's shape, one by one, with three choices of
// cuBLASLt algorithm: its heuristic's first, the tuned one train_gpt runs (layers/matmul.cuh:
// the fastest of the first kCandidates that gives the first's bits), and the fastest of the
// first --ranks whatever its bits (what a choice free to change the numbers could gain).
//
//   bench_matmul [--T 65536] [--width 768] [--hidden 3072] [--vocab 50304] [--head-chunk 16384]
//                [--micro-steps 8] [--layers 12] [--ranks 8] [--mlp-only] [--head-only] [--qkv-only]
//
// Each product is the call layers::Matmul makes in model/gpt.cuh (forward y = x W, with the
// residual add where the model has one; dX = dy W^T; dW += x^T dy in fp32), on fresh random
// bf16 inputs (bench/fill.cuh: unit variance). FLOPs 2 m n k; a call's time is the median of 10 after 3 warm-up
// calls, timed with CUDA events. "calls a step" counts one training step of the speedrun preset
// on one GPU (micro-steps x layers for a block's products, micro-steps x T / head-chunk for the
// head's), so ms a step = calls x time: the matmul rows of train_gpt --profile should read
// about the same. The q, k and v projections run as one batched call (three products sharing h,
// layers::Batch) and their weight gradients as three calls, as the model makes them; after the
// totals, each the other way, for comparison. A call's time includes its launch, so short
// calls read slower here than in the step. Each choice's algorithm is listed after the table.
// On Hopper a last table compares the MLP's products with ReLU^2 in their epilogue
// (gemm/epilogue_relu2.cuh, what train_gpt runs there) against the tuned product and relu2.cuh's pass,
// and another the lm head's product with the cross-entropy's first pass in its epilogue
// (gemm/epilogue_softcap_ce.cuh) against the tuned product and softcap_ce.cuh, and another the q, k, v
// product with q and k's norm + rotary in its epilogue (gemm/epilogue_qk_norm_rotary.cuh)
// against the tuned batched product and qk_norm_rotary.cuh's pass.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/cli.h"
#include "common/cuda_check.h"
#include "bench/fill.cuh"
#include "gemm/head_ce.cuh"
#include "layers/matmul.cuh"
#include "gemm/gemm.cuh"
#include "layers/qk_norm_rotary.cuh"
#include "layers/relu2.cuh"
#include "layers/softcap_ce.cuh"

typedef __nv_bfloat16 bf16;

struct Product {
  const char* name;
  int m, n, k;
  bool trans_a, trans_b, accumulate, c_fp32, add;
  long long calls;
  layers::Batch batch = {};  // products of one call (A shared): the q, k, v projections
};

// ms of one call of f, by the events e0, e1
static double time_call(const std::function<void()>& f, cudaEvent_t e0, cudaEvent_t e1) {
  CUDA_CHECK(cudaEventRecord(e0));
  f();
  CUDA_CHECK(cudaEventRecord(e1));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float t;
  CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
  return (double)t;
}

// The medians of 10 calls of each of f and g after 3 warm-ups, the two alternating
static std::pair<double, double> median_pair(const std::function<void()>& f, const std::function<void()>& g, cudaEvent_t e0,
                                             cudaEvent_t e1) {
  std::vector<double> ta, tb;
  for (int it = 0; it < 13; it++) {
    const double a = time_call(f, e0, e1), b = time_call(g, e0, e1);
    if (it >= 3) ta.push_back(a), tb.push_back(b);
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

// The MLP's activation fused into its products (gemm/epilogue_relu2.cuh) against the products
// through cuBLASLt (tuned) followed by relu2.cuh's pass, on the same operands: each side's time
// a call (the median of 10 after 3 warm-ups, alternating the two sides) and the relative
// difference of their outputs (the order of the fp32 sums differs; each is one bf16 rounding
// from the other, about 1e-3 to 3e-3).
static void fused_mlp(int T, int C, int F, long long calls, layers::Matmul& mm, bf16* A, bf16* B, cudaEvent_t e0, cudaEvent_t e1) {
  const size_t TF = (size_t)T * F;
  bf16 *u, *r1, *r2, *du1, *du2;
  for (bf16** p : {&u, &r1, &r2, &du1, &du2}) CUDA_CHECK(cudaMalloc(p, TF * sizeof(bf16)));
  // h = A [T][C]; Wfc = B [C][F]; dx = A; Wproj = B [F][C]; r from the forward (r1)
  auto unfused_fwd = [&] {
    mm.xW(A, B, u, T, C, F);
    CUDA_CHECK(layers::relu2_forward(u, r1, TF));
  };
  auto fused_fwd = [&] { CUDA_CHECK(gemm::mlp_up_relu2(A, B, r2, T, C, F)); };
  auto unfused_bwd = [&] {
    mm.dX(A, B, u, T, F, C);
    CUDA_CHECK(layers::relu2_backward_from_r(r1, u, du1, TF));
  };
  auto fused_bwd = [&] { CUDA_CHECK(gemm::mlp_down_dx_relu2(A, B, r1, du2, T, C, F)); };
  auto rel_diff = [&](const bf16* x, const bf16* y) {
    std::vector<bf16> hx(TF), hy(TF);
    CUDA_CHECK(cudaMemcpy(hx.data(), x, TF * sizeof(bf16), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hy.data(), y, TF * sizeof(bf16), cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t i = 0; i < TF; i++) {
      const double a = __bfloat162float(hx[i]), b = __bfloat162float(hy[i]);
      num += (a - b) * (a - b), den += b * b;
    }
    return std::sqrt(num / den);
  };
  const double tf = 2.0 * T * C * F / 1e9;
  std::printf("\nthe MLP's activation inside its products (gemm/epilogue_relu2.cuh) against cuBLASLt (tuned) + relu2.cuh:\n");
  std::printf("%-34s %9s %9s %9s | %9s %9s %9s | %9s %9s\n", "product", "apart ms", "TFLOP/s", "ms/step", "fused ms", "TFLOP/s",
              "ms/step", "saved/step", "rel diff");
  const char* names[2] = {"r = relu(h Wfc)^2", "du = 2 sqrt(r) (dx Wproj^T)"};
  for (int which = 0; which < 2; which++) {
    const std::function<void()> apart = which ? std::function<void()>(unfused_bwd) : std::function<void()>(unfused_fwd);
    const std::function<void()> fused = which ? std::function<void()>(fused_bwd) : std::function<void()>(fused_fwd);
    const auto [a, b] = median_pair(apart, fused, e0, e1);
    const double d = which ? rel_diff(du2, du1) : rel_diff(r2, r1);
    std::printf("%-34s %9.4f %9.1f %9.2f | %9.4f %9.1f %9.2f | %9.2f %9.1e\n", names[which], a, tf / a, a * calls, b, tf / b, b * calls,
                (a - b) * calls, d);
  }
  for (bf16* p : {u, r1, r2, du1, du2}) CUDA_CHECK(cudaFree(p));
}

// The lm head's product with the cross-entropy's first pass in its epilogue and its finalize
// (gemm/epilogue_softcap_ce.cuh and gemm/head_ce.cuh, with the backward's outputs: g, the row scales and diag(c) h) against the
// tuned product z = h Whead followed by softcap_ce.cuh (dz over z), on one chunk of rows with
// random targets: each side's time a call (median of 10 after 3 warm-ups, alternating), the
// largest relative difference of the rows' losses, and the relative difference of dz (the
// fused side's c g) over the first 256 rows.
static void fused_head(int rows, int C, int V, long long calls, layers::Matmul& mm, bf16* A, bf16* B, cudaEvent_t e0, cudaEvent_t e1) {
  const size_t RV = (size_t)rows * V;
  bf16 *z, *g, *hs;
  float *scratch, *c, *loss1, *loss2;
  int *tg, *bad;
  CUDA_CHECK(cudaMalloc(&z, RV * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&g, RV * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&hs, (size_t)rows * C * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&scratch, gemm::head_ce_scratch_floats(rows, V) * sizeof(float)));
  for (float** p : {&c, &loss1, &loss2}) CUDA_CHECK(cudaMalloc(p, rows * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&tg, rows * sizeof(int)));
  CUDA_CHECK(cudaMalloc(&bad, sizeof(int)));
  CUDA_CHECK(cudaMemset(bad, 0, sizeof(int)));
  std::vector<int> htg(rows);
  for (int r = 0; r < rows; r++) htg[r] = (int)((r * 2654435761u) % (unsigned)V);
  CUDA_CHECK(cudaMemcpy(tg, htg.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
  const float gs = 1.f / rows;
  auto apart = [&] {
    mm.xW(A, B, z, rows, C, V);
    CUDA_CHECK(layers::softcap_ce(z, tg, z, loss1, rows, V, gs, bad));
  };
  auto fused = [&] {
    CUDA_CHECK(gemm::head_ce_forward(A, B, tg, g, scratch, rows, C, V));
    CUDA_CHECK(gemm::head_ce_finalize(scratch, tg, A, g, hs, c, loss2, rows, C, V, gs, bad));
  };
  const auto [a, b] = median_pair(apart, fused, e0, e1);
  std::vector<float> l1(rows), l2(rows), hc(rows);
  CUDA_CHECK(cudaMemcpy(l1.data(), loss1, rows * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(l2.data(), loss2, rows * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(hc.data(), c, rows * sizeof(float), cudaMemcpyDeviceToHost));
  double ldiff = 0;
  for (int r = 0; r < rows; r++) ldiff = std::max(ldiff, (double)std::fabs(l1[r] - l2[r]) / std::fabs(l1[r]));
  const size_t n = (size_t)std::min(rows, 256) * V;
  std::vector<bf16> hz(n), hg(n);
  CUDA_CHECK(cudaMemcpy(hz.data(), z, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(hg.data(), g, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    const double x = __bfloat162float(hz[i]), y = (double)hc[i / V] * __bfloat162float(hg[i]);
    num += (x - y) * (x - y), den += x * x;
  }
  const double tf = 2.0 * rows * C * V / 1e9;
  std::printf("\nthe lm head's cross-entropy inside its product (gemm/epilogue_softcap_ce.cuh) against cuBLASLt (tuned) + softcap_ce.cuh,\n"
              "%d rows, %lld calls a step:\n", rows, calls);
  std::printf("%-34s %9s %9s %9s | %9s %9s %9s | %9s %9s %9s\n", "product + cross-entropy", "apart ms", "TFLOP/s", "ms/step", "fused ms",
              "TFLOP/s", "ms/step", "saved/step", "loss diff", "dz diff");
  std::printf("%-34s %9.4f %9.1f %9.2f | %9.4f %9.1f %9.2f | %9.2f %9.1e %9.1e\n", "z = h Whead, CE (dz or g, c, hs)", a, tf / a, a * calls,
              b, tf / b, b * calls, (a - b) * calls, ldiff, std::sqrt(num / den));
  for (void* p : {(void*)z, (void*)g, (void*)hs, (void*)scratch, (void*)c, (void*)loss1, (void*)loss2, (void*)tg, (void*)bad})
    CUDA_CHECK(cudaFree(p));
}

// q, k, v = h [Wq Wk Wv] with q and k's per-head norm + rotary in the product's epilogue
// (gemm/epilogue_qk_norm_rotary.cuh) against the tuned batched product (the model's call)
// followed by qk_norm_rotary.cuh's pass in place, on the same operands (head dim 128): each
// side's time a call (median of 10 after 3 warm-ups, alternating) and the relative difference of
// qn, kn, v and of rstd (the fused side's angles are fp16 pairs: about 1e-3 to 3e-3).
static void fused_qkv(int T, int C, long long calls, layers::Matmul& mm, bf16* A, bf16* B, cudaEvent_t e0, cudaEvent_t e1) {
  const int D = 128, H = C / D;
  const size_t TC = (size_t)T * C, TH = (size_t)T * H;
  if (!gemm::qkv_norm_rotary_shape(C, D)) {
    std::printf("\nq, k, v with the norm + rotary fused: width %d is not a multiple of 256, skipped\n", C);
    return;
  }
  bf16 *o1, *o2;
  float *r1, *r2;
  float2* tab;
  uint32_t* ang;
  for (bf16** p : {&o1, &o2}) CUDA_CHECK(cudaMalloc(p, 3 * TC * sizeof(bf16)));
  for (float** p : {&r1, &r2}) CUDA_CHECK(cudaMalloc(p, 2 * TH * sizeof(float)));
  const std::vector<float2> t32 = layers::rotary_table(T, D);
  const std::vector<uint32_t> t16 = gemm::rotary_angles_fp16(T, D);
  CUDA_CHECK(cudaMalloc(&tab, t32.size() * sizeof(float2)));
  CUDA_CHECK(cudaMalloc(&ang, t16.size() * sizeof(uint32_t)));
  CUDA_CHECK(cudaMemcpy(tab, t32.data(), t32.size() * sizeof(float2), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(ang, t16.data(), t16.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
  const float eps = 1.f / 128;
  auto apart = [&] {
    mm.xW_batched(A, B, (long long)C * C, o1, (long long)TC, 3, T, C, C);
    CUDA_CHECK(layers::qk_norm_rotary_forward({o1, o1 + TC}, {o1, o1 + TC}, {r1, r1 + TH}, tab, T, H, D, eps));
  };
  auto fused = [&] { CUDA_CHECK(gemm::qkv_norm_rotary(A, B, o2, r2, ang, T, C, D, eps)); };
  const auto [a, b] = median_pair(apart, fused, e0, e1);
  std::vector<bf16> h1(3 * TC), h2(3 * TC);
  std::vector<float> s1(2 * TH), s2(2 * TH);
  CUDA_CHECK(cudaMemcpy(h1.data(), o1, h1.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(h2.data(), o2, h2.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(s1.data(), r1, s1.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(s2.data(), r2, s2.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double num = 0, den = 0, rmax = 0;
  for (size_t i = 0; i < h1.size(); i++) {
    const double x = __bfloat162float(h2[i]), y = __bfloat162float(h1[i]);
    num += (x - y) * (x - y), den += y * y;
  }
  for (size_t i = 0; i < s1.size(); i++) rmax = std::max(rmax, (double)std::fabs(s2[i] - s1[i]) / s1[i]);
  const double tf = 2.0 * T * C * 3 * C / 1e9;
  std::printf("\nq, k, v with q and k's norm + rotary in the product's epilogue (gemm/epilogue_relu2.cuh) against cuBLASLt (tuned,\n"
              "batched) + qk_norm_rotary.cuh (head dim %d):\n", D);
  std::printf("%-34s %9s %9s %9s | %9s %9s %9s | %9s %9s %9s\n", "product", "apart ms", "TFLOP/s", "ms/step", "fused ms", "TFLOP/s",
              "ms/step", "saved/step", "rel diff", "rstd diff");
  std::printf("%-34s %9.4f %9.1f %9.2f | %9.4f %9.1f %9.2f | %9.2f %9.1e %9.1e\n", "q, k, v = h W, q, k normed", a, tf / a, a * calls,
              b, tf / b, b * calls, (a - b) * calls, std::sqrt(num / den), rmax);
  for (void* p : {(void*)o1, (void*)o2, (void*)r1, (void*)r2, (void*)tab, (void*)ang}) CUDA_CHECK(cudaFree(p));
}

static int run(int argc, char** argv) {
  int T = 65536, C = 768, F = 3072, V = 50304, chunk = 16384, micro = 8, L = 12, ranks = 8;
  bool mlp_only = false, head_only = false, qkv_only = false;
  CLI::App app{"bench_matmul: the model's matrix products through cuBLASLt, and cuBLASLt's other choices for them"};
  cli::integer(app, "--T", T, 8, 1 << 20, "tokens a micro-step")->capture_default_str();
  cli::integer(app, "--width", C, 8, 1 << 14, "model width C")->capture_default_str();
  cli::integer(app, "--hidden", F, 8, 1 << 16, "MLP width")->capture_default_str();
  cli::integer(app, "--vocab", V, 8, 1 << 20, "vocabulary (padded)")->capture_default_str();
  cli::integer(app, "--head-chunk", chunk, 8, 1 << 20, "rows of the lm head at once")->capture_default_str();
  cli::integer(app, "--micro-steps", micro, 1, 1 << 10, "micro-steps a step")->capture_default_str();
  cli::integer(app, "--layers", L, 1, 1 << 10, "layers")->capture_default_str();
  cli::integer(app, "--ranks", ranks, 1, 16, "cuBLASLt heuristic choices to try")->capture_default_str();
  app.add_flag("--mlp-only", mlp_only, "only the table of the MLP's products with ReLU^2 fused, against them apart");
  app.add_flag("--head-only", head_only, "only the table of the lm head's product with the cross-entropy fused, against them apart");
  app.add_flag("--qkv-only", qkv_only, "only the table of the q, k, v product with q and k's norm + rotary fused, against them apart");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (int d : {T, C, F, V, chunk})
    if (d % 8) {
      std::fprintf(stderr, "bench_matmul: every dimension must be a multiple of 8 (cuBLASLt), got %d\n", d);
      return 2;
    }
  chunk = std::min(chunk, T);
  const long long blk = (long long)micro * L, head = (long long)micro * ((T + chunk - 1) / chunk);
  const layers::Batch qkv_fwd{3, 0, (long long)C * C, (long long)T * C}, qkv_dw{3, 0, (long long)T * C, (long long)C * C};
  // (the model runs the q, k, v weight gradients as three calls: in the step the batched call,
  // without split-K, took longer; it is listed after the totals)
  // name, m, n, k, trans_a, trans_b, accumulate, c_fp32, add, calls a step[, batch]
  const std::vector<Product> products = {
      {"q, k, v = h W (1 call)", T, C, C, false, false, false, false, false, blk, qkv_fwd},
      {"x + y Wo", T, C, C, false, false, false, false, true, blk},
      {"u = h Wfc", T, F, C, false, false, false, false, false, blk},
      {"x + r Wproj", T, C, F, false, false, false, false, true, blk},
      {"Wproj dX", T, F, C, false, true, false, false, false, blk},
      {"Wproj dW", F, C, T, true, false, true, true, false, blk},
      {"Wfc dX", T, C, F, false, true, false, false, false, blk},
      {"Wfc dW", C, F, T, true, false, true, true, false, blk},
      {"Wo, Wq dX", T, C, C, false, true, false, false, false, 2 * blk},
      {"Wk, Wv dX (accumulate)", T, C, C, false, true, true, false, false, 2 * blk},
      {"Wo, Wq, Wk, Wv dW", C, C, T, true, false, true, true, false, 4 * blk},
      {"z = h Whead", chunk, V, C, false, false, false, false, false, head},
      {"head dX", chunk, C, V, false, true, false, false, false, head},
      {"head dW", C, V, chunk, true, false, true, true, false, head},
  };
  // the other way of each q, k, v product, for comparison (not in the totals)
  const std::vector<Product> apart = {
      {"q, k, v = h W (3 calls)", T, C, C, false, false, false, false, false, 3 * blk},
      {"Wq, Wk, Wv dW (1 call)", C, C, T, true, false, true, true, false, blk, qkv_dw},
  };
  std::vector<Product> all = products;
  all.insert(all.end(), apart.begin(), apart.end());
  size_t max_ab = 0, max_c = 0;
  for (const Product& p : all) {
    const size_t items = p.batch.count - 1;
    max_ab = std::max({max_ab, (size_t)p.m * p.k + items * (size_t)p.batch.a, (size_t)p.k * p.n + items * (size_t)p.batch.b});
    max_c = std::max(max_c, (size_t)p.m * p.n + items * (size_t)p.batch.c);
  }
  bf16 *A, *B, *Cin;
  float* C32;
  CUDA_CHECK(cudaMalloc(&A, max_ab * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&B, max_ab * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&Cin, max_c * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&C32, max_c * sizeof(float)));
  CUDA_CHECK(bench::fill_random(A, max_ab, 1));
  CUDA_CHECK(bench::fill_random(B, max_ab, 2));
  CUDA_CHECK(bench::fill_random(Cin, max_c, 3));
  CUDA_CHECK(cudaMemset(C32, 0, max_c * sizeof(float)));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));

  // time of one call of p through mm (the median of 10 after 3 warm-up calls, the first of
  // which tunes a kTuned Matmul), or a negative number when mm's choice is not offered
  auto time_it = [&](layers::Matmul& mm, const Product& p, std::string* algo) -> double {
    try {
      mm.algorithm(p.m, p.n, p.k, p.trans_a, p.trans_b, p.c_fp32, p.accumulate || p.add, p.batch);  // builds the plan
    } catch (const std::runtime_error&) {
      return -1;  // cuBLASLt offers fewer choices than mm's rank
    }
    void* out = p.c_fp32 ? (void*)C32 : (void*)Cin;
    std::vector<float> ms;
    for (int it = 0; it < 13; it++) {
      CUDA_CHECK(cudaEventRecord(e0));
      if (p.add)
        mm.add(A, B, Cin, Cin, p.m, p.n, p.k, p.trans_a, p.trans_b);
      else if (p.batch.count > 1)
        mm.batched(A, B, out, p.m, p.n, p.k, p.trans_a, p.trans_b, p.accumulate, p.c_fp32, p.batch);
      else
        mm(A, B, out, p.m, p.n, p.k, p.trans_a, p.trans_b, p.accumulate, p.c_fp32);
      CUDA_CHECK(cudaEventRecord(e1));
      CUDA_CHECK(cudaEventSynchronize(e1));
      float t;
      CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      if (it >= 3) ms.push_back(t);
    }
    *algo = mm.algorithm(p.m, p.n, p.k, p.trans_a, p.trans_b, p.c_fp32, p.accumulate || p.add, p.batch);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  layers::Matmul first(32u << 20, 0), tuned(32u << 20, layers::Matmul::kTuned);
  if (mlp_only || head_only || qkv_only) {
    if (!gemm::available()) {
      std::fprintf(stderr, "bench_matmul: --mlp-only, --head-only and --qkv-only need an sm90 device (the fused products are Hopper's)\n");
      return 1;
    }
    std::printf("device: %s; T=%d C=%d hidden=%d vocab=%d head chunk=%d\n", prop.name, T, C, F, V, chunk);
    if (mlp_only) fused_mlp(T, C, F, blk, tuned, A, B, e0, e1);
    if (head_only) fused_head(chunk, C, V, head, tuned, A, B, e0, e1);
    if (qkv_only) fused_qkv(T, C, blk, tuned, A, B, e0, e1);
    return 0;
  }
  std::vector<layers::Matmul*> others;
  for (int r = 1; r < ranks; r++) others.push_back(new layers::Matmul(32u << 20, r));
  std::printf("device: %s; T=%d C=%d hidden=%d vocab=%d head chunk=%d; %d micro-steps x %d layers a step\n", prop.name, T, C, F, V,
              chunk, micro, L);
  std::printf("first: cuBLASLt's first heuristic choice; tuned: what train_gpt runs (the fastest of the first %d choices with the\n"
              "first's bits); any: the fastest of the first %d choices whatever its bits. ms: one call; ms/step: calls x ms\n",
              layers::Matmul::kCandidates, ranks);
  std::printf("%-24s %6s %6s %6s %6s | %8s %7s %8s | %8s %7s %8s | %8s %7s %8s\n", "product", "m", "n", "k", "calls", "first ms",
              "TFLOP/s", "ms/step", "tuned ms", "TFLOP/s", "ms/step", "any ms", "TFLOP/s", "ms/step");
  double total[3] = {0, 0, 0};
  std::vector<std::string> algos;
  for (size_t i_p = 0; i_p < all.size(); i_p++) {
    const Product& p = all[i_p];
    const bool in_model = i_p < products.size();
    if (i_p == products.size()) std::printf("the q, k, v products the other way (not in the totals):\n");
    std::string a_first, a_tuned, a_any = "(the first)", a;
    const double t_first = time_it(first, p, &a_first), t_tuned = time_it(tuned, p, &a_tuned);
    double t_any = t_first;
    for (auto* mm : others) {
      const double t = time_it(*mm, p, &a);
      if (t > 0 && t < t_any) t_any = t, a_any = a;
    }
    const double tf = 2.0 * p.m * p.n * p.k * p.batch.count / 1e9;  // GFLOP: / ms gives TFLOP/s
    const double t[3] = {t_first, t_tuned, t_any};
    std::printf("%-24s %6d %6d %6d %6lld", p.name, p.m, p.n, p.k, p.calls);
    for (int i = 0; i < 3; i++) {
      if (in_model) total[i] += t[i] * p.calls;
      std::printf(" | %8.4f %7.1f %8.2f", t[i], tf / t[i], t[i] * p.calls);
    }
    std::printf("\n");
    algos.push_back(std::string(p.name) + ": first " + a_first + "; tuned " + a_tuned + "; any " + a_any);
  }
  std::printf("all products, ms a step: first %.1f, tuned %.1f, any %.1f\n", total[0], total[1], total[2]);
  for (const std::string& s : algos) std::printf("  %s\n", s.c_str());
  for (auto* m : others) delete m;
  if (gemm::available()) fused_mlp(T, C, F, blk, tuned, A, B, e0, e1);
  if (gemm::available()) fused_head(chunk, C, V, head, tuned, A, B, e0, e1);
  if (gemm::available()) fused_qkv(T, C, blk, tuned, A, B, e0, e1);
  return 0;
}

// The build's commit and source digest (build/version.cpp, made by the Makefile), the log's first
// line, so that a log names the code it measured.
extern const char* const kGitCommit;
extern const char* const kSourceDigest;

int main(int argc, char** argv) {
  try {
    std::printf("bench_matmul %s source:%s\n", kGitCommit, kSourceDigest);
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_matmul: %s\n", e.what());
    return 1;
  }
}
