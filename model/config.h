// The model's own description, which the GPU model, the trainer and the fp64 references all build
// on (docs/model.md): its configuration and mask, the parameter layout (every parameter in one flat
// array, tensors as named slices of it, gradients in the same layout), the initial values, the
// optimiser's parameter groups and hyper-parameters, and the schedules.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace model {

struct MaskConfig {
  bool causal = true;
  int window = 0;         // 0: none; in tokens, or in blocks of 128 when blocks
  bool bidir = false;     // |q - k| < W instead of q - k < W
  bool blocks = false;
  bool documents = false;  // attend within documents; a document starts at each bos token
  int bos = 50256;         // GPT-2's <|endoftext|>
  // prefix-LM (docs/masks.md): the first `prefix` tokens of each document (of the sequence,
  // without documents) are not predicted (model/batch.h) and, with prefix_attention, see each
  // other both ways; 0: off. Needs causal.
  int prefix = 0;
  bool prefix_attention = true;
};

struct Config {
  int vocab = 64, width = 16, heads = 2, layers = 4, hidden = 64;
  double eps = 1.0 / 128.0;  // the norms' eps: 2^-7, PyTorch's default on bf16 tensors
  MaskConfig mask;
  // The pieces of the SparseAttnGate record's model (docs/recipes.md, its recipe's section), each
  // a recipe key; the initial values are the speedrun preset's model, which they leave as it was.
  int value_embeds = 0;                // value-embedding tables; 0: layers / 2 (every layer has one)
  bool value_embeds_repeated = false;  // the last value_embeds layers use tables 0, 1, ... (else L - 1 - i)
  std::vector<int> no_attention;       // layers whose block is its MLP alone (no attention, no Wq..Wo)
  std::vector<int> short_window;       // layers whose window is half the mask's (floor, at least 1)
  double init_bound = 1.0;             // linear weights uniform in +-init_bound / sqrt(fan_in) (init_values)
  double attn_scale = 0;               // the attention logits' scale; 0: 1 / sqrt(head_dim)
  int gate_dims = 0;                   // attention gate: head h's output times sigmoid(h[:gate_dims] . W_gate[:, h]); 0: none
  bool rotary_half = false;            // half-truncated rotary: D/4 frequencies base^(-j/(D/4 - 1)), then D/4 of zero
  double rotary_base = 10000;          // the rotary frequencies' base
  bool logit_sigmoid = false;          // logits 30 sigmoid(z / 7.5), else 30 tanh(z / 30)
  int head_dim() const { return width / heads; }
  int value_tables() const { return value_embeds ? value_embeds : layers / 2; }
  int value_table(int layer) const;  // the value-embedding table layer i adds, -1 for none
  bool has_attention(int layer) const;
  bool has_short_window(int layer) const;
};

struct Tensor {
  std::string name;
  size_t offset, rows, cols;
  size_t size() const { return rows * cols; }
};

// The parameters' names, shapes and offsets. Every tensor starts at a multiple of 64 elements,
// so that device copies give the matmuls the 16-byte-aligned pointers cuBLASLt needs.
//   embed [V][C]; value_embed.j [V][C] (j < cfg.value_tables()); per layer i: layer{i}.wq, wk,
//   wv, wo [C][C] (where the layer has attention), gate [G][H] (there, when cfg.gate_dims G > 0),
//   wfc [C][F], wproj [F][C], lambda [2], attn_lambda [2]; skip [L/2]; head [C][V]
struct Layout {
  Config cfg;
  std::vector<Tensor> tensors;
  explicit Layout(const Config& c);
  const Tensor& t(const std::string& name) const;  // throws std::invalid_argument for an unknown name
  size_t size() const { return size_; }             // elements, gaps included
 private:
  size_t size_ = 0;
};

// Initial values (docs/model.md): embeddings N(0, 1); linear weights uniform in
// +-cfg.init_bound/sqrt(fan_in), except Wo, Wproj, the attention gate and the head at zero
// (unless zero_init_outputs is false, for tests); lambda [1, 0], attn_lambda [0.5, 0.5], skip 1.
std::vector<double> init_values(const Layout& layout, uint64_t seed, bool zero_init_outputs = true);

// The optimiser's groups: Adam for the embeddings, the head and the scalars, Muon for the
// block matrices.
enum class ParamGroup { kEmbed, kHead, kScalar, kMatrix };
ParamGroup group_of(const Tensor& t);

struct OptimizerHyper {
  double lr_embed = 0.6, lr_head = 0.008, lr_scalar = 0.04, lr_muon = 0.05;
  double beta1 = 0.8, beta2 = 0.95, adam_eps = 1e-8;
  // The SparseAttnGate record's forms (false / true: the ones before it):
  //   adam_eps_scaled: w -= lr sqrt(bc2) / bc1 * m / (sqrt(v) + eps), else lr (m / bc1) / (sqrt(v / bc2) + eps);
  //   muon_fan_scale: Muon's lr times sqrt(max(1, fan_out / fan_in)), else times 1.
  bool adam_eps_scaled = false, muon_fan_scale = true;
};

// For the update made at step s (0-based) of `steps` (the record's values as the defaults):
//   lr multiplier 1, then (steps - s) / cooldown over the last `cooldown` steps;
//   Muon momentum momentum_start -> momentum_end (0.85 -> 0.95) linearly over the first
//   momentum_warmup steps;
//   window (blocks of 128) N(s) = floor(((1 - f) window_start + f window_end + 64) / 128),
//   f = s / steps, window_start 64 and window_end 1792 tokens (+ 64: to the nearest block).
struct Schedule {
  int steps = 1480, cooldown = 600, momentum_warmup = 300;
  double momentum_start = 0.85, momentum_end = 0.95;
  int window_start = 64, window_end = 1792;
  // The SparseAttnGate record's forms (their zero / false values leave the ones above):
  //   cooldown_frac > 0: lr multiplier 1 while x = s / steps < 1 - cooldown_frac, then
  //   w + (1 - w) lr_floor with w = (1 - x) / cooldown_frac (cooldown unused);
  //   lr_floor > 0 with cooldown_frac 0: w + (1 - w) lr_floor with w = (steps - s) / cooldown;
  //   window_ceil: N(s) = max(1, ceil(((1 - f) window_start + f window_end) / 128)).
  double cooldown_frac = 0, lr_floor = 0;
  bool window_ceil = false;
  double lr_multiplier(int step) const;
  double muon_momentum(int step) const;
  int window_blocks(int step) const;
};

}  // namespace model
