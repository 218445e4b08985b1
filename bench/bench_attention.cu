// Attention benchmark: forward and forward + backward of the fused kernels, bf16, B = 1.
//
//   bench_attention [OUT.json] [--T 65536] [--heads 6] [--head-dim 128]
//                   [--causal 1] [--window W] [--window-mask uni|bi] [--window-granularity token|block]
//                   [--docs 0|1] [--prefix P] [--name NAME] [--no-doc-spans]
// With no mask flag it runs its table of masks (table() below) at the given shape (by default
// the speedrun's: T = 65536, 6 heads of 128); with any mask flag, that one mask.
// Inputs are random (bench/fill.cuh, unit variance). Times with CUDA events (3 warm-up calls,
// median of 20, three input sets rotated so that L2 does not hold the inputs), and reports
// useful TFLOP/s counting only kept pairs (mask.h kept_pairs): forward 4 D pairs H, backward
// 2.5x that. So masks of different density compare by TFLOP/s. Writes one JSON object per case
// to OUT.json (default bench_attention.json) for bench/compare_flex.py, which times
// FlexAttention on exactly the same cases.
// Documents (mean length 1000): lengths 500 + (i * 7919) % 1001, the same rule as compare_flex.py.
// Their spans (attention.h doc_spans) are computed once, outside the timings, and given to the
// kernels as the model gives them (--no-doc-spans: not, for comparison), just as FlexAttention's
// block mask is built once outside its timings.
// ATTN_KERNELS=sm80 runs the sm80 family (to compare the two); ATTN_BWD=fused|two-kernels picks
// the sm90 backward, ATTN_BWD_OWN=64|128 the two-kernel backward's block size at head dim 64
// (attention.h KernelChoice); BENCH_ONLY=NAME runs one case of the table (for profiling).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/mask.h"
#include "attention/tile_scheduler.cuh"
#include "bench/fill.cuh"
#include "common/cli.h"
#include "common/cuda_check.h"


typedef __nv_bfloat16 bf16;

struct BenchCase {
  std::string name;
  bool causal = true;
  int window = 0;
  bool blocks = false, bidir = false, docs = false;
  int prefix = 0;
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

static std::string describe(const BenchCase& c) {
  std::string s = c.causal ? "causal" : "non-causal";
  if (c.prefix) s += " + prefix " + std::to_string(c.prefix);
  if (c.window) s += " + " + std::to_string(c.window) + (c.blocks ? " blocks " : " ") + (c.bidir ? "bi" : "uni");
  if (c.docs) s += " + docs";
  return s;
}

// The table at one shape: the speedrun's masks, the windows around them, dense causal, and
// prefix-LM next to causal windows of about its density.
static std::vector<BenchCase> table() {
  std::vector<BenchCase> t;
  auto add = [&](int window, bool blocks, bool bidir, bool docs, int prefix = 0, bool causal = true) {
    BenchCase c;
    c.causal = causal, c.window = window, c.blocks = blocks, c.bidir = bidir, c.docs = docs, c.prefix = prefix;
    c.name = describe(c);
    t.push_back(c);
  };
  for (int w : {128, 1024, 1792}) add(w, false, false, false), add(w, false, false, true);
  add(0, false, false, false);
  add(0, false, false, true);
  add(8, true, false, true);
  add(8, true, true, true);
  add(512, false, true, false, 0, false);
  add(1024, false, false, true, 256);
  add(1024, false, true, true, 256);
  add(8, true, false, true, 256);
  add(0, false, false, true, 256);
  add(1024, false, false, false, 256);  // every prefix case but the bi one has its partner without the prefix above
  return t;
}

// The work a mask gives the sm90 kernels, from the tile walk alone (attention/mask.h TileWalk;
// no GPU): tiles visited (full and partial) by the forward (a block owns and walks as
// tile_scheduler.cuh fwd_shape says) and the backward (owns the keys tile_scheduler.cuh bwd_own
// says, and walks the query tiles bwd_walk says), and the kept pairs as a share of
// the pairs those tiles compute. Two masks with the same share and the same kernel speed per
// computed pair run at the same useful TFLOP/s.
struct Geometry {
  long long fwd_full = 0, fwd_partial = 0, bwd_full = 0, bwd_partial = 0;
  double fwd_useful = 0, bwd_useful = 0;
};
static Geometry geometry(const attn::MaskBounds& b, long long pairs, attn::FwdShape fwd, int bwd_own, int bwd_walk) {
  Geometry g;
  auto walk = [&](int own, int step, bool queries, long long& full, long long& partial) {
    for (int f0 = 0; f0 < b.T; f0 += own) {
      const attn::TileWalk w(attn::range_ends(b, f0, f0 + own, queries), step, b.T);
      attn::TileKind k;
      for (int i = w.next(w.begin, k); i < w.end; i = w.next(i + 1, k)) (k == attn::kFull ? full : partial)++;
    }
  };
  const int fwd_own = fwd.own, fwd_step = fwd.walk;
  walk(fwd_own, fwd_step, true, g.fwd_full, g.fwd_partial);
  walk(bwd_own, bwd_walk, false, g.bwd_full, g.bwd_partial);
  const double fwd_area = (double)(g.fwd_full + g.fwd_partial) * fwd_own * fwd_step;
  const double bwd_area = (double)(g.bwd_full + g.bwd_partial) * bwd_own * bwd_walk;
  g.fwd_useful = fwd_area > 0 ? pairs / fwd_area : 0;
  g.bwd_useful = bwd_area > 0 ? pairs / bwd_area : 0;
  return g;
}

static attn::MaskDesc mask_of(const BenchCase& c, const int32_t* doc) {
  attn::MaskDesc m;
  m.causal = c.causal;
  m.window = c.window;
  m.window_blocks = c.blocks;
  m.window_bidir = c.bidir;
  m.prefix = c.prefix;
  m.doc_ids = c.docs ? doc : nullptr;
  return m;
}

static int run(int argc, char** argv) {
  int T = 65536, H = 6, D = 128, causal = 1, window = 0, docs = 0, prefix = 0;
  std::string json_path = "bench_attention.json", window_mask = "uni", granularity = "token", name;
  CLI::App app{"bench_attention: the fused attention kernels' speed"};
  app.add_option("json", json_path, "where to write one JSON object per case")->capture_default_str();
  cli::integer(app, "--T", T, 1, 1 << 22, "sequence length")->capture_default_str();
  cli::integer(app, "--heads", H, 1, 256, "heads")->capture_default_str();
  cli::integer(app, "--head-dim", D, 64, 128, "head dimension (64 or 128)")->capture_default_str();
  std::vector<CLI::Option*> mask_flags = {
      cli::integer(app, "--causal", causal, 0, 1, "1: keep k <= q"),
      cli::integer(app, "--window", window, 0, 1 << 22, "window (0: none); tokens or blocks of 128"),
      app.add_option("--window-mask", window_mask, "uni: q - k < W; bi: |q - k| < W")->check(CLI::IsMember({"uni", "bi"})),
      app.add_option("--window-granularity", granularity, "token or block")->check(CLI::IsMember({"token", "block"})),
      cli::integer(app, "--docs", docs, 0, 1, "1: documents of mean length 1000"),
      cli::integer(app, "--prefix", prefix, 0, 1 << 22, "prefix-LM length (needs --causal 1)"),
      app.add_option("--name", name, "the case's name in the output")};
  bool geometry_only = false, no_spans = false;
  app.add_flag("--geometry", geometry_only, "print each mask's tile geometry for the sm90 kernels (no GPU needed) and exit");
  app.add_flag("--no-doc-spans", no_spans, "with documents, give the kernels the ids alone (each block searches them) instead of their spans");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (D != 64 && D != 128) {
    std::fprintf(stderr, "bench_attention: --head-dim %d: the kernels take 64 or 128\n", D);
    return 2;
  }
  if (prefix > 0 && !causal) {
    std::fprintf(stderr, "bench_attention: --prefix %d needs --causal 1\n", prefix);
    return 2;
  }
  std::vector<BenchCase> cases;
  if (std::any_of(mask_flags.begin(), mask_flags.end(), [](CLI::Option* o) { return o->count() > 0; })) {
    BenchCase c;
    c.causal = causal, c.window = window, c.bidir = window_mask == "bi", c.blocks = granularity == "block", c.docs = docs, c.prefix = prefix;
    c.name = name.empty() ? describe(c) : name;
    cases.push_back(c);
  } else {
    cases = table();
  }
  if (geometry_only) {
    const std::vector<int32_t> doc = bench_docs(T);
    std::printf("T=%d, D=%d; tiles of the sm90 kernels: forward %dx%d (at D=64: %dx%d, %dx%d with a window or documents), "
                "backward %dx%d (at D=64: %dx%d, %dx%d with a window or documents); useful = kept pairs / pairs in visited tiles\n",
                T, D, attn::kF90Own, attn::kF90Walk, attn::kF90WideOwn, attn::kF90Walk, attn::kF90SmallOwn, attn::kF90SmallWalk,
                attn::kB90Own, attn::kB90Walk, attn::kB90Own, attn::kB90WideWalk, attn::kB90SmallOwn, attn::kB90Walk);
    std::printf("%-44s %12s %8s %9s %8s %7s %9s %8s %7s\n", "mask", "kept pairs", "density", "fwd tiles", "partial", "useful",
                "bwd tiles", "partial", "useful");
    for (const auto& c : cases) {
      const attn::MaskDesc m = mask_of(c, doc.data());
      const attn::MaskBounds b = attn::make_bounds(m, T);
      const long long pairs = attn::kept_pairs(b);
      const Geometry g = geometry(b, pairs, attn::fwd_shape(D, m), attn::bwd_own(D, m), attn::bwd_walk(D, m));
      std::printf("%-44s %12lld %8.5f %9lld %8lld %7.4f %9lld %8lld %7.4f\n", c.name.c_str(), pairs, (double)pairs / ((double)T * T),
                  g.fwd_full + g.fwd_partial, g.fwd_partial, g.fwd_useful, g.bwd_full + g.bwd_partial, g.bwd_partial, g.bwd_useful);
    }
    return 0;
  }
  const int kSets = 3, kWarm = 3, kReps = 20;
  {  // to compare kernel choices in one run (attention.h KernelChoice)
    attn::KernelChoice c;
    if (const char* k = std::getenv("ATTN_KERNELS"); k && std::string(k) == "sm80") c.family = attn::KernelChoice::Family::kSm80;
    if (const char* k = std::getenv("ATTN_BWD")) {  // the sm90 backward: fused or two-kernels
      const std::string v(k);
      if (v != "fused" && v != "two-kernels") {
        std::fprintf(stderr, "bench_attention: ATTN_BWD=%s: fused or two-kernels\n", k);
        return 2;
      }
      c.sm90_backward = v == "fused" ? attn::KernelChoice::Sm90Backward::kFused : attn::KernelChoice::Sm90Backward::kTwoKernels;
    }
    if (const char* k = std::getenv("ATTN_BWD_OWN")) {  // the sm90 two-kernel backward's blocks at head dim 64
      const std::string v(k);
      if (v != "64" && v != "128") {
        std::fprintf(stderr, "bench_attention: ATTN_BWD_OWN=%s: 64 or 128\n", k);
        return 2;
      }
      c.sm90_two_kernel_own = std::stoi(v);
    }
    attn::set_kernel_choice(c);
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t n = (size_t)T * H * D;
  struct Set { bf16 *q, *k, *v, *o, *dout, *dq, *dk, *dv; float* lse; void* ws; } sets[kSets];
  unsigned seed = 1;
  for (auto& s : sets) {
    for (bf16** p : {&s.q, &s.k, &s.v, &s.dout}) {
      CUDA_CHECK(cudaMalloc(p, n * sizeof(bf16)));
      CUDA_CHECK(bench::fill_random(*p, n, seed++));
    }
    for (bf16** p : {&s.o, &s.dq, &s.dk, &s.dv}) CUDA_CHECK(cudaMalloc(p, n * sizeof(bf16)));
    CUDA_CHECK(cudaMalloc(&s.lse, (size_t)H * T * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&s.ws, attn::backward_workspace_bytes(T, H, D)));
  }
  std::vector<int32_t> doc = bench_docs(T);
  int32_t* ddoc;
  attn::DocSpan* dspan;  // the documents' spans, computed once as a model does per sequence
  CUDA_CHECK(cudaMalloc(&ddoc, T * sizeof(int32_t)));
  CUDA_CHECK(cudaMalloc(&dspan, T * sizeof(attn::DocSpan)));
  CUDA_CHECK(cudaMemcpy(ddoc, doc.data(), T * sizeof(int32_t), cudaMemcpyHostToDevice));
  CUDA_CHECK(attn::doc_spans(ddoc, dspan, T));

  FILE* js = std::fopen(json_path.c_str(), "w");
  if (!js) {
    std::fprintf(stderr, "bench_attention: cannot write %s\n", json_path.c_str());
    return 1;
  }
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  std::printf("device: %s, T=%d H=%d D=%d bf16; kernels: %s\n", prop.name, T, H, D, attn::kernels_in_use(D));
  std::printf("%-44s %10s %9s %12s %9s %8s\n", "mask", "fwd ms", "fwd TF/s", "fwd+bwd ms", "f+b TF/s", "density");
  const char* only = std::getenv("BENCH_ONLY");
  for (const auto& c : cases) {
    if (only && std::string(only) != c.name) continue;
    attn::MaskDesc m = mask_of(c, doc.data());
    const double pairs = (double)attn::kept_pairs(attn::make_bounds(m, T)), fwd_flops = 4.0 * D * pairs * H;
    m.doc_ids = c.docs ? ddoc : nullptr;
    m.doc_spans = c.docs && !no_spans ? dspan : nullptr;
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
    const double density = pairs / ((double)T * T);
    std::printf("%-44s %10.3f %9.1f %12.3f %9.1f %8.5f\n", c.name.c_str(), f, tf, fb, tfb, density);
    std::fprintf(js, "{\"case\": \"%s\", \"T\": %d, \"H\": %d, \"D\": %d, \"causal\": %d, \"window\": %d, \"blocks\": %d, "
                     "\"bidir\": %d, \"docs\": %d, \"prefix\": %d, \"pairs\": %.0f, \"fwd_ms\": %.4f, \"fwdbwd_ms\": %.4f, "
                     "\"fwd_tflops\": %.1f, \"fwdbwd_tflops\": %.1f, \"device\": \"%s\"}\n",
                 c.name.c_str(), T, H, D, c.causal, c.window, c.blocks, c.bidir, c.docs, c.prefix, pairs, f, fb, tf, tfb, prop.name);
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
