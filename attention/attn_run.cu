// attn_run: runs the attention kernels on inputs from .npy files and writes the results, so the
// kernel can be checked against any outside reference.
//
//   attn_run --q Q.npy --k K.npy --v V.npy [--dout DO.npy] [--doc-ids DOC.npy | --tokens TOK.npy]
//            [--causal 1] [--window W] [--window-mask uni|bi] [--window-granularity token|block]
//            [--prefix P] --out DIR
// Q, K, V, DO: [T, H, D] float32 (rounded to bf16) or uint16 (bf16 bits). DOC: [T] int32,
// nondecreasing; TOK: [T] int32 token ids, documents start at token 50256. --prefix P: prefix-LM,
// the first P positions of each document (of the sequence, without documents) see each other
// both ways; needs --causal 1.
// Writes DIR/o.npy, lse.npy ([H, T]), and with --dout also dq.npy, dk.npy, dv.npy (float32).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>

#include "attention/attention.h"
#include "attention/npy.h"
#include "common/cli.h"
#include "common/cuda_check.h"


typedef __nv_bfloat16 bf16;

static std::vector<bf16> to_bf16(const npy::Array& a, const std::string& name) {
  std::vector<bf16> out(a.size());
  if (a.dtype == "<f4") {
    const float* f = reinterpret_cast<const float*>(a.data.data());
    for (size_t i = 0; i < out.size(); i++) out[i] = __float2bfloat16(f[i]);
  } else if (a.dtype == "<u2") {
    std::memcpy(out.data(), a.data.data(), a.data.size());
  } else {
    throw std::runtime_error(name + ": dtype " + a.dtype + " (want float32 or uint16 bf16 bits)");
  }
  return out;
}

int main(int argc, char** argv) {
  std::string fq, fk, fv, fdo, fdoc, ftok, out = ".";
  int causal = 1, window = 0, prefix = 0;
  std::string window_mask = "uni", granularity = "token";
  CLI::App app{"attn_run: masked attention forward/backward on .npy inputs"};
  app.add_option("--q", fq, "queries [T, H, D]")->required();
  app.add_option("--k", fk, "keys [T, H, D]")->required();
  app.add_option("--v", fv, "values [T, H, D]")->required();
  app.add_option("--dout", fdo, "output gradient [T, H, D]; runs the backward when given");
  auto* od = app.add_option("--doc-ids", fdoc, "document ids [T] int32, nondecreasing");
  app.add_option("--tokens", ftok, "token ids [T] int32; documents start at 50256")->excludes(od);
  cli::integer(app, "--causal", causal, 0, 1, "1: keep k <= q")->capture_default_str();
  cli::integer(app, "--window", window, 0, 1 << 24, "window size (0: none)")->capture_default_str();
  app.add_option("--window-mask", window_mask, "uni: q - k < W; bi: |q - k| < W")->check(CLI::IsMember({"uni", "bi"}))->capture_default_str();
  app.add_option("--window-granularity", granularity, "token or block (128 tokens)")->check(CLI::IsMember({"token", "block"}))->capture_default_str();
  cli::integer(app, "--prefix", prefix, 0, 1 << 24, "prefix-LM: the first P tokens of each document see each other (0: off; needs --causal 1)")
      ->capture_default_str();
  app.add_option("--out", out, "output directory")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (prefix > 0 && !causal) {
    std::fprintf(stderr, "attn_run: error: --prefix %d needs --causal 1 (without causal every pair is kept already)\n", prefix);
    return 2;
  }
  try {
    npy::Array q = npy::load(fq), k = npy::load(fk), v = npy::load(fv);
    if (q.shape.size() != 3) throw std::runtime_error(fq + ": shape must be [T, H, D]");
    if (k.shape != q.shape || v.shape != q.shape) throw std::runtime_error("--k and --v must have the shape of --q");
    if (q.shape[0] < 1 || q.shape[0] > (1u << 24) || q.shape[1] < 1 || q.shape[1] > 1024)
      throw std::runtime_error(fq + ": shape [T, H, D] wants 1 <= T <= 2^24 and 1 <= H <= 1024");
    const int T = (int)q.shape[0], H = (int)q.shape[1], D = (int)q.shape[2];
    if (D != 64 && D != 128) throw std::runtime_error(fq + ": head dim " + std::to_string(D) + " (supported: 64, 128)");
    const size_t n = q.size();
    std::vector<int32_t> doc;
    if (!fdoc.empty() || !ftok.empty()) {
      npy::Array a = npy::load(fdoc.empty() ? ftok : fdoc);
      const std::string& name = fdoc.empty() ? ftok : fdoc;
      if (a.dtype != "<i4" || a.size() != (size_t)T) throw std::runtime_error(name + ": want int32 [T]");
      const int32_t* p = reinterpret_cast<const int32_t*>(a.data.data());
      doc.resize(T);
      if (!ftok.empty()) {
        attn::doc_ids_from_tokens(p, T, doc.data());
      } else {
        for (int i = 0; i < T; i++) {
          doc[i] = p[i];
          if (i && doc[i] < doc[i - 1]) throw std::runtime_error(name + ": document ids must be nondecreasing (position " + std::to_string(i) + ")");
        }
      }
    }
    bf16 *dq, *dk, *dv, *dout = nullptr, *o, *gq = nullptr, *gk = nullptr, *gv = nullptr;
    float* lse;
    int32_t* ddoc = nullptr;
    attn::DocSpan* dspan = nullptr;
    void* ws = nullptr;
    auto up = [&](bf16** d, const npy::Array& a, const std::string& name) {
      auto h = to_bf16(a, name);
      CUDA_CHECK(cudaMalloc(d, n * sizeof(bf16)));
      CUDA_CHECK(cudaMemcpy(*d, h.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
    };
    up(&dq, q, fq);
    up(&dk, k, fk);
    up(&dv, v, fv);
    CUDA_CHECK(cudaMalloc(&o, n * sizeof(bf16)));
    CUDA_CHECK(cudaMalloc(&lse, (size_t)H * T * sizeof(float)));
    attn::MaskDesc m;
    m.causal = causal;
    m.window = window;
    m.window_bidir = window_mask == "bi";
    m.window_blocks = granularity == "block";
    m.prefix = prefix;
    if (!doc.empty()) {
      CUDA_CHECK(cudaMalloc(&ddoc, T * sizeof(int32_t)));
      CUDA_CHECK(cudaMemcpy(ddoc, doc.data(), T * sizeof(int32_t), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMalloc(&dspan, T * sizeof(attn::DocSpan)));
      CUDA_CHECK(attn::doc_spans(ddoc, dspan, T));
      m.doc_ids = ddoc;
      m.doc_spans = dspan;
    }
    CUDA_CHECK(attn::attention_forward(dq, dk, dv, o, lse, T, H, D, m));
    auto down = [&](const bf16* d) {
      std::vector<bf16> h(n);
      CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
      std::vector<float> f(n);
      for (size_t i = 0; i < n; i++) f[i] = __bfloat162float(h[i]);
      return f;
    };
    std::vector<float> hl((size_t)H * T);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(hl.data(), lse, hl.size() * sizeof(float), cudaMemcpyDeviceToHost));
    npy::save_f32(out + "/o.npy", down(o), q.shape);
    npy::save_f32(out + "/lse.npy", hl, {(size_t)H, (size_t)T});
    if (!fdo.empty()) {
      npy::Array g = npy::load(fdo);
      if (g.shape != q.shape) throw std::runtime_error(fdo + ": must have the shape of --q");
      up(&dout, g, fdo);
      for (bf16** p : {&gq, &gk, &gv}) CUDA_CHECK(cudaMalloc(p, n * sizeof(bf16)));
      CUDA_CHECK(cudaMalloc(&ws, attn::backward_workspace_bytes(T, H, D)));
      CUDA_CHECK(attn::attention_backward(dq, dk, dv, o, dout, lse, gq, gk, gv, ws, T, H, D, m));
      CUDA_CHECK(cudaDeviceSynchronize());
      npy::save_f32(out + "/dq.npy", down(gq), q.shape);
      npy::save_f32(out + "/dk.npy", down(gk), q.shape);
      npy::save_f32(out + "/dv.npy", down(gv), q.shape);
    }
    std::printf("attn_run: T=%d H=%d D=%d causal=%d window=%d %s %s prefix=%d docs=%s -> %s\n", T, H, D, causal, window,
                window_mask.c_str(), granularity.c_str(), prefix, doc.empty() ? "off" : "on", out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attn_run: error: %s\n", e.what());
    return 1;
  }
}
