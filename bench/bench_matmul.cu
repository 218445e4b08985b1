// The model's matrix products at the speedrun's shape, one by one: how fast cuBLASLt's first
// heuristic choice (what train_gpt runs) is for each, and whether another of its choices is
// faster.
//
//   bench_matmul [--T 65536] [--width 768] [--hidden 3072] [--vocab 50304] [--head-chunk 16384]
//                [--micro-steps 8] [--layers 12] [--ranks 8]
//
// Each product is the call layers::Matmul makes in model/gpt.cuh (forward y = x W, with the
// residual add where the model has one; dX = dy W^T; dW += x^T dy in fp32), on fresh random
// bf16 inputs (normal, std 1). FLOPs 2 m n k; a call's time is the median of 10 after 3 warm-up
// calls, timed with CUDA events. "calls a step" counts one training step of the speedrun preset
// on one GPU (micro-steps x layers for a block's products, micro-steps x T / head-chunk for the
// head's), so ms a step = calls x time: the matmul rows of train_gpt --profile should read
// about the same. For ranks 1 .. ranks-1 (cuBLASLt's later heuristic choices) the best time is
// shown with its algorithm, and the step time it would save.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/cuda_check.h"
#include "layers/matmul.cuh"

typedef __nv_bfloat16 bf16;

// x[i] = a normal-ish value from a hash of (seed, i): the sum of four uniforms, centred and scaled
__global__ void fill_kernel(bf16* x, size_t n, unsigned seed) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (unsigned r = 0; r < 4; r++) {
      unsigned h = (unsigned)i * 2654435761u ^ (seed * 4 + r) * 2246822519u;
      h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
      s += h * (1.f / 4294967296.f);
    }
    x[i] = __float2bfloat16((s - 2.f) * 1.7320508f);  // var of the sum of 4 U(0,1) is 1/3
  }
}

struct Product {
  const char* name;
  int m, n, k;
  bool trans_a, trans_b, accumulate, c_fp32, add;
  long long calls;
};

static int run(int argc, char** argv) {
  int T = 65536, C = 768, F = 3072, V = 50304, chunk = 16384, micro = 8, L = 12, ranks = 8;
  CLI::App app{"bench_matmul: the model's matrix products through cuBLASLt, and cuBLASLt's other choices for them"};
  cli::integer(app, "--T", T, 8, 1 << 20, "tokens a micro-step")->capture_default_str();
  cli::integer(app, "--width", C, 8, 1 << 14, "model width C")->capture_default_str();
  cli::integer(app, "--hidden", F, 8, 1 << 16, "MLP width")->capture_default_str();
  cli::integer(app, "--vocab", V, 8, 1 << 20, "vocabulary (padded)")->capture_default_str();
  cli::integer(app, "--head-chunk", chunk, 8, 1 << 20, "rows of the lm head at once")->capture_default_str();
  cli::integer(app, "--micro-steps", micro, 1, 1 << 10, "micro-steps a step")->capture_default_str();
  cli::integer(app, "--layers", L, 1, 1 << 10, "layers")->capture_default_str();
  cli::integer(app, "--ranks", ranks, 1, 16, "cuBLASLt heuristic choices to try")->capture_default_str();
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
  // name, m, n, k, trans_a, trans_b, accumulate, c_fp32, add, calls a step
  const std::vector<Product> products = {
      {"q, k, v = h W", T, C, C, false, false, false, false, false, 3 * blk},
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
  size_t max_ab = 0, max_c = 0;
  for (const Product& p : products) {
    max_ab = std::max({max_ab, (size_t)p.m * p.k, (size_t)p.k * p.n});
    max_c = std::max(max_c, (size_t)p.m * p.n);
  }
  bf16 *A, *B, *Cin;
  float* C32;
  CUDA_CHECK(cudaMalloc(&A, max_ab * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&B, max_ab * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&Cin, max_c * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&C32, max_c * sizeof(float)));
  fill_kernel<<<1024, 256>>>(A, max_ab, 1);
  fill_kernel<<<1024, 256>>>(B, max_ab, 2);
  fill_kernel<<<1024, 256>>>(Cin, max_c, 3);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemset(C32, 0, max_c * sizeof(float)));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));

  // time of one call of p through mm, or a negative number when mm's rank is not offered
  auto time_it = [&](layers::Matmul& mm, const Product& p, std::string* algo) -> double {
    try {
      *algo = mm.algorithm(p.m, p.n, p.k, p.trans_a, p.trans_b, p.c_fp32);
    } catch (const std::runtime_error&) {
      return -1;
    }
    void* out = p.c_fp32 ? (void*)C32 : (void*)Cin;
    std::vector<float> ms;
    for (int it = 0; it < 13; it++) {
      CUDA_CHECK(cudaEventRecord(e0));
      if (p.add)
        mm.add(A, B, Cin, Cin, p.m, p.n, p.k, p.trans_a, p.trans_b);
      else
        mm(A, B, out, p.m, p.n, p.k, p.trans_a, p.trans_b, p.accumulate, p.c_fp32);
      CUDA_CHECK(cudaEventRecord(e1));
      CUDA_CHECK(cudaEventSynchronize(e1));
      float t;
      CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      if (it >= 3) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  std::vector<layers::Matmul*> mms;
  for (int r = 0; r < ranks; r++) mms.push_back(new layers::Matmul(32u << 20, r));
  std::printf("device: %s; T=%d C=%d hidden=%d vocab=%d head chunk=%d; %d micro-steps x %d layers a step\n", prop.name, T, C, F, V,
              chunk, micro, L);
  std::printf("%-24s %6s %6s %6s %6s %9s %8s %9s | %9s %8s %9s  %s\n", "product", "m", "n", "k", "calls", "ms", "TFLOP/s", "ms/step",
              "best ms", "TFLOP/s", "saves ms", "best of the other choices");
  double total = 0, total_best = 0;
  for (const Product& p : products) {
    std::string a0, best_algo = "-";
    const double t0 = time_it(*mms[0], p, &a0);
    if (t0 < 0) {
      std::fprintf(stderr, "bench_matmul: %s: cuBLASLt offers no algorithm\n", p.name);
      return 1;
    }
    double best = t0;
    for (int r = 1; r < ranks; r++) {
      std::string a;
      const double t = time_it(*mms[r], p, &a);
      if (t > 0 && t < best) best = t, best_algo = a;
    }
    const double flop = 2.0 * p.m * p.n * p.k;
    total += t0 * p.calls, total_best += best * p.calls;
    std::printf("%-24s %6d %6d %6d %6lld %9.4f %8.1f %9.2f | %9.4f %8.1f %9.2f  %s\n", p.name, p.m, p.n, p.k, p.calls, t0,
                flop / (t0 * 1e-3) / 1e12, t0 * p.calls, best, flop / (best * 1e-3) / 1e12, (t0 - best) * p.calls, best_algo.c_str());
    std::printf("%-24s %s\n", "", a0.c_str());
  }
  std::printf("all products: %.1f ms a step with the first choices, %.1f ms with the best of %d\n", total, total_best, ranks);
  for (auto* m : mms) delete m;
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_matmul: %s\n", e.what());
    return 1;
  }
}
