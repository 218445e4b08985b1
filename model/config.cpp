// The model's description: see config.h.
#include "model/config.h"

#include <algorithm>
#include <cmath>
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
  if (c.value_embeds < 0 || c.value_embeds > L / 2) throw std::invalid_argument("value_embeds must be from 0 to layers / 2");
  if (c.gate_dims < 0 || c.gate_dims > C) throw std::invalid_argument("gate_dims must be from 0 to the width");
  for (const std::vector<int>* list : {&c.no_attention, &c.short_window})
    for (int i : *list)
      if (i < 0 || i >= L) throw std::invalid_argument("a layer list names layer " + std::to_string(i) + " of " + std::to_string(L));
  add("embed", V, C);
  for (int j = 0; j < c.value_tables(); j++) add("value_embed." + std::to_string(j), V, C);
  for (int i = 0; i < L; i++) {
    const std::string p = "layer" + std::to_string(i) + ".";
    if (c.has_attention(i)) {
      add(p + "wq", C, C);
      add(p + "wk", C, C);
      add(p + "wv", C, C);
      add(p + "wo", C, C);
      if (c.gate_dims > 0) add(p + "gate", c.gate_dims, c.heads);
    }
    add(p + "wfc", C, F);
    add(p + "wproj", F, C);
    add(p + "lambda", 1, 2);
    add(p + "attn_lambda", 1, 2);
  }
  add("skip", 1, L / 2);
  add("head", C, V);
  size_ = off;
}

int Config::value_table(int layer) const {
  const int n = value_tables();
  if (layer < n) return layer;
  if (layer >= layers - n) return value_embeds_repeated ? layer - (layers - n) : layers - 1 - layer;
  return -1;
}
bool Config::has_attention(int layer) const { return std::find(no_attention.begin(), no_attention.end(), layer) == no_attention.end(); }
bool Config::has_short_window(int layer) const { return std::find(short_window.begin(), short_window.end(), layer) != short_window.end(); }

const Tensor& Layout::t(const std::string& name) const {
  for (auto& x : tensors)
    if (x.name == name) return x;
  throw std::invalid_argument("no parameter named " + name);
}

// The random values come in chunks of kInitChunk values, each from its own generator seeded by
// (seed, tensor index, chunk index), so that they are the same whatever the number of threads
// that fill them (OpenMP). At the speedrun's size (394M values) one sequential generator
// (std::mt19937_64) was most of the trainer's start-up; this way the cores share the work, and
// much of what is left is the first touch of the vector's 3.2 GB.
namespace {
constexpr size_t kInitChunk = size_t(1) << 16;

// splitmix64 (Steele, Lea and Flood, 2014): one 64-bit word of state, full period 2^64
struct SplitMix64 {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (double)(next() >> 11) * 0x1.0p-53; }  // [0, 1), 53 random bits
};

// Chunk c of tensor j: its generator, its state mixed from the seed and (j, c).
SplitMix64 chunk_generator(uint64_t seed, size_t j, size_t c) {
  SplitMix64 h{seed ^ (0x632be59bd9b4e019ull * (((uint64_t)j << 32) | (uint64_t)c))};
  h.next();
  return SplitMix64{h.next()};
}
}  // namespace

std::vector<double> init_values(const Layout& layout, uint64_t seed, bool zero_init_outputs) {
  std::vector<double> v(layout.size(), 0.0);
  struct Chunk {
    size_t j, c;  // tensor, chunk
    bool normal;  // N(0, 1), else uniform in [-bound, bound)
    double bound;
  };
  std::vector<Chunk> chunks;
  for (size_t j = 0; j < layout.tensors.size(); j++) {
    const Tensor& x = layout.tensors[j];
    double* d = v.data() + x.offset;
    const std::string& n = x.name;
    auto ends = [&](const char* suf) { return n.size() >= std::string(suf).size() && n.compare(n.size() - std::string(suf).size(), std::string::npos, suf) == 0; };
    const bool normal = n == "embed" || n.rfind("value_embed", 0) == 0;
    if (!normal) {
      if (ends(".lambda")) {
        d[0] = 1.0, d[1] = 0.0;
        continue;
      }
      if (ends(".attn_lambda")) {
        d[0] = 0.5, d[1] = 0.5;
        continue;
      }
      if (n == "skip") {
        for (size_t i = 0; i < x.size(); i++) d[i] = 1.0;
        continue;
      }
      if (zero_init_outputs && (ends(".wo") || ends(".wproj") || ends(".gate") || n == "head")) continue;  // zero
    }
    const double bound = layout.cfg.init_bound / std::sqrt((double)x.rows);  // (init_bound 1: 1 / sqrt(fan_in), to the bit)
    for (size_t c = 0; c * kInitChunk < x.size(); c++) chunks.push_back({j, c, normal, bound});
  }
#pragma omp parallel for schedule(dynamic, 4)
  for (size_t k = 0; k < chunks.size(); k++) {
    const Chunk& ch = chunks[k];
    const Tensor& x = layout.tensors[ch.j];
    const size_t i0 = ch.c * kInitChunk, i1 = std::min(x.size(), i0 + kInitChunk);
    double* d = v.data() + x.offset;
    SplitMix64 g = chunk_generator(seed, ch.j, ch.c);
    if (ch.normal) {
      for (size_t i = i0; i < i1; i += 2) {  // Box-Muller: two normals from two uniforms
        const double r = std::sqrt(-2.0 * std::log(1.0 - g.uniform())), a = 6.283185307179586 * g.uniform();
        d[i] = r * std::cos(a);
        if (i + 1 < i1) d[i + 1] = r * std::sin(a);
      }
    } else {
      for (size_t i = i0; i < i1; i++) d[i] = (2.0 * g.uniform() - 1.0) * ch.bound;
    }
  }
  return v;
}

double Schedule::lr_multiplier(int step) const {
  if (cooldown_frac > 0) {  // the SparseAttnGate record's form, its operations in its order
    const double x = (double)step / steps;
    if (x < 1 - cooldown_frac) return 1.0;
    const double w = (1 - x) / cooldown_frac;
    return w * 1.0 + (1 - w) * lr_floor;
  }
  if (step < steps - cooldown) return 1.0;
  const double w = (double)(steps - step) / cooldown;
  return lr_floor > 0 ? w * 1.0 + (1 - w) * lr_floor : w;
}
double Schedule::muon_momentum(int step) const {
  const double f = std::min(1.0, (double)step / momentum_warmup);
  return (1 - f) * momentum_start + f * momentum_end;
}
int Schedule::window_blocks(int step) const {
  const double f = (double)step / steps;
  if (window_ceil)  // the SparseAttnGate record: the next multiple of 128 tokens, at least 128
    return std::max(1, (int)std::ceil(((1 - f) * window_start + f * window_end) / 128));
  return (int)std::floor(((1 - f) * window_start + f * window_end + 64) / 128);
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
