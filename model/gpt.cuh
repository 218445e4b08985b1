// The speedrun model on the GPU (SPEC section 3), composed from the tested layers: parameters in
// the reference model's flat layout (model/reference_model.h: the same names, shapes and
// offsets) as bf16 for the matmuls and fp32 for the scalars; fp32 gradients in the same layout.
//
// Forward, per SPEC section 3, on T tokens of one packed sequence:
//   x = norm(E[tok]); x0 = x; per layer: U-net skip, lambda mix, attention (q, k per-head norm,
//   rotary, value-embedding mix, fused masked attention), MLP (ReLU^2); the lm head in chunks
//   of rows whose fp32 logits live only inside the chunk (fused softcapped cross-entropy).
//   With gradients on, each chunk's backward (dz -> d(norm(x)), dWhead) runs right there, so no
//   T x vocab tensor outlives its chunk; backward() then walks the layers in reverse.
// Gradients accumulate (+=) until zero_grad(), as gradient accumulation over micro-steps needs.
// Activations kept for the backward: about (11 C + 2 hidden) x T bf16 a layer; the norms' outputs
// h and h2, the value embedding ve and the mixed v are recomputed in the backward (cheap
// element-wise passes that give the forward's bits), which saves 4 C x T a layer.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "layers/embedding.cuh"
#include "layers/matmul.cuh"
#include "layers/mix.cuh"
#include "layers/reduce.cuh"
#include "layers/relu2.cuh"
#include "layers/rmsnorm.cuh"
#include "layers/rotary.cuh"
#include "layers/softcap_ce.cuh"
#include "model/profile.h"
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
    const size_t n = layout_.size(), TC = (size_t)T * cfg.width, TF = (size_t)T * cfg.hidden, TH = (size_t)T * cfg.heads;
    alloc(&w16_, n * sizeof(bf16));
    alloc(&w32_, n * sizeof(float));
    alloc(&g32_, n * sizeof(float));
    for (bf16** p : {&emb_, &x0_, &x_, &hf_, &dhf_, &dx_, &dx0_, &dh_, &dy_, &dq_, &dk_, &dv_, &t1_, &t2_}) alloc(p, TC * sizeof(bf16));
    for (bf16** p : {&dr_, &du_}) alloc(p, TF * sizeof(bf16));
    acts_.resize(cfg.layers);
    for (auto& a : acts_) {
      for (bf16** p : {&a.x_in, &a.x_mix, &a.q, &a.k, &a.qn, &a.kn, &a.v_lin, &a.y, &a.x_attn})
        alloc(p, TC * sizeof(bf16));
      alloc(&a.u, TF * sizeof(bf16));
      alloc(&a.r, TF * sizeof(bf16));
      for (float** p : {&a.rstd_h, &a.rstd_h2}) alloc(p, (size_t)T * sizeof(float));
      for (float** p : {&a.rstd_q, &a.rstd_k, &a.lse}) alloc(p, TH * sizeof(float));
    }
    pushed_.resize(cfg.layers / 2);
    dpushed_.resize(cfg.layers / 2);
    for (auto& p : pushed_) alloc(&p, TC * sizeof(bf16));
    for (auto& p : dpushed_) alloc(&p, TC * sizeof(bf16));
    for (float** p : {&rstd_e_, &rstd_f_, &loss_}) alloc(p, (size_t)T * sizeof(float));
    alloc(&z_, (size_t)chunk_ * cfg.vocab * sizeof(float));
    alloc(&dz_, (size_t)chunk_ * cfg.vocab * sizeof(bf16));
    alloc(&partial_, layers::kDotBlocks * sizeof(float));
    alloc(&one_, sizeof(float));
    const float one = 1.f;
    cuda_check(cudaMemcpy(one_, &one, sizeof(float), cudaMemcpyHostToDevice), "constant");
    alloc(&ws_, attn::backward_workspace_bytes(T, cfg.heads));
    for (int** p : {&tokens_, &targets_, &doc_}) alloc(p, (size_t)T * sizeof(int));
    alloc(&ix_buf_, layers::TokenIndex::max_packed(T) * sizeof(int));
    alloc(&ix_partial_, layers::TokenIndex::max_slots(T) * cfg.width * sizeof(float));
    alloc(&bad_, sizeof(int));
    auto tab = layers::rotary_table(T, cfg.head_dim());
    alloc(&rot_, tab.size() * sizeof(float2));
    cuda_check(cudaMemcpy(rot_, tab.data(), tab.size() * sizeof(float2), cudaMemcpyHostToDevice), "rotary table");
    zero_grad();
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
  // fp32 master weights to and from the host (checkpoints); loading also refreshes the bf16
  // copies with the same rounding the optimiser uses, so a resumed run computes the same bits.
  std::vector<float> download_master() const {
    std::vector<float> h(layout_.size());
    cuda_check(cudaMemcpy(h.data(), w32_, h.size() * sizeof(float), cudaMemcpyDeviceToHost), "download master");
    return h;
  }
  void upload_master(const std::vector<float>& h) {
    if (h.size() != layout_.size()) throw std::invalid_argument("upload_master: parameters of another configuration");
    std::vector<bf16> h16(h.size());
    for (size_t i = 0; i < h.size(); i++) h16[i] = __float2bfloat16(h[i]);
    cuda_check(cudaMemcpy(w32_, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice), "upload master");
    cuda_check(cudaMemcpy(w16_, h16.data(), h16.size() * sizeof(bf16), cudaMemcpyHostToDevice), "upload master");
  }
  void zero_grad() { cuda_check(cudaMemset(g32_, 0, layout_.size() * sizeof(float)), "zero_grad"); }
  // device views of the parameters (fp32 masters, bf16 copies) and gradients, in the layout
  const model_ref::Params& layout() const { return layout_; }
  float* master() { return w32_; }
  bf16* weights() { return w16_; }
  float* grads() { return g32_; }
  void set_window(int w) { cfg_.mask.window = w; }  // the window schedule changes it per step
  std::vector<float> gradients() const {
    std::vector<float> g(layout_.size());
    cuda_check(cudaMemcpy(g.data(), g32_, g.size() * sizeof(float), cudaMemcpyDeviceToHost), "gradients");
    return g;
  }

  // Mean loss over the T tokens. grad_scale != 0 also runs the head's backward for a loss
  // scaled by grad_scale (1 / T for the mean of one sequence; 1 / (T * micro-steps * ranks) for
  // a step). z_out, when given, receives the head's output before the softcap, fp32 [T][vocab].
  double forward(const std::vector<int>& tokens, const std::vector<int>& targets, float grad_scale = 0.f,
                 std::vector<float>* z_out = nullptr) {
    const int T = T_, C = cfg_.width, H = cfg_.heads, Dh = cfg_.head_dim(), L = cfg_.layers, F = cfg_.hidden, V = cfg_.vocab;
    if ((int)tokens.size() != T || (int)targets.size() != T) throw std::invalid_argument("forward: want T tokens and targets");
    const size_t TC = (size_t)T * C;
    std::vector<int> doc(T);
    for (int t = 0, c = 0; t < T; t++) {
      if (tokens[t] < 0 || tokens[t] >= V) throw std::invalid_argument("forward: token id " + std::to_string(tokens[t]) + " outside the vocabulary");
      doc[t] = (c += tokens[t] == bos_);
    }
    layers::TokenIndex ix(tokens.data(), T, V);
    const std::vector<int> packed = ix.packed();
    cuda_check(cudaMemcpy(tokens_, tokens.data(), T * sizeof(int), cudaMemcpyHostToDevice), "tokens");
    cuda_check(cudaMemcpy(targets_, targets.data(), T * sizeof(int), cudaMemcpyHostToDevice), "targets");
    cuda_check(cudaMemcpy(doc_, doc.data(), T * sizeof(int), cudaMemcpyHostToDevice), "doc ids");
    cuda_check(cudaMemcpy(ix_buf_, packed.data(), packed.size() * sizeof(int), cudaMemcpyHostToDevice), "token index");
    ixv_ = layers::TokenIndexView(ix, ix_buf_, ix_partial_);
    cuda_check(cudaMemset(bad_, 0, sizeof(int)), "flag");
    const float eps = (float)cfg_.eps;

    prof_.mark(Profiler::kEmbed);
    ok(layers::embedding_forward(W("embed"), tokens_, emb_, T, C));
    prof_.mark(Profiler::kNormMix);
    ok(layers::rmsnorm_forward(emb_, x0_, rstd_e_, T, C, eps));
    copy(x_, x0_, TC);
    for (int i = 0; i < L; i++) {
      const std::string p = "layer" + std::to_string(i) + ".";
      Acts& a = acts_[i];
      if (i >= L / 2) ok(layers::skip_add(x_, pushed_[L - 1 - i], S("skip"), i - L / 2, TC));
      copy(a.x_in, x_, TC);
      ok(layers::lambda_mix(a.x_in, x0_, a.x_mix, S(p + "lambda"), TC));
      ok(layers::rmsnorm_forward(a.x_mix, t1_, a.rstd_h, T, C, eps));  // h: recomputed in the backward
      prof_.mark(Profiler::kMatmul);
      mm_(t1_, W(p + "wq"), a.q, T, C, C, false, false);
      mm_(t1_, W(p + "wk"), a.k, T, C, C, false, false);
      mm_(t1_, W(p + "wv"), a.v_lin, T, C, C, false, false);
      prof_.mark(Profiler::kEmbed);
      ok(layers::embedding_forward(W(ve_name(i)), tokens_, t1_, T, C));  // ve: recomputed in the backward
      prof_.mark(Profiler::kNormMix);
      ok(layers::lambda_mix(a.v_lin, t1_, t2_, S(p + "attn_lambda"), TC));  // v: recomputed in the backward
      ok(layers::rmsnorm_forward(a.q, a.qn, a.rstd_q, T * H, Dh, eps));
      ok(layers::rmsnorm_forward(a.k, a.kn, a.rstd_k, T * H, Dh, eps));
      ok(layers::rotary(a.qn, rot_, T, H, Dh, 1.f));
      ok(layers::rotary(a.kn, rot_, T, H, Dh, 1.f));
      prof_.mark(Profiler::kAttnFwd);
      ok(attn::attention_forward(a.qn, a.kn, t2_, a.y, a.lse, T, H, Dh, mask()));
      prof_.mark(Profiler::kMatmul);
      copy(x_, a.x_mix, TC);
      mm_(a.y, W(p + "wo"), x_, T, C, C, false, false, /*accumulate=*/true);
      prof_.mark(Profiler::kNormMix);
      copy(a.x_attn, x_, TC);
      ok(layers::rmsnorm_forward(a.x_attn, t1_, a.rstd_h2, T, C, eps));  // h2: recomputed in the backward
      prof_.mark(Profiler::kMatmul);
      mm_(t1_, W(p + "wfc"), a.u, T, F, C, false, false);
      prof_.mark(Profiler::kNormMix);
      ok(layers::relu2_forward(a.u, a.r, (size_t)T * F));
      prof_.mark(Profiler::kMatmul);
      mm_(a.r, W(p + "wproj"), x_, T, C, F, false, false, /*accumulate=*/true);
      prof_.mark(Profiler::kNormMix);
      if (i < L / 2) copy(pushed_[i], x_, TC);
    }
    ok(layers::rmsnorm_forward(x_, hf_, rstd_f_, T, C, eps));
    prof_.mark(Profiler::kHead);
    if (z_out) z_out->resize((size_t)T * V);
    for (int r0 = 0; r0 < T; r0 += chunk_) {
      const int rows = std::min(chunk_, T - r0);
      mm_(hf_ + (size_t)r0 * C, W("head"), z_, rows, V, C, false, false, false, /*c_fp32=*/true);
      if (z_out)
        cuda_check(cudaMemcpy(z_out->data() + (size_t)r0 * V, z_, (size_t)rows * V * sizeof(float), cudaMemcpyDeviceToHost), "z");
      ok(layers::softcap_ce(z_, targets_ + r0, dz_, loss_ + r0, rows, V, grad_scale, bad_));
      if (grad_scale != 0.f) {  // the head's backward for this chunk
        mm_(dz_, W("head"), dhf_ + (size_t)r0 * C, rows, C, V, false, true);
        mm_(hf_ + (size_t)r0 * C, dz_, G("head"), C, V, rows, true, false, true, true);
      }
    }
    prof_.mark(Profiler::kHost);
    std::vector<float> loss(T);
    int bad = 0;
    cuda_check(cudaMemcpy(loss.data(), loss_, T * sizeof(float), cudaMemcpyDeviceToHost), "loss");
    cuda_check(cudaMemcpy(&bad, bad_, sizeof(int), cudaMemcpyDeviceToHost), "flag");
    if (bad) throw std::runtime_error("forward: a target token id is outside the vocabulary");
    double sum = 0;
    for (float l : loss) sum += l;
    return sum / T;
  }

  // Backward of the last forward (which must have had grad_scale != 0); adds into the gradients.
  // ready(i), when given, is called once layer i's gradients are final (enqueued on the compute
  // stream, in order L-1 .. 0), and ready(-1) at the end: the data-parallel exchange starts there
  // (which tensors are final at which call: train/grad_buckets.h).
  void backward(const std::function<void(int)>& ready = {}) {
    const int T = T_, C = cfg_.width, H = cfg_.heads, Dh = cfg_.head_dim(), L = cfg_.layers, F = cfg_.hidden;
    const size_t TC = (size_t)T * C;
    prof_.mark(Profiler::kNormMix);
    ok(layers::rmsnorm_backward(x_, rstd_f_, dhf_, dx_, T, C, false));
    cuda_check(cudaMemsetAsync(dx0_, 0, TC * sizeof(bf16)), "dx0");
    for (auto& p : dpushed_) cuda_check(cudaMemsetAsync(p, 0, TC * sizeof(bf16)), "dpushed");
    for (int i = L - 1; i >= 0; i--) {
      const std::string p = "layer" + std::to_string(i) + ".";
      Acts& a = acts_[i];
      if (i < L / 2) ok(layers::skip_add(dx_, dpushed_[i], one_, 0, TC));
      // MLP: x = x_attn + relu(norm(x_attn) Wfc)^2 Wproj
      ok(layers::rmsnorm_forward(a.x_attn, t1_, a.rstd_h2, T, C, (float)cfg_.eps));  // h2, the forward's bits again
      prof_.mark(Profiler::kMatmul);
      mm_(dx_, W(p + "wproj"), dr_, T, F, C, false, true);
      mm_(a.r, dx_, G(p + "wproj"), F, C, T, true, false, true, true);
      prof_.mark(Profiler::kNormMix);
      ok(layers::relu2_backward(a.u, dr_, du_, (size_t)T * F));
      prof_.mark(Profiler::kMatmul);
      mm_(du_, W(p + "wfc"), dh_, T, C, F, false, true);
      mm_(t1_, du_, G(p + "wfc"), C, F, T, true, false, true, true);
      prof_.mark(Profiler::kNormMix);
      ok(layers::rmsnorm_backward(a.x_attn, a.rstd_h2, dh_, dx_, T, C, true));
      // attention: x_attn = x_mix + y Wo
      prof_.mark(Profiler::kMatmul);
      mm_(dx_, W(p + "wo"), dy_, T, C, C, false, true);
      mm_(a.y, dx_, G(p + "wo"), C, C, T, true, false, true, true);
      // ve and v = a0 v_lin + a1 ve, recomputed (the forward's bits) into dq_ and dk_, free until
      // the q and k norms' backward below
      prof_.mark(Profiler::kEmbed);
      ok(layers::embedding_forward(W(ve_name(i)), tokens_, dq_, T, C));
      prof_.mark(Profiler::kNormMix);
      ok(layers::lambda_mix(a.v_lin, dq_, dk_, S(p + "attn_lambda"), TC));
      prof_.mark(Profiler::kAttnBwd);
      ok(attn::attention_backward(a.qn, a.kn, dk_, a.y, dy_, a.lse, t1_, t2_, dv_, ws_, T, H, Dh, mask()));
      prof_.mark(Profiler::kNormMix);
      // v = a0 v_lin + a1 ve
      ok(layers::dot(dv_, a.v_lin, TC, G(p + "attn_lambda"), partial_, true));
      ok(layers::dot(dv_, dq_, TC, G(p + "attn_lambda") + 1, partial_, true));
      ok(layers::rotary(t1_, rot_, T, H, Dh, -1.f));
      ok(layers::rotary(t2_, rot_, T, H, Dh, -1.f));
      ok(layers::rmsnorm_backward(a.q, a.rstd_q, t1_, dq_, T * H, Dh, false));
      ok(layers::rmsnorm_backward(a.k, a.rstd_k, t2_, dk_, T * H, Dh, false));
      copy(t1_, dv_, TC);
      ok(layers::scale(t1_, S(p + "attn_lambda"), 1, TC));
      prof_.mark(Profiler::kEmbed);
      ok(layers::embedding_backward(t1_, ixv_, G(ve_name(i)), C));
      prof_.mark(Profiler::kNormMix);
      ok(layers::scale(dv_, S(p + "attn_lambda"), 0, TC));
      ok(layers::rmsnorm_forward(a.x_mix, t2_, a.rstd_h, T, C, (float)cfg_.eps));  // h, the forward's bits again
      // q, k, v = h Wq, h Wk, h Wv
      prof_.mark(Profiler::kMatmul);
      mm_(dq_, W(p + "wq"), dh_, T, C, C, false, true);
      mm_(dk_, W(p + "wk"), dh_, T, C, C, false, true, true);
      mm_(dv_, W(p + "wv"), dh_, T, C, C, false, true, true);
      mm_(t2_, dq_, G(p + "wq"), C, C, T, true, false, true, true);
      mm_(t2_, dk_, G(p + "wk"), C, C, T, true, false, true, true);
      mm_(t2_, dv_, G(p + "wv"), C, C, T, true, false, true, true);
      prof_.mark(Profiler::kNormMix);
      ok(layers::rmsnorm_backward(a.x_mix, a.rstd_h, dh_, dx_, T, C, true));
      // x_mix = l0 x_in + l1 x0
      ok(layers::dot(dx_, a.x_in, TC, G(p + "lambda"), partial_, true));
      ok(layers::dot(dx_, x0_, TC, G(p + "lambda") + 1, partial_, true));
      ok(layers::skip_add(dx0_, dx_, S(p + "lambda"), 1, TC));
      ok(layers::scale(dx_, S(p + "lambda"), 0, TC));
      // x_in = x_prev + s_j pushed
      if (i >= L / 2) {
        const int j = i - L / 2, src = L - 1 - i;
        ok(layers::dot(dx_, pushed_[src], TC, G("skip") + j, partial_, true));
        ok(layers::skip_add(dpushed_[src], dx_, S("skip"), j, TC));
      }
      if (ready) ready(i);
    }
    ok(layers::skip_add(dx_, dx0_, one_, 0, TC));
    ok(layers::rmsnorm_backward(emb_, rstd_e_, dx_, t1_, T, C, false));
    prof_.mark(Profiler::kEmbed);
    ok(layers::embedding_backward(t1_, ixv_, G("embed"), C));
    if (ready) ready(-1);
    prof_.mark(Profiler::kHost);
    cuda_check(cudaStreamSynchronize(0), "backward");  // the compute stream only: a gradient exchange may still run
  }

  // Section marks of the step (train_gpt --profile); the trainer adds the optimiser's.
  Profiler& profiler() { return prof_; }

 private:
  struct Acts {  // what the backward needs of one layer
    bf16 *x_in, *x_mix, *q, *k, *qn, *kn, *v_lin, *y, *x_attn, *u, *r;  // h, h2, ve, v: recomputed
    float *rstd_h, *rstd_q, *rstd_k, *rstd_h2, *lse;
  };
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
  static void copy(bf16* dst, const bf16* src, size_t n) {
    cuda_check(cudaMemcpyAsync(dst, src, n * sizeof(bf16), cudaMemcpyDeviceToDevice), "copy");
  }
  std::string ve_name(int i) const {
    const int L = cfg_.layers;
    return "value_embed." + std::to_string(i < L / 2 ? i : L - 1 - i);
  }
  attn::MaskDesc mask() const {
    attn::MaskDesc m;
    m.causal = cfg_.mask.causal;
    m.window = cfg_.mask.window;
    m.window_bidir = cfg_.mask.bidir;
    m.window_blocks = cfg_.mask.blocks;
    m.doc_ids = cfg_.mask.doc ? doc_ : nullptr;
    return m;
  }
  const bf16* W(const std::string& name) const { return w16_ + layout_.t(name).offset; }
  const float* S(const std::string& name) const { return w32_ + layout_.t(name).offset; }
  float* G(const std::string& name) const { return g32_ + layout_.t(name).offset; }

  model_ref::Config cfg_;
  model_ref::Params layout_;  // names, shapes and offsets only
  int T_, bos_, chunk_;
  layers::Matmul mm_;
  Profiler prof_;
  std::vector<void*> buffers_;
  std::vector<Acts> acts_;
  std::vector<bf16*> pushed_, dpushed_;
  bf16 *w16_, *emb_, *x0_, *x_, *hf_, *dhf_, *dx_, *dx0_, *dh_, *dy_, *dq_, *dk_, *dv_, *t1_, *t2_, *dr_, *du_, *dz_;
  float *w32_, *g32_, *rstd_e_, *rstd_f_, *loss_, *z_, *partial_, *one_;
  void* ws_;
  int *tokens_, *targets_, *doc_, *ix_buf_, *bad_;
  float* ix_partial_;
  layers::TokenIndexView ixv_;  // the last forward's token index
  float2* rot_;
};

}  // namespace gpt
