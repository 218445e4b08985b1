// The model's description: see config.h.
#include "model/config.h"

#include <cmath>
#include <random>
#include <stdexcept>

namespace model {

Layout::Layout(const Config& c) : cfg(c) {
  if (c.layers < 2 || c.layers % 2) throw std::invalid_argument("layers must be even and >= 2");
  if (c.width % c.heads || c.head_dim() % 2) throw std::invalid_argument("width / heads must be an even integer");
  size_t off = 0;
  // every tensor starts at a multiple of 64 elements, so that device copies of the layout give
  // the matmuls the 16-byte-aligned pointers cuBLASLt needs (the gaps stay zero)
  auto add = [&](const std::string& name, size_t r, size_t cols) {
    off = (off + 63) / 64 * 64;
    tensors.push_back({name, off, r, cols});
    off += r * cols;
  };
  const int V = c.vocab, C = c.width, L = c.layers, F = c.hidden;
  add("embed", V, C);
  for (int j = 0; j < L / 2; j++) add("value_embed." + std::to_string(j), V, C);
  for (int i = 0; i < L; i++) {
    const std::string p = "layer" + std::to_string(i) + ".";
    add(p + "wq", C, C);
    add(p + "wk", C, C);
    add(p + "wv", C, C);
    add(p + "wo", C, C);
    add(p + "wfc", C, F);
    add(p + "wproj", F, C);
    add(p + "lambda", 1, 2);
    add(p + "attn_lambda", 1, 2);
  }
  add("skip", 1, L / 2);
  add("head", C, V);
  size_ = off;
}

const Tensor& Layout::t(const std::string& name) const {
  for (auto& x : tensors)
    if (x.name == name) return x;
  throw std::invalid_argument("no parameter named " + name);
}

std::vector<double> init_values(const Layout& layout, uint64_t seed, bool zero_init_outputs) {
  std::vector<double> v(layout.size(), 0.0);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (auto& x : layout.tensors) {
    double* d = v.data() + x.offset;
    const std::string& n = x.name;
    auto ends = [&](const char* suf) { return n.size() >= std::string(suf).size() && n.compare(n.size() - std::string(suf).size(), std::string::npos, suf) == 0; };
    if (n == "embed" || n.rfind("value_embed", 0) == 0) {
      for (size_t i = 0; i < x.size(); i++) d[i] = normal(rng);
    } else if (ends(".lambda")) {
      d[0] = 1.0, d[1] = 0.0;
    } else if (ends(".attn_lambda")) {
      d[0] = 0.5, d[1] = 0.5;
    } else if (n == "skip") {
      for (size_t i = 0; i < x.size(); i++) d[i] = 1.0;
    } else if (zero_init_outputs && (ends(".wo") || ends(".wproj") || n == "head")) {
      for (size_t i = 0; i < x.size(); i++) d[i] = 0.0;
    } else {
      std::uniform_real_distribution<double> u(-1.0 / std::sqrt((double)x.rows), 1.0 / std::sqrt((double)x.rows));
      for (size_t i = 0; i < x.size(); i++) d[i] = u(rng);
    }
  }
  return v;
}

double Schedule::lr_multiplier(int step) const {
  return step < steps - cooldown ? 1.0 : (double)(steps - step) / cooldown;
}
double Schedule::muon_momentum(int step) const {
  const double f = std::min(1.0, (double)step / momentum_warmup);
  return (1 - f) * 0.85 + f * 0.95;
}
int Schedule::window_blocks(int step) const {
  const double f = (double)step / steps;
  return (int)std::floor(((1 - f) * 64 + f * 1792 + 64) / 128);
}

static bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

ParamGroup group_of(const Tensor& t) {
  if (t.name == "embed" || t.name.rfind("value_embed", 0) == 0) return ParamGroup::kEmbed;
  if (t.name == "head") return ParamGroup::kHead;
  if (ends_with(t.name, "lambda") || t.name == "skip") return ParamGroup::kScalar;
  return ParamGroup::kMatrix;
}

}  // namespace model
