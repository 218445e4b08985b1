// Attention benchmark at the docs/model.md shapes: B=1, H=6, T=65536, D=128, bf16.
// Times forward and forward+backward with CUDA events (3 warm-up calls, median of 20, three
// input sets rotated so that L2 does not hold the inputs), and reports useful TFLOP/s counting
// only kept pairs: forward 4*D*pairs*H, backward 2.5x that. Writes one JSON object per case to
// bench_attention.json (or argv[1]) for bench/compare_flex.py.
// Documents (mean length 1000): lengths 500 + (i * 7919) % 1001, the same rule as compare_flex.py.
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "common/cuda_check.h"


typedef __nv_bfloat16 bf16;

struct BenchCase {
  const char* name;
  int window;
  bool blocks, bidir, docs;
};

static std::vector<int32_t> bench_docs(int T) {
  std::vector<int32_t> d(T);
  int id = 0, left = 0;
  for (int t = 0; t < T; t++) {
    if (!left) left = 500 + (id * 7919) % 1001, id++;
    d[t] = id;
    left--;
  }
  return d;
}

// kept pairs of a causal mask with the given window and documents (every term is an interval)
static double kept_pairs(int T, const BenchCase& c, const std::vector<int32_t>& doc) {
  double pairs = 0;
  int doc_start = 0;
  for (int q = 0; q < T; q++) {
    if (q && doc[q] != doc[q - 1]) doc_start = q;
    int lo = 0;
    if (c.window && !c.blocks) lo = std::max(lo, q - c.window + 1);
    if (c.window && c.blocks) lo = std::max(lo, (q / 128 - c.window + 1) * 128);
    if (c.docs) lo = std::max(lo, doc_start);
    pairs += q - lo + 1;
  }
  return pairs;
}

static int run(int argc, char** argv) {
  const int T = 65536, H = 6, D = 128, kSets = 3, kWarm = 3, kReps = 20;
  const char* json_path = argc > 1 ? argv[1] : "bench_attention.json";
  if (const char* k = std::getenv("ATTN_KERNELS"); k && std::string(k) == "sm80") {  // to compare the two families
    attn::KernelChoice c;
    c.family = attn::KernelChoice::Family::kSm80;
    attn::set_kernel_choice(c);
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t n = (size_t)T * H * D;
  struct Set { bf16 *q, *k, *v, *o, *dout, *dq, *dk, *dv; float* lse; void* ws; } sets[kSets];
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<bf16> host(n);
  for (auto& s : sets) {
    for (bf16** p : {&s.q, &s.k, &s.v, &s.dout}) {
      for (auto& e : host) e = __float2bfloat16(nd(rng));
      CUDA_CHECK(cudaMalloc(p, n * sizeof(bf16)));
      CUDA_CHECK(cudaMemcpy(*p, host.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
    }
    for (bf16** p : {&s.o, &s.dq, &s.dk, &s.dv}) CUDA_CHECK(cudaMalloc(p, n * sizeof(bf16)));
    CUDA_CHECK(cudaMalloc(&s.lse, (size_t)H * T * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&s.ws, attn::backward_workspace_bytes(T, H, D)));
  }
  std::vector<int32_t> doc = bench_docs(T);
  int32_t* ddoc;
  CUDA_CHECK(cudaMalloc(&ddoc, T * sizeof(int32_t)));
  CUDA_CHECK(cudaMemcpy(ddoc, doc.data(), T * sizeof(int32_t), cudaMemcpyHostToDevice));

  const BenchCase cases[] = {
      {"causal + window 128", 128, false, false, false},   {"causal + window 128 + docs", 128, false, false, true},
      {"causal + window 1024", 1024, false, false, false}, {"causal + window 1024 + docs", 1024, false, false, true},
      {"causal + window 1792", 1792, false, false, false}, {"causal + window 1792 + docs", 1792, false, false, true},
      {"causal, no window", 0, false, false, false},       {"causal + 8 blocks uni + docs", 8, true, false, true},
      {"causal + 8 blocks bi + docs", 8, true, true, true},
  };
  FILE* js = std::fopen(json_path, "w");
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  std::printf("device: %s, T=%d H=%d D=%d bf16\n", prop.name, T, H, D);
  std::printf("%-30s %10s %9s %12s %9s\n", "mask", "fwd ms", "fwd TF/s", "fwd+bwd ms", "f+b TF/s");
  const char* only = std::getenv("BENCH_ONLY");  // run just the case of this name (for profiling)
  for (const auto& c : cases) {
    if (only && std::string(only) != c.name) continue;
    attn::MaskDesc m;
    m.causal = true;
    m.window = c.window;
    m.window_blocks = c.blocks;
    m.window_bidir = c.bidir;
    m.doc_ids = c.docs ? ddoc : nullptr;
    const double pairs = kept_pairs(T, c, doc), fwd_flops = 4.0 * D * pairs * H;
    auto time_it = [&](bool backward) {
      std::vector<float> ms;
      for (int it = 0; it < kWarm + kReps; it++) {
        Set& s = sets[it % kSets];
        CUDA_CHECK(cudaEventRecord(e0));
        CUDA_CHECK(attn::attention_forward(s.q, s.k, s.v, s.o, s.lse, T, H, D, m));
        if (backward) CUDA_CHECK(attn::attention_backward(s.q, s.k, s.v, s.o, s.dout, s.lse, s.dq, s.dk, s.dv, s.ws, T, H, D, m));
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float t;
        CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        if (it >= kWarm) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      return ms[ms.size() / 2];
    };
    const float f = time_it(false), fb = time_it(true);
    const double tf = fwd_flops / (f * 1e-3) / 1e12, tfb = 3.5 * fwd_flops / (fb * 1e-3) / 1e12;
    std::printf("%-30s %10.3f %9.1f %12.3f %9.1f\n", c.name, f, tf, fb, tfb);
    std::fprintf(js, "{\"case\": \"%s\", \"window\": %d, \"blocks\": %d, \"bidir\": %d, \"docs\": %d, \"pairs\": %.0f, "
                     "\"fwd_ms\": %.4f, \"fwdbwd_ms\": %.4f, \"fwd_tflops\": %.1f, \"fwdbwd_tflops\": %.1f, \"device\": \"%s\"}\n",
                 c.name, c.window, c.blocks, c.bidir, c.docs, pairs, f, fb, tf, tfb, prop.name);
  }
  std::fclose(js);
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: error: %s\n", e.what());
    return 1;
  }
}
