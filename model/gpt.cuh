// The speedrun model on the GPU (SPEC section 3), composed from the tested layers: parameters in
// the reference model's flat layout (model/reference_model.h: the same names, shapes and
// offsets) as bf16 for the matmuls and fp32 for the scalars, and the forward pass to the loss.
// The backward and the optimiser step are the next part of issue 4.
//
// Forward, per SPEC section 3, on T tokens of one packed sequence:
//   x = norm(E[tok]); x0 = x; per layer: U-net skip, lambda mix, attention (q, k per-head norm,
//   rotary, value-embedding mix, fused masked attention), MLP (ReLU^2); the lm head in chunks
//   of rows whose fp32 logits live only inside the chunk (fused softcapped cross-entropy).
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "layers/embedding.cuh"
#include "layers/matmul.cuh"
#include "layers/mix.cuh"
#include "layers/relu2.cuh"
#include "layers/rmsnorm.cuh"
#include "layers/rotary.cuh"
#include "layers/softcap_ce.cuh"
#include "model/reference_model.h"

namespace gpt {

using layers::bf16;

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

class Model {
 public:
  // T: tokens per forward; bos: the token that starts a document (50256 for GPT-2 data);
  // head_chunk: rows of the lm head computed at once.
  Model(const model_ref::Config& cfg, int T, int bos, int head_chunk = 8192)
      : cfg_(cfg), layout_(cfg, /*allocate=*/false), T_(T), bos_(bos), chunk_(std::min(T, head_chunk)) {
    if (cfg.head_dim() != 64 && cfg.head_dim() != 128) throw std::invalid_argument("head dim must be 64 or 128 (attention kernel)");
    if (cfg.width % 8 || cfg.hidden % 8 || cfg.vocab % 8) throw std::invalid_argument("width, hidden and vocab must be multiples of 8");
    const size_t n = layout_.size(), TC = (size_t)T * cfg.width;
    alloc(&w16_, n * sizeof(bf16));
    alloc(&w32_, n * sizeof(float));
    for (bf16** p : {&x_, &x0_, &h_, &q_, &k_, &qn_, &kn_, &v_, &ve_, &y_}) alloc(p, TC * sizeof(bf16));
    alloc(&u_, (size_t)T * cfg.hidden * sizeof(bf16));
    alloc(&r_, (size_t)T * cfg.hidden * sizeof(bf16));
    pushed_.resize(cfg.layers / 2);
    for (auto& p : pushed_) alloc(&p, TC * sizeof(bf16));
    alloc(&rstd_, (size_t)T * cfg.heads * sizeof(float));
    alloc(&lse_, (size_t)T * cfg.heads * sizeof(float));
    alloc(&z_, (size_t)chunk_ * cfg.vocab * sizeof(float));
    alloc(&dz_, (size_t)chunk_ * cfg.vocab * sizeof(bf16));
    alloc(&loss_, (size_t)T * sizeof(float));
    alloc(&tokens_, (size_t)T * sizeof(int));
    alloc(&targets_, (size_t)T * sizeof(int));
    alloc(&doc_, (size_t)T * sizeof(int));
    alloc(&bad_, sizeof(int));
    auto tab = layers::rotary_table(T, cfg.head_dim());
    alloc(&rot_, tab.size() * sizeof(float2));
    cuda_check(cudaMemcpy(rot_, tab.data(), tab.size() * sizeof(float2), cudaMemcpyHostToDevice), "rotary table");
  }
  ~Model() {
    for (void* p : buffers_) cudaFree(p);
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Uploads parameters from the reference layout.
  void load(const model_ref::Params& p) {
    if (p.data.size() != layout_.size()) throw std::invalid_argument("load: parameters of another configuration");
    std::vector<bf16> h16(p.data.size());
    std::vector<float> h32(p.data.size());
    for (size_t i = 0; i < p.data.size(); i++) {
      h16[i] = __float2bfloat16((float)p.data[i]);
      h32[i] = (float)p.data[i];
    }
    cuda_check(cudaMemcpy(w16_, h16.data(), h16.size() * sizeof(bf16), cudaMemcpyHostToDevice), "load");
    cuda_check(cudaMemcpy(w32_, h32.data(), h32.size() * sizeof(float), cudaMemcpyHostToDevice), "load");
  }

  // Mean loss over the T tokens. z_out, when given, receives the head's output before the
  // softcap, fp32 [T][vocab] (for tests).
  double forward(const std::vector<int>& tokens, const std::vector<int>& targets, std::vector<float>* z_out = nullptr) {
    const int T = T_, C = cfg_.width, H = cfg_.heads, Dh = cfg_.head_dim(), L = cfg_.layers, F = cfg_.hidden, V = cfg_.vocab;
    if ((int)tokens.size() != T || (int)targets.size() != T) throw std::invalid_argument("forward: want T tokens and targets");
    const size_t TC = (size_t)T * C;
    std::vector<int> doc(T);
    for (int t = 0, c = 0; t < T; t++) doc[t] = (c += tokens[t] == bos_);
    cuda_check(cudaMemcpy(tokens_, tokens.data(), T * sizeof(int), cudaMemcpyHostToDevice), "tokens");
    cuda_check(cudaMemcpy(targets_, targets.data(), T * sizeof(int), cudaMemcpyHostToDevice), "targets");
    cuda_check(cudaMemcpy(doc_, doc.data(), T * sizeof(int), cudaMemcpyHostToDevice), "doc ids");
    cuda_check(cudaMemset(bad_, 0, sizeof(int)), "flag");
    attn::MaskDesc mask;
    mask.causal = cfg_.mask.causal;
    mask.window = cfg_.mask.window;
    mask.window_bidir = cfg_.mask.bidir;
    mask.window_blocks = cfg_.mask.blocks;
    mask.doc_ids = cfg_.mask.doc ? doc_ : nullptr;
    const float eps = (float)cfg_.eps;

    ok(layers::embedding_forward(W("embed"), tokens_, h_, T, C));
    ok(layers::rmsnorm_forward(h_, x_, rstd_, T, C, eps));
    cuda_check(cudaMemcpyAsync(x0_, x_, TC * sizeof(bf16), cudaMemcpyDeviceToDevice), "x0");
    for (int i = 0; i < L; i++) {
      const std::string p = "layer" + std::to_string(i) + ".";
      if (i >= L / 2) ok(layers::skip_add(x_, pushed_[L - 1 - i], S("skip"), i - L / 2, TC));
      ok(layers::lambda_mix(x_, x0_, x_, S(p + "lambda"), TC));
      ok(layers::rmsnorm_forward(x_, h_, rstd_, T, C, eps));
      mm_(h_, W(p + "wq"), q_, T, C, C, false, false);
      mm_(h_, W(p + "wk"), k_, T, C, C, false, false);
      mm_(h_, W(p + "wv"), v_, T, C, C, false, false);
      const int table = i < L / 2 ? i : L - 1 - i;
      ok(layers::embedding_forward(W("value_embed." + std::to_string(table)), tokens_, ve_, T, C));
      ok(layers::value_mix(v_, ve_, S(p + "attn_lambda"), TC));
      ok(layers::rmsnorm_forward(q_, qn_, rstd_, T * H, Dh, eps));
      ok(layers::rmsnorm_forward(k_, kn_, rstd_, T * H, Dh, eps));
      ok(layers::rotary(qn_, rot_, T, H, Dh, 1.f));
      ok(layers::rotary(kn_, rot_, T, H, Dh, 1.f));
      ok(attn::attention_forward(qn_, kn_, v_, y_, lse_, T, H, Dh, mask));
      mm_(y_, W(p + "wo"), x_, T, C, C, false, false, /*accumulate=*/true);
      ok(layers::rmsnorm_forward(x_, h_, rstd_, T, C, eps));
      mm_(h_, W(p + "wfc"), u_, T, F, C, false, false);
      ok(layers::relu2_forward(u_, r_, (size_t)T * F));
      mm_(r_, W(p + "wproj"), x_, T, C, F, false, false, /*accumulate=*/true);
      if (i < L / 2) cuda_check(cudaMemcpyAsync(pushed_[i], x_, TC * sizeof(bf16), cudaMemcpyDeviceToDevice), "push");
    }
    ok(layers::rmsnorm_forward(x_, h_, rstd_, T, C, eps));
    if (z_out) z_out->resize((size_t)T * V);
    for (int r0 = 0; r0 < T; r0 += chunk_) {
      const int rows = std::min(chunk_, T - r0);
      mm_(h_ + (size_t)r0 * C, W("head"), z_, rows, V, C, false, false, false, /*c_fp32=*/true);
      ok(layers::softcap_ce(z_, targets_ + r0, dz_, loss_ + r0, rows, V, 1.f / T, bad_));
      if (z_out)
        cuda_check(cudaMemcpy(z_out->data() + (size_t)r0 * V, z_, (size_t)rows * V * sizeof(float), cudaMemcpyDeviceToHost), "z");
    }
    std::vector<float> loss(T);
    int bad = 0;
    cuda_check(cudaMemcpy(loss.data(), loss_, T * sizeof(float), cudaMemcpyDeviceToHost), "loss");
    cuda_check(cudaMemcpy(&bad, bad_, sizeof(int), cudaMemcpyDeviceToHost), "flag");
    if (bad) throw std::runtime_error("forward: a target token id is outside the vocabulary");
    double sum = 0;
    for (float l : loss) sum += l;
    return sum / T;
  }

 private:
  template <typename P>
  void alloc(P** p, size_t bytes) {
    cudaError_t e = cudaMalloc((void**)p, bytes);
    if (e != cudaSuccess) {
      size_t free_b = 0, total = 0;
      cudaMemGetInfo(&free_b, &total);
      throw std::runtime_error("out of GPU memory: asked for " + std::to_string(bytes >> 20) + " MiB with " +
                               std::to_string(free_b >> 20) + " MiB free of " + std::to_string(total >> 20) + " MiB");
    }
    buffers_.push_back(*p);
  }
  static void ok(cudaError_t e) { cuda_check(e, "kernel launch"); }
  const bf16* W(const std::string& name) const { return w16_ + layout_.t(name).offset; }
  const float* S(const std::string& name) const { return w32_ + layout_.t(name).offset; }

  model_ref::Config cfg_;
  model_ref::Params layout_;  // names, shapes and offsets only
  int T_, bos_, chunk_;
  layers::Matmul mm_;
  std::vector<void*> buffers_;
  bf16 *w16_, *x_, *x0_, *h_, *q_, *k_, *qn_, *kn_, *v_, *ve_, *y_, *u_, *r_, *dz_;
  std::vector<bf16*> pushed_;
  float *w32_, *rstd_, *lse_, *z_, *loss_;
  int *tokens_, *targets_, *doc_, *bad_;
  float2* rot_;
};

}  // namespace gpt
