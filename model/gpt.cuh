// The speedrun model on the GPU (docs/model.md), composed from the tested layers: parameters in
// the reference model's flat layout (model/reference_model.h: the same names, shapes and
// offsets) as bf16 for the matmuls and fp32 for the scalars; fp32 gradients in the same layout.
//
// Forward, per docs/model.md, on T tokens of one packed sequence:
//   x = norm(E[tok]); x0 = x; per layer: U-net skip, lambda mix, attention (q, k per-head norm,
//   rotary, value-embedding mix, fused masked attention), MLP (ReLU^2); the lm head in chunks
//   of rows whose bf16 head outputs live only inside the chunk (fused softcapped cross-entropy,
//   fp32 arithmetic). With gradients on, each chunk's backward (dz -> d(norm(x)), dWhead) runs
//   right there, so no T x vocab tensor outlives its chunk; backward() then walks the layers in
//   reverse. On Hopper the cross-entropy's first pass runs in the head product's epilogue
//   (gemm/epilogue_softcap_ce.cuh, then gemm/head_ce.cuh): the product writes g, whose rows scaled by c are dz, and the backward
//   takes g with the scales moved to its small operands (the final norm's backward scales dh's
//   rows, dWhead takes diag(c) h); elsewhere the product writes z and softcap_ce.cuh writes dz
//   over it.
// Gradients accumulate (+=) until zero_grad(), as gradient accumulation over micro-steps needs.
// The host never waits for the GPU inside enqueue_forward() and backward(): the sequence's
// uploads go through pinned buffers and its losses come back into pinned memory, summed when
// they land (take_losses()), so the host prepares the next sequence while the GPU works and the
// GPU never sits idle between sequences (forward() is the same with the wait, for tests).
// Activations kept for the backward: (9 C + 1 hidden) x T bf16 a layer (plus C x T for the
// layers that take a U-net skip): x_mix, h, qn, kn, v_lin, v, y, x_attn, h2 and r = relu(u)^2.
// The MLP's pre-activation u (4 C) is not kept: its backward needs only max(u, 0) = sqrt(r).
// Nor are q and k before their norm: attention's backward takes the norm's backward from qn and
// kn (attention/attention.h NormRotary). The value embedding ve is gathered from its table again
// where needed. On Hopper the MLP's ReLU^2 runs inside the epilogues of the products around it
// (forward r = relu(h Wfc)^2, backward du = 2 sqrt(r) dx Wproj^T), and q and k's norm + rotary
// inside the epilogue of the product that makes them (gemm/gemm.cuh), so neither u, dr nor
// q and k before the norm are ever written; elsewhere the products run through cuBLASLt and
// relu2.cuh and qk_norm_rotary.cuh apart.
// Element-wise work is fused where a tensor would otherwise make two round trips to memory
// (q/k norm + rotary, value embedding + mix, U-net skip + lambda mix + norm, the mixes' backwards with their
// scalar gradients), and residual adds are written by the matmul (D = C + AB) instead of copies.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "common/cuda_check.h"
#include "gemm/gemm.cuh"
#include "gemm/head_ce.cuh"
#include "layers/embedding.cuh"
#include "layers/matmul.cuh"
#include "layers/mix.cuh"
#include "layers/mix_backward.cuh"
#include "layers/norm_mix.cuh"
#include "layers/qk_norm_rotary.cuh"
#include "layers/reduce.cuh"
#include "layers/relu2.cuh"
#include "layers/rmsnorm.cuh"
#include "layers/rotary.cuh"
#include "layers/softcap_ce.cuh"
#include "layers/value_embed_backward.cuh"
#include "model/batch.h"
#include "model/config.h"
#include "model/parameters.h"
#include "model/profile.h"

namespace gpt {

using layers::bf16;

using ::cuda_check;  // common/cuda_check.h

static_assert(model::kIgnoreTarget == layers::kIgnoreTarget, "the batch's dropped target is the loss kernel's ignored one");

// Where the bf16 weights, which a data-parallel exchange gathers from the ranks, are allocated
// when not by cudaMalloc: the exchange's copy engines need memory that every rank can map
// (train/data_parallel.cuh). alloc returns nullptr when it cannot.
struct ExchangeAllocator {
  std::function<void*(size_t bytes)> alloc;
  std::function<void(void*)> free;
};

class Model {
 public:
  // T: tokens per forward (documents start at cfg.mask.bos tokens); head_chunk: rows of the lm
  // head computed at once (16384 x 50304 bf16: 1.6 GB, reused by every chunk); exchange: the
  // allocator of the bf16 weights (nullptr: cudaMalloc).
  Model(const model::Config& cfg, int T, int head_chunk = 16384, const ExchangeAllocator* exchange = nullptr)
      : cfg_(cfg), layout_(cfg), at_(resolve(layout_, cfg.layers)), T_(T), chunk_(std::min(T, head_chunk)) {
    if (cfg.head_dim() != 64 && cfg.head_dim() != 128) throw std::invalid_argument("head dim must be 64 or 128 (attention kernel)");
    if (cfg.width % 8 || cfg.hidden % 8 || cfg.vocab % 8) throw std::invalid_argument("width, hidden and vocab must be multiples of 8");
    const size_t n = layout_.size(), TC = (size_t)T * cfg.width, TF = (size_t)T * cfg.hidden, TH = (size_t)T * cfg.heads;
    w16_ = exchange ? static_cast<bf16*>(exchange->alloc(n * sizeof(bf16))) : nullptr;
    if (w16_) exchange_free_ = exchange->free;
    else alloc(&w16_, n * sizeof(bf16));  // (then the exchange's all-gathers run as kernels)
    alloc(&w32_, n * sizeof(float));
    alloc(&g32_, n * sizeof(float));
    for (bf16** p : {&emb_, &x0_, &x_, &hf_, &dhf_, &dx_, &dx0_, &dh_, &dy_, &dq_, &dk_, &dv_, &t1_}) alloc(p, TC * sizeof(bf16));
    alloc(&du_, TF * sizeof(bf16));
    set_fused_mlp(gemm::available());  // the unfused path allocates dr_
    set_fused_head(gemm::available());
    acts_.resize(cfg.layers);
    for (int i = 0; i < cfg.layers; i++) {
      Acts& a = acts_[i];
      if (i >= cfg.layers / 2) alloc(&a.x_in_own, TC * sizeof(bf16));  // x_prev + s pushed; others alias (forward)
      for (bf16** p : {&a.x_mix, &a.h, &a.v, &a.y, &a.x_attn, &a.h2}) alloc(p, TC * sizeof(bf16));
      // qn, kn, v_lin one after another: the projection writes them at a stride of T x C (q and k
      // normed and rotated in its epilogue, or by a pass in place after it)
      alloc(&a.qn, 3 * TC * sizeof(bf16));
      a.kn = a.qn + TC, a.v_lin = a.kn + TC;
      alloc(&a.r, TF * sizeof(bf16));
      for (float** p : {&a.rstd_h, &a.rstd_h2}) alloc(p, (size_t)T * sizeof(float));
      alloc(&a.rstd_q, 2 * TH * sizeof(float));  // q's, then k's (as the fused projection writes them)
      a.rstd_k = a.rstd_q + TH;
      alloc(&a.lse, TH * sizeof(float));
    }
    pushed_.resize(cfg.layers / 2);
    dpushed_.resize(cfg.layers / 2 - 1);  // the source of skip 0 is x_prev itself: its gradient joins dx_ directly
    for (auto& p : pushed_) alloc(&p, TC * sizeof(bf16));
    for (auto& p : dpushed_) alloc(&p, TC * sizeof(bf16));
    for (float** p : {&rstd_e_, &rstd_f_, &loss_}) alloc(p, (size_t)T * sizeof(float));
    alloc(&z_, (size_t)chunk_ * cfg.vocab * sizeof(bf16));  // z, then dz in place (or g of the fused head)
    alloc(&partial_, 3 * layers::kDotBlocks * sizeof(float));
    alloc(&ws_, attn::backward_workspace_bytes(T, cfg.heads, cfg.head_dim()));
    for (int** p : {&tokens_, &targets_, &doc_}) alloc(p, (size_t)T * sizeof(int));
    alloc(&doc_spans_, (size_t)T * sizeof(attn::DocSpan));
    alloc(&ix_buf_, layers::TokenIndex::max_packed(T) * sizeof(int));
    alloc(&ix_partial_, layers::TokenIndex::max_slots(T) * cfg.width * sizeof(float));
    alloc(&vdot_partial_, 2 * layers::TokenIndex::max_chunks(T) * sizeof(float));
    alloc(&bad_, sizeof(int));
    for (Staging& st : staging_) {
      st = {pinned<int>(T), pinned<int>(T), pinned<int>(T), pinned<int>(layers::TokenIndex::max_packed(T)), new_event()};
      events_.push_back(st.copied);
    }
    auto tab = layers::rotary_table(T, cfg.head_dim());
    alloc(&rot_, tab.size() * sizeof(float2));
    cuda_check(cudaMemcpy(rot_, tab.data(), tab.size() * sizeof(float2), cudaMemcpyHostToDevice), "rotary table");
    set_fused_qkv(gemm::available() && gemm::qkv_norm_rotary_shape(cfg.width, cfg.head_dim()));
    zero_grad();
  }
  ~Model() {
    cudaDeviceSynchronize();  // no copy into or out of the pinned buffers is left in flight
    for (void* p : buffers_) cudaFree(p);
    if (exchange_free_) exchange_free_(w16_);
    for (void* p : pinned_) cudaFreeHost(p);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Uploads parameter values in the model's layout (model::init_values, or a reference's).
  void load(const std::vector<double>& values) {
    if (values.size() != layout_.size()) throw std::invalid_argument("load: parameters of another configuration");
    std::vector<bf16> h16(values.size());
    std::vector<float> h32(values.size());
    for (size_t i = 0; i < values.size(); i++) {
      h16[i] = __float2bfloat16((float)values[i]);
      h32[i] = (float)values[i];
    }
    cuda_check(cudaMemcpy(w16_, h16.data(), h16.size() * sizeof(bf16), cudaMemcpyHostToDevice), "load");
    cuda_check(cudaMemcpy(w32_, h32.data(), h32.size() * sizeof(float), cudaMemcpyHostToDevice), "load");
  }
  // fp32 master weights to and from the host (checkpoints); loading also refreshes the bf16
  // copies with the same rounding the optimiser uses, so a resumed run computes the same bits.
  std::vector<float> download_master() const { return model::Parameters{w32_, w16_, g32_, layout_.size()}.download_master(); }
  void upload_master(const std::vector<float>& h) {
    if (h.size() != layout_.size()) throw std::invalid_argument("upload_master: parameters of another configuration");
    std::vector<bf16> h16(h.size());
    for (size_t i = 0; i < h.size(); i++) h16[i] = __float2bfloat16(h[i]);
    cuda_check(cudaMemcpy(w32_, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice), "upload master");
    cuda_check(cudaMemcpy(w16_, h16.data(), h16.size() * sizeof(bf16), cudaMemcpyHostToDevice), "upload master");
  }
  void zero_grad() { cuda_check(cudaMemset(g32_, 0, layout_.size() * sizeof(float)), "zero_grad"); }
  // device views of the parameters (fp32 masters, bf16 copies) and gradients, in the layout
  const model::Layout& layout() const { return layout_; }
  float* master() { return w32_; }
  bf16* weights() { return w16_; }
  float* grads() { return g32_; }
  model::Parameters parameters() { return {w32_, w16_, g32_, layout_.size()}; }  // the three, for the optimiser
  void set_window(int w) { cfg_.mask.window = w; }  // the window schedule changes it per step
  // The MLP's activation inside its two products (gemm/epilogue_relu2.cuh, Hopper; on by default
  // where the device runs it) or as the products through cuBLASLt and relu2.cuh apart (tests
  // compare the two).
  void set_fused_mlp(bool on) {
    if (on && !gemm::available()) throw std::invalid_argument("set_fused_mlp: this device cannot run the fused MLP products");
    fused_mlp_ = on;
    if (!on && !dr_) alloc(&dr_, (size_t)T_ * cfg_.hidden * sizeof(bf16));
  }
  bool fused_mlp() const { return fused_mlp_; }
  // q and k's per-head norm + rotary in the epilogue of the product that makes q, k and v
  // (gemm/epilogue_qk_norm_rotary.cuh, Hopper, widths a multiple of 256; on by default where
  // it runs), or the product through cuBLASLt and qk_norm_rotary.cuh's pass after it.
  void set_fused_qkv(bool on) {
    if (on && !(gemm::available() && gemm::qkv_norm_rotary_shape(cfg_.width, cfg_.head_dim())))
      throw std::invalid_argument("set_fused_qkv: this device or width cannot run the fused q, k, v product");
    fused_qkv_ = on;
    if (on && !rot16_) {
      const std::vector<uint32_t> ang = gemm::rotary_angles_fp16(T_, cfg_.head_dim());
      alloc(&rot16_, ang.size() * sizeof(uint32_t));
      cuda_check(cudaMemcpy(rot16_, ang.data(), ang.size() * sizeof(uint32_t), cudaMemcpyHostToDevice), "rotary angles");
    }
  }
  bool fused_qkv() const { return fused_qkv_; }
  // The lm head's product with the cross-entropy's first pass in its epilogue
  // (gemm/epilogue_softcap_ce.cuh and gemm/head_ce.cuh, Hopper; on by default where the device runs it), or the product through
  // cuBLASLt and softcap_ce.cuh apart (tests compare the two; a forward that returns z takes the
  // second).
  void set_fused_head(bool on) {
    if (on && !gemm::available()) throw std::invalid_argument("set_fused_head: this device cannot run the fused head");
    fused_head_ = on;
    if (on && !hs_) {
      alloc(&hs_, (size_t)chunk_ * cfg_.width * sizeof(bf16));
      alloc(&row_scale_, (size_t)T_ * sizeof(float));
      alloc(&head_scratch_, gemm::head_ce_scratch_floats(chunk_, cfg_.vocab) * sizeof(float));
    }
  }
  bool fused_head() const { return fused_head_; }
  // Whether the bf16 weights came from the exchange's allocator (the constructor's `exchange`).
  bool weights_from_exchange() const { return (bool)exchange_free_; }
  // How the host waits for an event of the compute stream (an upload buffer's reuse, a loss's
  // read-back): cudaEventSynchronize unless set. A data-parallel trainer installs a wait with a
  // deadline (train/data_parallel.cuh wait_event): a forward may wait on the GPU for weights
  // that come from the peers (set_before_stage), so these events can depend on them.
  using HostWait = std::function<void(cudaEvent_t, const char* what)>;
  void set_host_wait(HostWait wait) { host_wait_ = std::move(wait); }
  // Called by each forward before it reads a stage's weights, on the host as it enqueues them:
  // stage -1 before the embedding, i before layer i, L before the head. A data-parallel trainer
  // makes the compute stream wait there for those weights to arrive from their ranks (train/trainer.cuh),
  // so that the next step's forward starts while the later layers' weights are still on the wire.
  // Empty: no call.
  void set_before_stage(std::function<void(int stage)> f) { before_stage_ = std::move(f); }
  std::vector<float> gradients() const {
    std::vector<float> g(layout_.size());
    cuda_check(cudaMemcpy(g.data(), g32_, g.size() * sizeof(float), cudaMemcpyDeviceToHost), "gradients");
    return g;
  }

  // Mean loss over the batch's kept targets (model/batch.h; all T without a prefix; 0 when it
  // keeps none). grad_scale != 0 also runs the head's backward for a loss scaled by grad_scale
  // (1 / kept for the mean of one sequence; 1 / (kept * micro-steps * ranks) for a step, the
  // mean of the micro-steps' means). z_out, when given, receives the head's output before the
  // softcap (bf16 values), [T][vocab]. Waits for the GPU; enqueue_forward() does not.
  double forward(const model::Batch& batch, float grad_scale = 0.f, std::vector<float>* z_out = nullptr) {
    if (summed_ != issued_ || !finished_.empty()) throw std::logic_error("forward: enqueued forwards' losses not taken yet");
    enqueue_forward(batch, grad_scale, z_out);
    return take_losses()[0];
  }
  // The same forward, enqueued on the stream without waiting for the GPU: the host goes on to
  // prepare the next sequence while the GPU runs this one. Its mean loss comes from take_losses().
  // The uploads go through pinned buffers, two sets used in turn (a set is refilled once its
  // copies of two forwards ago are done); the per-position losses come back into a pinned buffer
  // of their own, summed on the host as they land.
  void enqueue_forward(const model::Batch& batch, float grad_scale = 0.f, std::vector<float>* z_out = nullptr) {
    upload(batch);
    if (before_stage_) before_stage_(-1);
    forward_embedding();
    // The residual stream is written by the matmuls' adds (D = C + AB) straight into the tensor
    // that keeps it, never copied: layer i < L/2 writes its output into pushed_[i] (the U-net
    // skip source, and layer i+1's input); later layers write x_, which the next layer's skip
    // add reads into its own x_in.
    const bf16* x = x0_;  // the stream entering layer i
    for (int i = 0; i < cfg_.layers; i++) {
      if (before_stage_) before_stage_(i);
      forward_attention(i, x);
      x = forward_mlp(i);
    }
    if (before_stage_) before_stage_(cfg_.layers);
    forward_head(x, grad_scale, z_out);
    read_back_losses(batch.kept_targets);
  }
  // The mean losses of the forwards enqueued since the last call, in order (waits for the GPU to
  // finish them). Throws if one of them met a target id outside the vocabulary.
  std::vector<double> take_losses() {
    finish_losses(0);
    std::vector<double> out;
    out.swap(finished_);
    return out;
  }
  // The same on tokens and targets given apart (tests): the batch is built with the model's mask.
  double forward(const std::vector<int>& tokens, const std::vector<int>& targets, float grad_scale = 0.f,
                 std::vector<float>* z_out = nullptr) {
    if ((int)tokens.size() != T_ || (int)targets.size() != T_) throw std::invalid_argument("forward: want T tokens and targets");
    model::Batch b;
    b.build(tokens, targets, cfg_.mask);
    return forward(b, grad_scale, z_out);
  }

  // Backward of the last forward (which must have had grad_scale != 0); adds into the gradients.
  // ready(i), when given, is called once layer i's gradients are final (enqueued on the compute
  // stream, in order L-1 .. 0), and ready(-1) at the end: the data-parallel exchange starts there
  // (which tensors are final at which call: train/ready_point.h). at_attention(i), when given,
  // is called just before layer i's attention backward is enqueued: work enqueued on other
  // streams from there starts beside that kernel, whose blocks the GPU schedules one by one as
  // SMs free up (the persistent matmuls' grids wait for SMs another kernel holds).
  void backward(const std::function<void(int)>& ready = {}, const std::function<void(int)>& at_attention = {}) {
    const int T = T_, C = cfg_.width, H = cfg_.heads, Dh = cfg_.head_dim(), L = cfg_.layers, F = cfg_.hidden;
    prof_.mark(Profiler::kNormMix, "final norm backward");
    ok(layers::rmsnorm_backward(x_, rstd_f_, dhf_, dx_, T, C, false, 0, head_scaled_ ? row_scale_ : nullptr));
    for (int i = L - 1; i >= 0; i--) {
      const LayerParams& lp = at_.layer[i];
      Acts& a = acts_[i];
      // MLP: x = x_attn + relu(norm(x_attn) Wfc)^2 Wproj
      if (fused_mlp_) {
        prof_.mark(Profiler::kMatmul, "Wproj dX, ReLU^2 backward (fused)");
        ok(gemm::mlp_down_dx_relu2(dx_, W(lp.wproj), a.r, du_, T, C, F));
      } else {
        prof_.mark(Profiler::kMatmul, "Wproj dX (4C x C)");
        mm_.dX(dx_, W(lp.wproj), dr_, T, F, C);
      }
      prof_.mark(Profiler::kMatmul, "Wproj dW (4C x C)");
      mm_.dW(a.r, dx_, G(lp.wproj), T, F, C);
      if (!fused_mlp_) {
        prof_.mark(Profiler::kNormMix, "ReLU^2 backward");
        ok(layers::relu2_backward_from_r(a.r, dr_, du_, (size_t)T * F));
      }
      prof_.mark(Profiler::kMatmul, "Wfc dX (C x 4C)");
      mm_.dX(du_, W(lp.wfc), dh_, T, C, F);
      prof_.mark(Profiler::kMatmul, "Wfc dW (C x 4C)");
      mm_.dW(a.h2, du_, G(lp.wfc), T, C, F);
      prof_.mark(Profiler::kNormMix, "norm before the MLP backward");
      ok(layers::rmsnorm_backward(a.x_attn, a.rstd_h2, dh_, dx_, T, C, true));
      // attention: x_attn = x_mix + y Wo
      prof_.mark(Profiler::kMatmul, "Wo dX (C x C)");
      mm_.dX(dx_, W(lp.wo), dy_, T, C, C);
      prof_.mark(Profiler::kMatmul, "Wo dW (C x C)");
      mm_.dW(a.y, dx_, G(lp.wo), T, C, C);
      // dq_, dk_ are the gradients of q and k before their norm + rotary: attention does that
      // backward as dQ and dK leave it (attention.h NormRotary)
      prof_.mark(Profiler::kAttnBwd);
      const attn::NormRotary q_norm{a.rstd_q, rot_}, k_norm{a.rstd_k, rot_};
      if (at_attention) at_attention(i);
      ok(attn::attention_backward(a.qn, a.kn, a.v, a.y, dy_, a.lse, dq_, dk_, dv_, ws_, T, H, Dh, mask(), 0, &q_norm, &k_norm));
      // v = a0 v_lin + a1 ve (ve gathered from its table again): d ve = a1 dv goes straight into
      // the table's gradient (summed by token, rounded to bf16 as a tensor of it would be), the
      // scalars' gradients are summed, and dv_ becomes d v_lin in place, in one pass over dv by token
      prof_.mark(Profiler::kEmbed, "value embedding + mix backward");
      ok(layers::value_embed_backward(dv_, a.v_lin, W(lp.value_embed), ixv_, G(lp.value_embed), C, S(lp.attn_lambda),
                                      G(lp.attn_lambda), vdot_partial_));
      // q, k, v = h Wq, h Wk, h Wv
      prof_.mark(Profiler::kMatmul, "Wq, Wk, Wv dX (3 x C x C)");
      mm_.dX(dq_, W(lp.wq), dh_, T, C, C);
      mm_.dX(dk_, W(lp.wk), dh_, T, C, C, /*accumulate=*/true);
      mm_.dX(dv_, W(lp.wv), dh_, T, C, C, /*accumulate=*/true);
      prof_.mark(Profiler::kMatmul, "Wq, Wk, Wv dW (3 x C x C)");
      // three calls: as one batched call (layers::Batch) cuBLASLt drops the split-K these run
      // with, and the three products take longer (results/matmul/README.md, The q, k, v
      // projections batched, in the step)
      mm_.dW(a.h, dq_, G(lp.wq), T, C, C);
      mm_.dW(a.h, dk_, G(lp.wk), T, C, C);
      mm_.dW(a.h, dv_, G(lp.wv), T, C, C);
      // h = norm(x_mix), x_mix = l0 x_in + l1 x0: dx_ becomes d x_in, dx0_ gathers d x0; x_in of
      // a layer 0 < i < L/2 is pushed_[i - 1], whose skip gradient joins dx_ here (final by now).
      // Layers i >= L/2, x_in = x_prev + s_j pushed_[src], in the same pass: the skip weight's
      // gradient, and pushed's gradient kept for layer src + 1 above, or (src = L/2 - 1, where
      // pushed_[src] is x_prev) added to dx_
      const int j = i - L / 2, src = L - 1 - i;
      const layers::SkipGrad skip =
          i >= L / 2 ? layers::SkipGrad{pushed_[src], S(at_.skip), j, G(at_.skip), j > 0 ? dpushed_[src] : nullptr} : layers::SkipGrad{};
      prof_.mark(Profiler::kNormMix, i >= L / 2 ? "U-net skip + mix + norm backward" : "lambda mix + norm backward");
      // dx0_ is written by the first of these (layer L - 1) and, by the last (layer 0, whose x_in
      // is x0 itself), added into dx_, which then holds the whole gradient of x0
      const layers::Dx0 mode = i == L - 1 ? layers::Dx0::kFirst : i == 0 ? layers::Dx0::kFold : layers::Dx0::kAdd;
      ok(layers::rmsnorm_mix_backward(a.rstd_h, dh_, dx_, a.x_in, x0_, dx0_, S(lp.lambda), G(lp.lambda), T, C, partial_,
                                      i > 0 && i < L / 2 ? dpushed_[i - 1] : nullptr, skip, mode));
      if (ready) ready(i);
    }
    prof_.mark(Profiler::kNormMix, "norm of the embedding backward");
    ok(layers::rmsnorm_backward(emb_, rstd_e_, dx_, t1_, T, C, false));
    prof_.mark(Profiler::kEmbed, "embedding backward");
    ok(layers::embedding_backward(t1_, ixv_, G(at_.embed), C));
    if (ready) ready(-1);
    prof_.mark(Profiler::kHost);
    // No wait here: the host prepares the next sequence (its token index, document ids, pair
    // counts) while the GPU runs this backward; the next forward's uploads are ordered after it
    // on the same stream, and the trainer waits at the step's end.
  }

  // Section marks of the step (train_gpt --profile); the trainer adds the optimiser's.
  Profiler& profiler() { return prof_; }
  layers::Matmul& matmul() { return mm_; }

 private:
  struct Acts {  // what the backward needs of one layer
    const bf16* x_in;  // x0_, pushed_[i - 1] or x_in_own
    bf16 *x_in_own = nullptr, *x_mix, *h, *qn, *kn, *v_lin, *v, *y, *x_attn, *h2, *r;  // q, k (before the norm), u, ve: not kept
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
  // Host memory the GPU copies to or from while the host works on: pinned, so that the copies
  // are asynchronous; freed with the model.
  template <typename P>
  P* pinned(size_t count) {
    void* p = nullptr;
    if (cudaMallocHost(&p, count * sizeof(P)) != cudaSuccess)
      throw std::runtime_error("cannot allocate " + std::to_string((count * sizeof(P)) >> 10) + " KiB of pinned host memory");
    pinned_.push_back(p);
    return static_cast<P*>(p);
  }
  static cudaEvent_t new_event() {
    cudaEvent_t e;
    cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
    return e;
  }
  // One forward's upload buffers (tokens, targets, document ids, the packed token index).
  struct Staging {
    int *tokens, *targets, *doc, *packed;
    cudaEvent_t copied;
    bool used = false;
  };
  // One forward's losses on their way back: T per-position losses, the flag, the kept targets.
  struct Readback {
    float* loss;
    int* bad;
    cudaEvent_t landed;
    int kept = 0;
  };
  static constexpr size_t kMaxPending = 16;  // forwards whose losses may be on their way at once
  // Sums the losses of the pending forwards that have landed, oldest first, waiting for the
  // oldest while more than keep are pending; the means go to finished_ in order.
  void finish_losses(size_t keep) {
    while (summed_ < issued_) {
      Readback* rb = &readback_[summed_ % kMaxPending];
      if (issued_ - summed_ > keep) wait_host(rb->landed, "loss");
      else {
        const cudaError_t q = cudaEventQuery(rb->landed);
        if (q == cudaErrorNotReady) return;
        cuda_check(q, "loss");
      }
      summed_++;
      if (*rb->bad) throw std::runtime_error("forward: a target token id is outside the vocabulary");
      double sum = 0;
      for (int t = 0; t < T_; t++) sum += rb->loss[t];  // dropped targets add 0
      finished_.push_back(rb->kept > 0 ? sum / rb->kept : 0.0);
    }
  }
  void wait_host(cudaEvent_t e, const char* what) {
    if (host_wait_) host_wait_(e, what);
    else cuda_check(cudaEventSynchronize(e), what);
  }
  attn::MaskDesc mask() const { return model::attention_mask(cfg_.mask, cfg_.mask.window, doc_, doc_spans_); }
  // enqueue_forward()'s steps, each enqueued on the compute stream in the order it calls them.
  // The batch checked (sizes, window, token and target ids, its token index) and uploaded through
  // the next set of pinned buffers; then the document spans every layer's attention reads, the
  // token index's view and the flag of a target outside the vocabulary cleared.
  void upload(const model::Batch& batch) {
    const int T = T_, V = cfg_.vocab;
    const std::vector<int>& tokens = batch.tokens;
    if (batch.T() != T || (int)batch.targets.size() != T || (int)batch.doc_ids.size() != T)
      throw std::invalid_argument("forward: want a batch of T tokens");
    if (batch.window != cfg_.mask.window)
      throw std::invalid_argument("forward: the batch was built for window " + std::to_string(batch.window) + ", the model is at " +
                                  std::to_string(cfg_.mask.window) + " (set_window)");
    for (int t = 0; t < T; t++)
      if (tokens[t] < 0 || tokens[t] >= V) throw std::invalid_argument("forward: token id " + std::to_string(tokens[t]) + " outside the vocabulary");
    for (int t = 0; t < T; t++)
      if (batch.targets[t] != model::kIgnoreTarget && (batch.targets[t] < 0 || batch.targets[t] >= V))
        throw std::invalid_argument("forward: target id " + std::to_string(batch.targets[t]) + " outside the vocabulary");
    const layers::TokenIndex& ix = batch.token_index;
    if (ix.positions.size() != (size_t)T) throw std::invalid_argument("forward: the batch has no token index (Batch::build)");
    const std::vector<int> packed = ix.packed();
    if (packed.size() > layers::TokenIndex::max_packed(T)) throw std::logic_error("forward: token index larger than its bound");
    Staging& up = staging_[staged_++ % 2];
    if (up.used) wait_host(up.copied, "upload buffers");  // its copies of two forwards ago
    std::copy(tokens.begin(), tokens.end(), up.tokens);
    std::copy(batch.targets.begin(), batch.targets.end(), up.targets);
    std::copy(batch.doc_ids.begin(), batch.doc_ids.end(), up.doc);
    std::copy(packed.begin(), packed.end(), up.packed);
    cuda_check(cudaMemcpyAsync(tokens_, up.tokens, T * sizeof(int), cudaMemcpyHostToDevice, 0), "tokens");
    cuda_check(cudaMemcpyAsync(targets_, up.targets, T * sizeof(int), cudaMemcpyHostToDevice, 0), "targets");
    cuda_check(cudaMemcpyAsync(doc_, up.doc, T * sizeof(int), cudaMemcpyHostToDevice, 0), "doc ids");
    cuda_check(cudaMemcpyAsync(ix_buf_, up.packed, packed.size() * sizeof(int), cudaMemcpyHostToDevice, 0), "token index");
    cuda_check(cudaEventRecord(up.copied, 0), "upload buffers");
    up.used = true;
    ok(attn::doc_spans(doc_, doc_spans_, T));  // once per sequence: every layer's attention reads them
    ixv_ = layers::TokenIndexView(ix, ix_buf_, ix_partial_);
    cuda_check(cudaMemsetAsync(bad_, 0, sizeof(int), 0), "flag");
  }
  // x0 = norm(E[tok]).
  void forward_embedding() {
    const int T = T_, C = cfg_.width;
    const float eps = (float)cfg_.eps;
    prof_.mark(Profiler::kEmbed, "embedding");
    ok(layers::embedding_forward(W(at_.embed), tokens_, emb_, T, C));
    prof_.mark(Profiler::kNormMix, "norm of the embedding");
    ok(layers::rmsnorm_forward(emb_, x0_, rstd_e_, T, C, eps));
  }
  // Layer i's attention on the stream x entering it: the U-net skip (layers i >= L/2), lambda mix
  // and norm, q, k, v with q and k's norm + rotary, the value embedding's mix, the attention, and
  // x_attn = x_mix + y Wo.
  void forward_attention(int i, const bf16* x) {
    const int T = T_, C = cfg_.width, H = cfg_.heads, Dh = cfg_.head_dim(), L = cfg_.layers;
    const size_t TC = (size_t)T * C;
    const float eps = (float)cfg_.eps;
    const LayerParams& lp = at_.layer[i];
    Acts& a = acts_[i];
    // layers i >= L/2: x_in = x + s pushed_[L - 1 - i] (the U-net skip), made in the same pass
    a.x_in = i >= L / 2 ? a.x_in_own : x;
    const layers::SkipAdd skip = i >= L / 2 ? layers::SkipAdd{pushed_[L - 1 - i], S(at_.skip), i - L / 2, a.x_in_own} : layers::SkipAdd{};
    prof_.mark(Profiler::kNormMix, i >= L / 2 ? "U-net skip + lambda mix + norm" : "lambda mix + norm");
    ok(layers::mix_rmsnorm_forward(x, x0_, S(lp.lambda), a.x_mix, a.h, a.rstd_h, T, C, eps, skip));
    // Wq, Wk, Wv: one after another (resolve)
    if (fused_qkv_) {
      prof_.mark(Profiler::kMatmul, "q, k, v = h W, q, k normed (fused)");
      ok(gemm::qkv_norm_rotary(a.h, W(lp.wq), a.qn, a.rstd_q, rot16_, T, C, Dh, eps));
    } else {
      prof_.mark(Profiler::kMatmul, "q, k, v = h W (3 x C x C)");
      mm_.xW_batched(a.h, W(lp.wq), (long long)C * C, a.qn, (long long)TC, 3, T, C, C);
      prof_.mark(Profiler::kNormMix, "q, k norm + rotary");
      ok(layers::qk_norm_rotary_forward({a.qn, a.kn}, {a.qn, a.kn}, {a.rstd_q, a.rstd_k}, rot_, T, H, Dh, eps));  // in place
    }
    prof_.mark(Profiler::kNormMix, "value embedding mix");
    ok(layers::value_embed_mix(a.v_lin, W(lp.value_embed), tokens_, a.v, S(lp.attn_lambda), T, C));
    prof_.mark(Profiler::kAttnFwd);
    ok(attn::attention_forward(a.qn, a.kn, a.v, a.y, a.lse, T, H, Dh, mask()));
    prof_.mark(Profiler::kMatmul, "x + y Wo (C x C)");
    mm_.xW_plus(a.y, W(lp.wo), a.x_mix, a.x_attn, T, C, C);  // x_attn = x_mix + y Wo
  }
  // Layer i's MLP on its x_attn: norm, r = relu(h2 Wfc)^2, and the layer's output x_attn + r Wproj,
  // written where the next layer reads it (returned).
  const bf16* forward_mlp(int i) {
    const int T = T_, C = cfg_.width, L = cfg_.layers, F = cfg_.hidden;
    const float eps = (float)cfg_.eps;
    const LayerParams& lp = at_.layer[i];
    Acts& a = acts_[i];
    prof_.mark(Profiler::kNormMix, "norm before the MLP");
    ok(layers::rmsnorm_forward(a.x_attn, a.h2, a.rstd_h2, T, C, eps));
    if (fused_mlp_) {
      prof_.mark(Profiler::kMatmul, "r = relu(h Wfc)^2 (C x 4C, fused)");
      ok(gemm::mlp_up_relu2(a.h2, W(lp.wfc), a.r, T, C, F));
    } else {
      prof_.mark(Profiler::kMatmul, "u = h Wfc (C x 4C)");
      mm_.xW(a.h2, W(lp.wfc), dr_, T, C, F);  // u: dr_ is free until the backward
      prof_.mark(Profiler::kNormMix, "ReLU^2");
      ok(layers::relu2_forward(dr_, a.r, (size_t)T * F));  // only r is kept
    }
    prof_.mark(Profiler::kMatmul, "x + r Wproj (4C x C)");
    bf16* out = i < L / 2 ? pushed_[i] : x_;
    mm_.xW_plus(a.r, W(lp.wproj), a.x_attn, out, T, F, C);  // x_attn + r Wproj
    return out;
  }
  // The final norm of the last layer's output x and the lm head, chunk by chunk (fused: the
  // cross-entropy's first pass in the product's epilogue; else z, then softcap_ce.cuh), with
  // each chunk's backward when grad_scale != 0; z_out as forward()'s.
  void forward_head(const bf16* x, float grad_scale, std::vector<float>* z_out) {
    const int T = T_, C = cfg_.width, V = cfg_.vocab;
    const float eps = (float)cfg_.eps;
    prof_.mark(Profiler::kNormMix, "final norm");
    ok(layers::rmsnorm_forward(x, hf_, rstd_f_, T, C, eps));  // x is x_ (L is even, at least 2)
    if (z_out) z_out->resize((size_t)T * V);
    head_scaled_ = fused_head_ && !z_out;
    for (int r0 = 0; r0 < T && head_scaled_; r0 += chunk_) {
      const int rows = std::min(chunk_, T - r0);
      const bf16* h = hf_ + (size_t)r0 * C;
      const bool grad = grad_scale != 0.f;
      prof_.mark(Profiler::kHead, "g = CE'(h Whead), fused");
      ok(gemm::head_ce_forward(h, W(at_.head), targets_ + r0, z_, head_scratch_, rows, C, V));
      prof_.mark(Profiler::kHead, "cross-entropy: loss, row scales");
      ok(gemm::head_ce_finalize(head_scratch_, targets_ + r0, h, grad ? z_ : nullptr, grad ? hs_ : nullptr,
                                  grad ? row_scale_ + r0 : nullptr, loss_ + r0, rows, C, V, grad_scale, bad_));
      if (grad) {  // the head's backward for this chunk on g; dh's rows are scaled in backward()
        prof_.mark(Profiler::kHead, "head dX");
        mm_.dX(z_, W(at_.head), dhf_ + (size_t)r0 * C, rows, C, V);
        prof_.mark(Profiler::kHead, "head dW");
        mm_.dW(hs_, z_, G(at_.head), rows, C, V);
      }
    }
    for (int r0 = 0; r0 < T && !head_scaled_; r0 += chunk_) {
      const int rows = std::min(chunk_, T - r0);
      prof_.mark(Profiler::kHead, "z = h Whead");
      mm_.xW(hf_ + (size_t)r0 * C, W(at_.head), z_, rows, C, V);
      if (z_out) {
        std::vector<bf16> zh((size_t)rows * V);
        cuda_check(cudaMemcpy(zh.data(), z_, zh.size() * sizeof(bf16), cudaMemcpyDeviceToHost), "z");
        for (size_t i = 0; i < zh.size(); i++) (*z_out)[(size_t)r0 * V + i] = __bfloat162float(zh[i]);
      }
      prof_.mark(Profiler::kHead, "softcapped cross-entropy");
      ok(layers::softcap_ce(z_, targets_ + r0, grad_scale != 0.f ? z_ : nullptr, loss_ + r0, rows, V, grad_scale, bad_));
      if (grad_scale != 0.f) {  // the head's backward for this chunk; z_ now holds dz
        prof_.mark(Profiler::kHead, "head dX");
        mm_.dX(z_, W(at_.head), dhf_ + (size_t)r0 * C, rows, C, V);
        prof_.mark(Profiler::kHead, "head dW");
        mm_.dW(hf_ + (size_t)r0 * C, z_, G(at_.head), rows, C, V);
      }
    }
  }
  // The forward's losses (kept: its batch's kept targets) on their way back to the host.
  void read_back_losses(int kept) {
    const int T = T_;
    // the losses and the flag back into a pinned buffer: summed once they land (finish_losses)
    // forward i's buffer is readback_[i % kMaxPending], free once forward i - kMaxPending is summed
    finish_losses(kMaxPending - 1);  // the oldest waits only when kMaxPending are on their way
    if (readback_.size() < kMaxPending) {
      readback_.push_back({pinned<float>(T), pinned<int>(1), new_event()});
      events_.push_back(readback_.back().landed);
    }
    Readback* rb = &readback_[issued_++ % kMaxPending];
    rb->kept = kept;
    cuda_check(cudaMemcpyAsync(rb->loss, loss_, T * sizeof(float), cudaMemcpyDeviceToHost, 0), "loss");
    cuda_check(cudaMemcpyAsync(rb->bad, bad_, sizeof(int), cudaMemcpyDeviceToHost, 0), "flag");
    cuda_check(cudaEventRecord(rb->landed, 0), "loss");
    prof_.mark(Profiler::kHost);
  }
  // Where each parameter starts in the flat layout, looked up by name once (in the constructor),
  // so that a step finds its tensors by offset. W: the bf16 weights, S: the fp32 masters (the
  // scalars are read from them), G: the fp32 gradients.
  struct LayerParams {
    size_t wq, wk, wv, wo, wfc, wproj, lambda, attn_lambda, value_embed;  // value_embed: the table this layer uses
  };
  struct ParamOffsets {
    size_t embed, head, skip;
    std::vector<LayerParams> layer;
  };
  static ParamOffsets resolve(const model::Layout& layout, int L) {
    auto at = [&](const std::string& name) { return layout.t(name).offset; };
    ParamOffsets o{at("embed"), at("head"), at("skip"), {}};
    for (int i = 0; i < L; i++) {
      const std::string p = "layer" + std::to_string(i) + ".";
      o.layer.push_back({at(p + "wq"), at(p + "wk"), at(p + "wv"), at(p + "wo"), at(p + "wfc"), at(p + "wproj"), at(p + "lambda"),
                         at(p + "attn_lambda"), at("value_embed." + std::to_string(i < L / 2 ? i : L - 1 - i))});
      const LayerParams& lp = o.layer.back();
      const size_t CC = layout.t(p + "wq").size();
      if (lp.wk != lp.wq + CC || lp.wv != lp.wk + CC)  // the batched q, k, v projection needs them so
        throw std::logic_error("layout: " + p + "wq, wk, wv must follow one another");
    }
    return o;
  }
  const bf16* W(size_t offset) const { return w16_ + offset; }
  const float* S(size_t offset) const { return w32_ + offset; }
  float* G(size_t offset) const { return g32_ + offset; }

  model::Config cfg_;
  model::Layout layout_;
  ParamOffsets at_;           // resolve(layout_)
  int T_, chunk_;
  layers::Matmul mm_;
  Profiler prof_;
  std::vector<void*> buffers_, pinned_;
  std::function<void(void*)> exchange_free_;  // frees w16_ when an exchange allocator made it
  std::function<void(int)> before_stage_;
  HostWait host_wait_;
  std::vector<cudaEvent_t> events_;
  Staging staging_[2];
  unsigned staged_ = 0;                 // forwards uploaded so far (the set used next: staged_ % 2)
  std::vector<Readback> readback_;      // at most kMaxPending, used in turn
  size_t issued_ = 0, summed_ = 0;      // forwards whose losses were read back, and summed, so far
  std::vector<double> finished_;        // the means summed since take_losses() last ran
  std::vector<Acts> acts_;
  std::vector<bf16*> pushed_, dpushed_;
  bf16 *w16_, *emb_, *x0_, *x_, *hf_, *dhf_, *dx_, *dx0_, *dh_, *dy_, *dq_, *dk_, *dv_, *t1_, *du_, *z_;
  bf16* dr_ = nullptr;  // dr (and u in the forward) of the unfused MLP path only
  bool fused_mlp_ = false, fused_qkv_ = false;
  bool fused_head_ = false, head_scaled_ = false;  // the last forward's dhf_ rows want row_scale_
  bf16* hs_ = nullptr;                              // diag(c) h of a chunk (fused head only)
  float *row_scale_ = nullptr, *head_scratch_ = nullptr;
  float *w32_, *g32_, *rstd_e_, *rstd_f_, *loss_, *partial_;
  void* ws_;
  int *tokens_, *targets_, *doc_, *ix_buf_, *bad_;
  attn::DocSpan* doc_spans_;  // of doc_
  float* ix_partial_;
  float* vdot_partial_;  // value_embed_backward's per-chunk sums
  layers::TokenIndexView ixv_;  // the last forward's token index
  float2* rot_;
  uint32_t* rot16_ = nullptr;  // the fused q, k, v product's angles (gemm/epilogue_qk_norm_rotary.cuh rotary_angles_fp16)
};

}  // namespace gpt
