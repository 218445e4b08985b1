// Plain CPU reference of the speedrun model (docs/model.md), forward and backward in fp64.
// It is the yardstick for the CUDA model: simple loops, one operation at a time, every
// intermediate kept. Tiny configurations only (it stores T x T probabilities per head).
//
// Model, with norm(u) = u / sqrt(mean(u^2) + eps), eps = 2^-7 (PyTorch's default on bf16):
//   x = norm(E[tok]); x0 = x
//   layer i: (i >= L/2: x += s[i - L/2] * pushed[L - 1 - i])  x = l0 x + l1 x0
//            h = norm(x); q, k, v = h Wq, h Wk, h Wv; v = a0 v + a1 VE[table(i)][tok]
//            q, k: norm per head, rotary (base 10000, halves of the head, position t)
//            x += attention(q, k, v; mask) Wo;  x += relu(norm(x) Wfc)^2 Wproj
//            (i < L/2: push x)
//   logits = 30 tanh(norm(x) Whead / 30);  loss = mean cross-entropy against targets
// table(i) = i for i < L/2 and L - 1 - i after: [0,1,2,3,4,5,5,4,3,2,1,0] for L = 12.
// Linear layers act on row vectors: y = x W with W stored [in][out].
// The SparseAttnGate record's pieces, each a field of Config (docs/recipes.md, its recipe's
// section): N value tables (cfg.value_table(i), -1: v = a0 v); layers without attention (the
// block is x = l0 x + l1 x0, then the MLP); short windows (floor(W / 2), at least 1); the
// attention scale; the gate (head h's output times sigmoid(h[:G] Wg[:, h]) before Wo); the
// rotary's base and half-truncated form; logits 30 sigmoid(z / 7.5).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attention/reference.h"
#include "model/config.h"

namespace model_ref {

using model::Config;
using model::Tensor;

// The parameters' values in the model's layout (model/config.h), for the reference and the tests.
struct Params : model::Layout {
  std::vector<double> data;  // empty when built with allocate = false
  explicit Params(const Config& c, bool allocate = true) : model::Layout(c) {
    if (allocate) data.assign(size(), 0.0);
  }
  double* ptr(const std::string& name) { return data.data() + t(name).offset; }
  const double* ptr(const std::string& name) const { return data.data() + t(name).offset; }
  void init(uint64_t seed, bool zero_init_outputs = true) { data = model::init_values(*this, seed, zero_init_outputs); }
};

// Loss of one sequence (tokens[i] predicts targets[i]) under cfg.mask (documents from the bos
// tokens of `tokens`); fills grad (same layout as params) when
// grad != nullptr, and logits [T][vocab] (after the softcap) when logits != nullptr.
double forward_backward(const Params& p, const std::vector<int>& tokens, const std::vector<int>& targets,
                        std::vector<double>* grad, std::vector<double>* logits = nullptr);

}  // namespace model_ref
