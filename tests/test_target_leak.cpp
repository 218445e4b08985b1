// The trainer's decision whether a mask lets a prediction see its own target
// (model/target_leak.h) against the fp64 references' own answers, on every combination of mask
// terms the flags allow (causal on/off; no window, uni or bi windows in tokens or blocks; documents
// on/off; no prefix, or a prefix with and without its attention; --prefix-tokens needs causal):
//
//   table:  the CPU attention reference's literal mask (attention/reference.cpp ref::keep, which
//           shares no code with mask.h) on T = 300 (three blocks of 128), with documents laid out
//           three ways (one document; random documents; a document edge at the block edge 128),
//           and the batch's kept targets: a leak is a kept target t + 1 whose position query t
//           keeps. The decision must equal "some layout leaks", and when it says yes the
//           one-document layout must leak at the very position it names.
//   model:  the fp64 reference model itself (model/reference_model.cpp) on T = 20: target t is
//           kept when changing it changes the loss, and position t + 1 is visible from t when
//           changing the token there changes the logits of row t. Both are exact tests (bits
//           equal or not): a masked key and a dropped target are skipped by the reference, never
//           multiplied by zero, so they leave the result bit-identical; a visible one changes it
//           (the output projections are non-zero). Positions whose next token starts a document
//           are not perturbed (that would move the documents); the table covers them.
// Then the cases named in docs/masks.md: every --causal 0 mask leaks, every prefix-LM mask does not.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "attention/reference.h"
#include "model/batch.h"
#include "model/reference_model.h"
#include "model/target_leak.h"
#include "tests/check.h"

namespace {

struct Combo {
  model::MaskConfig mask;
  int window;  // MaskConfig::window: tokens, or blocks with mask.blocks; 0: no window term
  std::string name() const {
    char b[160];
    std::snprintf(b, sizeof(b), "causal %d window %d %s %s docs %d prefix %d%s", mask.causal, window, mask.bidir ? "bi" : "uni",
                  mask.blocks ? "blocks" : "tokens", mask.documents, mask.prefix, mask.prefix && !mask.prefix_attention ? " (rule only)" : "");
    return b;
  }
};

// Every combination the flags allow, with the windows given for each granularity.
std::vector<Combo> combinations(const std::vector<int>& token_windows, const std::vector<int>& block_windows, const std::vector<int>& prefixes) {
  std::vector<Combo> out;
  for (int causal = 0; causal < 2; causal++)
    for (int blocks = 0; blocks < 2; blocks++)
      for (int bidir = 0; bidir < 2; bidir++)
        for (int w : blocks ? block_windows : token_windows)
          for (int docs = 0; docs < 2; docs++)
            for (int p : prefixes)
              for (int pa = 0; pa < 2; pa++) {
                if ((p > 0 && !causal) || (p == 0 && !pa)) continue;  // train/options.cpp refuses these
                Combo c;
                c.mask.causal = causal, c.mask.blocks = blocks, c.mask.bidir = bidir, c.mask.documents = docs, c.mask.bos = 0;
                c.mask.prefix = p, c.mask.prefix_attention = pa;
                c.window = w;
                out.push_back(c);
              }
  return out;
}

// Tokens of T + 1 positions (inputs [0, T), next tokens [1, T]) with documents starting at the
// given positions (BOS = 0) and no other BOS; the others distinct while T < vocab - 1 (a step of
// 5, prime to 63 and to 49999, from a random start).
std::vector<int> sequence(int T, const std::vector<int>& starts, int vocab, std::mt19937& rng) {
  std::vector<int> seq(T + 1);
  const int from = (int)(rng() % (vocab - 1));
  for (int i = 0; i <= T; i++) seq[i] = 1 + (int)((from + 5LL * i) % (vocab - 1));
  for (int s : starts) seq[s] = 0;
  return seq;
}

// The first leak of the literal table on one layout (-1: none).
int table_leak(const Combo& c, const std::vector<int>& seq) {
  const int T = (int)seq.size() - 1;
  const std::vector<int> in(seq.begin(), seq.end() - 1), next(seq.begin() + 1, seq.end());
  model::Batch batch(T);
  model::MaskConfig m = c.mask;
  m.window = c.window;
  batch.build(in, next, m);
  std::vector<int32_t> doc(T);
  attn::doc_ids_from_tokens(in.data(), T, doc.data(), m.bos);
  ref::Mask rm;  // as model/reference_model.cpp builds it from the configuration
  rm.causal = m.causal, rm.window = c.window, rm.bidir = m.bidir, rm.blocks = m.blocks, rm.prefix = m.prefix_attention ? m.prefix : 0;
  rm.doc = m.documents ? doc.data() : nullptr;
  for (int t = 0; t + 1 < T; t++)
    if (batch.targets[t] != model::kIgnoreTarget && ref::keep(rm, t, t + 1)) return t;
  return -1;
}

// The reference model's own answer on one layout: the first t whose target counts in the loss and
// whose logits depend on the token at t + 1 (-1: none).
int model_leak(const Combo& c, const model_ref::Params& p, const std::vector<int>& seq) {
  const int T = (int)seq.size() - 1, V = p.cfg.vocab;
  model_ref::Params q = p;
  q.cfg.mask = c.mask;
  q.cfg.mask.window = c.window;
  const std::vector<int> in(seq.begin(), seq.end() - 1), next(seq.begin() + 1, seq.end());
  std::vector<double> logits, changed;
  const double loss = model_ref::forward_backward(q, in, next, nullptr, &logits);
  for (int t = 0; t + 1 < T; t++) {
    if (in[t + 1] == q.cfg.mask.bos) continue;  // moving a document edge: the table's case
    std::vector<int> other_next = next;
    other_next[t] = next[t] == 1 ? 2 : 1;  // never the BOS: the targets do not place documents
    const bool counted = model_ref::forward_backward(q, in, other_next, nullptr) != loss;
    if (!counted) continue;
    std::vector<int> other_in = in;
    other_in[t + 1] = 1 + (in[t + 1] % (V - 1));  // another token that is not a BOS
    model_ref::forward_backward(q, other_in, next, nullptr, &changed);
    for (int v = 0; v < V; v++)
      if (changed[(size_t)t * V + v] != logits[(size_t)t * V + v]) return t;
  }
  return -1;
}

}  // namespace

int main() {
  std::mt19937 rng(5);
  // ---- the literal table, T = 300, three layouts of documents
  {
    const int T = 300;
    const std::vector<std::vector<int>> layouts = {{}, {0, 17, 90, 128, 131, 200, 281}, {0, 128}};
    int n = 0, leaking = 0;
    for (const Combo& c : combinations({0, 1, 2, 3, 130}, {1, 2}, {0, 3, 129})) {
      const model::TargetLeak d = model::find_target_leak(c.mask, T, {c.window});
      bool any = false;
      int one_doc = -1;
      for (size_t l = 0; l < layouts.size(); l++) {
        const int t = table_leak(c, sequence(T, layouts[l], 50000, rng));
        any |= t >= 0;
        if (l == 0) one_doc = t;
      }
      CHECK(d.leaks == any, "%s: the decision says %s, the reference table %s", c.name().c_str(), d.leaks ? "leaks" : "no leak",
            any ? "leaks" : "no leak");
      if (d.leaks) CHECK(one_doc == d.query, "%s: first leak at %d, the table's at %d", c.name().c_str(), d.query, one_doc);
      n++, leaking += d.leaks;
    }
    // (a test that could pass by always answering one way would find one kind only)
    CHECK(leaking > 0 && leaking < n, "table: %d of %d combinations leak", leaking, n);
    std::printf("ok table: %d combinations, %d leak\n", n, leaking);
  }
  // ---- the reference model, T = 20
  {
    model_ref::Config cfg;
    cfg.vocab = 64, cfg.width = 16, cfg.heads = 2, cfg.layers = 4, cfg.hidden = 64;
    model_ref::Params p(cfg);
    p.init(3, /*zero_init_outputs=*/false);  // every path to the logits open
    const int T = 20;
    const std::vector<std::vector<int>> layouts = {{}, {0, 6, 13}, {4, 5, 11}};
    int n = 0, leaking = 0;
    for (const Combo& c : combinations({0, 1, 2, 3, 25}, {1}, {0, 3, 7})) {
      const model::TargetLeak d = model::find_target_leak(c.mask, T, {c.window});
      bool any = false;
      for (const auto& layout : layouts) any |= model_leak(c, p, sequence(T, layout, cfg.vocab, rng)) >= 0;
      CHECK(d.leaks == any, "%s: the decision says %s, the reference model %s", c.name().c_str(), d.leaks ? "leaks" : "no leak",
            any ? "leaks" : "no leak");
      n++, leaking += d.leaks;
    }
    CHECK(leaking > 0 && leaking < n, "model: %d of %d combinations leak", leaking, n);
    std::printf("ok model: %d combinations, %d leak\n", n, leaking);
  }
  // ---- the flags' cases at the trainer's sizes: windows of 1..14 blocks (the record's schedule),
  // in blocks or as 128 N tokens, T = 1024 (the tiny preset) and 8192 (the default)
  for (int T : {1024, 8192})
    for (int blocks = 0; blocks < 2; blocks++)
      for (int bidir = 0; bidir < 2; bidir++)
        for (int docs = 0; docs < 2; docs++) {
          std::vector<int> windows;
          for (int n = 1; n <= 14; n++) windows.push_back(blocks ? n : 128 * n);
          model::MaskConfig m;
          m.blocks = blocks, m.bidir = bidir, m.documents = docs;
          m.causal = false;
          const model::TargetLeak nc = model::find_target_leak(m, T, windows);
          CHECK(nc.leaks && nc.query == 0 && nc.window == windows[0], "T %d blocks %d bidir %d docs %d: --causal 0 must leak at t = 0", T,
                blocks, bidir, docs);
          m.causal = true;
          CHECK(!model::find_target_leak(m, T, windows).leaks, "T %d: causal must not leak", T);
          for (int prefix : {1, 32, 127, 128, 129, 1000}) {
            m.prefix = prefix;
            for (int pa = 0; pa < 2; pa++) {
              m.prefix_attention = pa;
              CHECK(!model::find_target_leak(m, T, windows).leaks, "T %d blocks %d bidir %d docs %d prefix %d attention %d: prefix-LM must not leak",
                    T, blocks, bidir, docs, prefix, pa);
            }
          }
          m.prefix = 0, m.prefix_attention = true;
        }
  // a prefix whose targets were kept would leak: the rule is what makes prefix-LM safe (the
  // decision reads the loss rule, not a list of safe flags)
  {
    model::MaskConfig m;
    m.prefix = 8;
    const attn::MaskBounds b = attn::make_bounds(model::attention_mask(m, 0, nullptr), 64);
    CHECK(attn::keep(b, 3, 4), "prefix 8: query 3 keeps key 4 (its target, which the rule drops)");
    CHECK(!model::find_target_leak(m, 64, {0}).leaks, "prefix 8, its targets dropped: no leak");
  }
  CHECK(!model::find_target_leak(model::MaskConfig{false}, 1, {0}).leaks, "T 1: no position has a next one");
  return test_summary("target-leak");
}
