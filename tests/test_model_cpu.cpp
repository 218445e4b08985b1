// The fp64 reference model (model/reference_model.h) against central finite differences, on a
// tiny configuration with every term of the mask on (causal, a one-block window, documents) and
// every parameter made to matter: output projections and head non-zero, scalars (l, a, s)
// away from their initial values. For each tensor, 12 random entries of the gradient are
// compared; embedding rows of tokens that never occur must have exactly zero gradient.
// Tolerance: fp64 with step 1e-5: truncation ~h^2 = 1e-10, rounding ~1e-16 * loss / h = 1e-11,
// so |fd - grad| <= 1e-7 * max(1, |grad|). Also prefix-LM: the batch's loss rule on a worked
// example, and the reference's gradient with a prefix.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "model/batch.h"
#include "model/reference_layers.h"
#include "model/reference_model.h"
#include "tests/check.h"

// Central difference of the reference's loss in parameter i (step 1e-5), the parameter restored.
static double central_difference(model_ref::Params& p, size_t i, const std::vector<int>& tokens, const std::vector<int>& targets) {
  const double keep = p.data[i], h = 1e-5;
  p.data[i] = keep + h;
  const double up = model_ref::forward_backward(p, tokens, targets, nullptr);
  p.data[i] = keep - h;
  const double down = model_ref::forward_backward(p, tokens, targets, nullptr);
  p.data[i] = keep;
  return (up - down) / (2 * h);
}

int main() {
  model_ref::Config cfg;
  cfg.vocab = 64;
  cfg.width = 16;
  cfg.heads = 2;
  cfg.layers = 4;
  cfg.hidden = 64;
  const int T = 200, kBos = 0;
  std::mt19937 rng(11);
  std::vector<int> tokens(T), targets(T);
  for (int t = 0; t < T; t++) tokens[t] = 1 + rng() % 48;  // ids 49..63 never occur
  for (int t : {0, 37, 90, 150}) tokens[t] = kBos;
  for (int t = 0; t < T; t++) targets[t] = t + 1 < T ? tokens[t + 1] : 5;
  cfg.mask.causal = true;
  cfg.mask.window = 1;
  cfg.mask.blocks = true;
  cfg.mask.documents = true;
  cfg.mask.bos = kBos;

  // Initialisation (docs/model.md): zero head, so the loss is exactly ln(vocab)
  {
    model_ref::Params p(cfg);
    p.init(3);
    double loss = model_ref::forward_backward(p, tokens, targets, nullptr);
    CHECK(std::fabs(loss - std::log(64.0)) < 1e-12, "loss at init %.15f, want ln 64", loss);
  }

  // model::init_values: each random tensor's values from chunks of generators seeded by (seed,
  // tensor, chunk), filled by OpenMP threads: the same values with 1 or 3 threads; the right
  // distribution (embeddings N(0, 1): mean within 5 standard errors, standard deviation within
  // 5 of its standard errors, kurtosis 3 +- 0.05; linear weights uniform in [-b, b), b =
  // 1/sqrt(fan_in), their standard deviation b/sqrt(3) within 1%); zero outputs exactly zero,
  // the scalars exact; another seed other values; consecutive values uncorrelated (|r| < 5/sqrt(n));
// no stretch repeating another 4^k * 1024 values on (the chunks' generators independent).
  {
    model::Config big;
    big.vocab = 4096, big.width = 128, big.heads = 2, big.layers = 4, big.hidden = 512;
    const model::Layout L(big);
    omp_set_num_threads(1);
    const std::vector<double> one = model::init_values(L, 42);
    omp_set_num_threads(3);
    const std::vector<double> three = model::init_values(L, 42), other = model::init_values(L, 43);
    omp_set_num_threads(omp_get_num_procs());
    CHECK(one == three, "init_values: the same values with 1 and 3 threads");
    size_t same = 0, random = 0;
    for (const model::Tensor& t : L.tensors) {
      const double* d = three.data() + t.offset;
      const size_t n = t.size();
      const bool normal = t.name == "embed" || t.name.rfind("value_embed", 0) == 0;
      const bool zero = t.name == "head" || t.name.find(".wo") != std::string::npos || t.name.find(".wproj") != std::string::npos;
      if (t.name.find("lambda") != std::string::npos || t.name == "skip") {
        const double want0 = t.name.find("attn_lambda") != std::string::npos ? 0.5 : 1.0;
        const double want1 = t.name.find("attn_lambda") != std::string::npos ? 0.5 : t.name == "skip" ? 1.0 : 0.0;
        CHECK(d[0] == want0 && (n < 2 || d[1] == want1), "init_values: %s = %g, %g", t.name.c_str(), d[0], n > 1 ? d[1] : 0.0);
        continue;
      }
      if (zero) {
        bool all = true;
        for (size_t i = 0; i < n; i++) all = all && d[i] == 0.0;
        CHECK(all, "init_values: %s starts at zero", t.name.c_str());
        continue;
      }
      double m1 = 0, m2 = 0, m4 = 0, lag = 0, lo = 1e300, hi = -1e300;
      size_t repeats = 0;  // a value equal to the one a power of two later (chunks repeating)
      for (size_t i = 0; i < n; i++) {
        m1 += d[i], lo = std::min(lo, d[i]), hi = std::max(hi, d[i]);
        if (i + 1 < n) lag += d[i] * d[i + 1];
        for (size_t k = 1024; k <= (size_t(1) << 18); k *= 4) repeats += i + k < n && d[i] == d[i + k];
        same += d[i] == other[t.offset + i];
      }
      random += n;
      m1 /= n;
      for (size_t i = 0; i < n; i++) m2 += (d[i] - m1) * (d[i] - m1), m4 += std::pow(d[i] - m1, 4);
      m2 /= n, m4 /= n;
      const double sd = std::sqrt(m2), r = (lag / (n - 1) - m1 * m1) / m2, b = 1.0 / std::sqrt((double)t.rows);
      const double want_sd = normal ? 1.0 : b / std::sqrt(3.0);
      CHECK(std::fabs(m1) < 5 * want_sd / std::sqrt((double)n), "init_values: %s mean %.3g", t.name.c_str(), m1);
      CHECK(std::fabs(r) < 5 / std::sqrt((double)n), "init_values: %s lag-1 correlation %.3g", t.name.c_str(), r);
      CHECK(repeats < n / 1000, "init_values: %s repeats itself (%zu values equal to one 4^k * 1024 later)", t.name.c_str(), repeats);
      if (normal) {
        CHECK(std::fabs(sd - 1) < 5 / std::sqrt(2.0 * n) && std::fabs(m4 / (m2 * m2) - 3) < 0.05,
              "init_values: %s standard deviation %.4f, kurtosis %.3f (N(0, 1): 1, 3)", t.name.c_str(), sd, m4 / (m2 * m2));
      } else {
        CHECK(lo >= -b && hi < b && std::fabs(sd / want_sd - 1) < 0.01, "init_values: %s in [%.4f, %.4f], sd %.5f (uniform in +-%.4f: %.5f)",
              t.name.c_str(), lo, hi, sd, b, want_sd);
      }
    }
    CHECK(random > 2000000 && same < random / 1000, "init_values: seeds 42 and 43 share %zu of %zu random values", same, random);
  }

  model_ref::Params p(cfg);
  p.init(5, /*zero_init_outputs=*/false);
  std::uniform_real_distribution<double> u(-0.8, 1.2);
  for (auto& t : p.tensors)
    if (t.name.find("lambda") != std::string::npos || t.name == "skip")
      for (size_t i = 0; i < t.size(); i++) p.data[t.offset + i] = u(rng);
  for (size_t i = 0; i < p.t("head").size(); i++) p.data[p.t("head").offset + i] *= 0.3;
  std::vector<double> grad;
  const double loss = model_ref::forward_backward(p, tokens, targets, &grad);
  CHECK(std::isfinite(loss) && loss > 0, "loss %f", loss);

  int checked = 0;
  double worst = 0;
  for (auto& t : p.tensors) {
    std::uniform_int_distribution<size_t> pick(0, t.size() - 1);
    int bad = 0;
    for (int n = 0; n < 12; n++) {
      size_t i = t.offset + pick(rng);
      if (t.name == "embed" || t.name.rfind("value_embed", 0) == 0) {  // rows of tokens that occur
        size_t row = tokens[rng() % T], col = rng() % t.cols;
        i = t.offset + row * t.cols + col;
      }
      const double fd = central_difference(p, i, tokens, targets), err = std::fabs(fd - grad[i]);
      worst = std::max(worst, err / std::max(1.0, std::fabs(grad[i])));
      if (err > 1e-7 * std::max(1.0, std::fabs(grad[i]))) {
        bad++;
        std::printf("  %s[%zu]: grad %.10e fd %.10e\n", t.name.c_str(), i - t.offset, grad[i], fd);
      }
      checked++;
    }
    CHECK(bad == 0, "%s: %d of 12 gradient entries differ from finite differences", t.name.c_str(), bad);
    if (t.name == "embed" || t.name.rfind("value_embed", 0) == 0) {
      double unused = 0;
      for (size_t row = 49; row < t.rows; row++)
        for (size_t c = 0; c < t.cols; c++) unused += std::fabs(grad[t.offset + row * t.cols + c]);
      CHECK(unused == 0.0, "%s: rows of absent tokens have gradient %g", t.name.c_str(), unused);
    }
  }
  std::printf("model reference: %d gradient entries over %zu tensors checked, worst relative error %.2e\n", checked,
              p.tensors.size(), worst);

  // with causal on, uni and bi windows are the same mask: same loss and gradient to the bit
  {
    model_ref::Config c2 = cfg;
    c2.mask.bidir = true;
    model_ref::Params p2(c2);
    p2.data = p.data;
    std::vector<double> g2;
    const double l2 = model_ref::forward_backward(p2, tokens, targets, &g2);
    CHECK(l2 == loss && g2 == grad, "uni and bi windows differ under causal");
    c2.mask.causal = false;
    model_ref::Params p3(c2);
    p3.data = p.data;
    CHECK(model_ref::forward_backward(p3, tokens, targets, nullptr) != loss, "causal off: bi window should change the loss");
  }

  // prefix-LM: the batch's loss rule on a hand-worked sequence (model/batch.h), then the
  // reference's gradient with a prefix against finite differences
  {
    model::MaskConfig m;
    m.documents = true;
    m.bos = 0;
    m.prefix = 3;
    model::Batch b;
    //        position:  0  1  2  3  4  5  6  7     (documents start at 2 and 6)
    b.build({5, 6, 0, 7, 8, 9, 0, 4}, {6, 0, 7, 8, 9, 0, 4, 3}, m);
    const int I = model::kIgnoreTarget;
    CHECK(b.targets == std::vector<int>({I, I, I, I, 9, I, I, I}) && b.kept_targets == 1,
          "prefix 3 with documents: only position 4 (target 3 into its document) is kept; kept %d", b.kept_targets);
    CHECK(b.doc_ids == std::vector<int32_t>({0, 0, 1, 1, 1, 1, 2, 2}), "document ids of the batch");
    m.documents = false;  // one document: the first 3 positions of the sequence are the prefix
    b.build({5, 6, 0, 7, 8, 9, 0, 4}, {6, 0, 7, 8, 9, 0, 4, 3}, m);
    CHECK(b.targets == std::vector<int>({I, I, 7, 8, 9, 0, 4, 3}) && b.kept_targets == 6, "prefix 3 without documents");
    m.prefix = 0;
    b.build({5, 6, 0, 7, 8, 9, 0, 4}, {6, 0, 7, 8, 9, 0, 4, 3}, m);
    CHECK(b.kept_targets == 8 && b.targets[1] == 0, "no prefix: every target kept");
    const uint16_t seq[9] = {5, 6, 0, 7, 8, 9, 0, 4, 3};
    model::Batch s(8);
    m.documents = true;
    m.prefix = 3;
    s.build(seq, m);
    CHECK(s.tokens == std::vector<int>({5, 6, 0, 7, 8, 9, 0, 4}) && s.kept_targets == 1 && s.targets[4] == 9,
          "a batch from T + 1 stream tokens");
    CHECK(model::kept_targets(seq, 8, m) == 1, "kept_targets of T + 1 stream tokens, without a batch");
    {  // the same count as the batch's on random sequences, prefixes and document settings
      std::mt19937 r(9);
      int differ = 0;
      for (int c = 0; c < 200; c++) {
        const int T = 1 + (int)(r() % 300);
        std::vector<uint16_t> st(T + 1);
        for (auto& t : st) t = r() % (1 + r() % 40) == 0 ? 0 : 1 + r() % 50;
        model::MaskConfig mc;
        mc.bos = 0;
        mc.documents = r() % 2;
        mc.prefix = (int)(r() % 3 == 0 ? 0 : r() % (T + 40));
        model::Batch bb(T);
        bb.build(st.data(), mc);
        differ += model::kept_targets(st.data(), T, mc) != bb.kept_targets;
      }
      CHECK(differ == 0, "kept_targets differs from Batch::build's count in %d of 200 random sequences", differ);
    }

    // the batch's kept attention pairs against a count of the fp64 reference's keep() over every
    // (q, k), on random documents, windows in tokens and blocks, uni and bi, with and without
    // prefixes and documents (exact: both are integers)
    std::mt19937 rng(5);
    int bad_pairs = 0, cases = 0;
    for (int c = 0; c < 60; c++) {
      const int T = 64 + (int)(rng() % 400);
      std::vector<uint16_t> stream(T + 1);
      for (auto& t : stream) t = rng() % 23 == 0 ? 0 : 1 + rng() % 50;
      model::MaskConfig mc;
      mc.bos = 0;
      mc.documents = c % 3 != 0;
      mc.causal = c % 5 != 4;
      mc.blocks = c % 2 == 0;
      mc.bidir = c % 4 < 2;
      mc.window = c % 6 == 0 ? 0 : mc.blocks ? 1 + (int)(rng() % 3) : 1 + (int)(rng() % 200);
      mc.prefix = mc.causal && c % 3 == 1 ? 1 + (int)(rng() % 40) : 0;
      model::Batch bb(T);
      bb.build(stream.data(), mc, 1000 + c);
      ref::Mask rm;
      rm.causal = mc.causal, rm.window = mc.window, rm.bidir = mc.bidir, rm.blocks = mc.blocks, rm.prefix = mc.prefix;
      rm.doc = mc.documents ? bb.doc_ids.data() : nullptr;
      long long want = 0;
      for (int q = 0; q < T; q++)
        for (int k = 0; k < T; k++) want += ref::keep(rm, q, k);
      cases++;
      if (bb.kept_pairs != want || bb.sequence != (uint64_t)(1000 + c) || bb.window != mc.window) {
        if (++bad_pairs <= 3) std::printf("case %d: kept pairs %lld, by keep() %lld\n", c, bb.kept_pairs, want);
      }
    }
    CHECK(bad_pairs == 0, "the batch's kept pairs, stream index and window: %d of %d masks differ", bad_pairs, cases);

    // the batch's token index: the positions of each token, grouped in ascending order, chunked
    // by kChunk, and the same arrays as an index over the whole vocabulary
    {
      const int T = 3000;
      std::vector<uint16_t> stream(T + 1);
      for (int t = 0; t <= T; t++) stream[t] = t % 3 == 0 ? 220 : rng() % 2 ? 50256 : rng() % 40000;  // 220: one token in 3
      model::MaskConfig mc;
      model::Batch bb(T);
      bb.build(stream.data(), mc);
      const layers::TokenIndex& ix = bb.token_index;
      bool grouped = ix.positions.size() == (size_t)T && ix.offsets.back() == T;
      for (size_t i = 0; grouped && i < ix.unique.size(); i++)
        for (int j = ix.offsets[i]; j < ix.offsets[i + 1]; j++)
          grouped = grouped && bb.tokens[ix.positions[j]] == ix.unique[i] && (j == ix.offsets[i] || ix.positions[j] > ix.positions[j - 1]);
      const layers::TokenIndex full(bb.tokens.data(), T, 50304);
      CHECK(grouped && ix.packed() == full.packed() && ix.slots() == full.slots() && ix.slots() >= 1000 / layers::TokenIndex::kChunk,
            "the batch's token index groups every position under its token, as an index over the whole vocabulary does");
      bool threw = false;
      try {
        model::Batch neg;
        neg.build({1, -2, 3}, {2, 3, 4}, mc);
      } catch (const std::invalid_argument&) {
        threw = true;
      }
      CHECK(threw, "a negative token id is refused when the batch is built");
    }

    model_ref::Config c2 = cfg;
    c2.mask.prefix = 30;  // documents of 37, 53, 60 and 50 tokens: prefixes of 30 inside each
    model_ref::Params p2(c2);
    p2.data = p.data;
    std::vector<double> g2;
    const double l2 = model_ref::forward_backward(p2, tokens, targets, &g2);
    CHECK(std::isfinite(l2) && l2 != loss, "prefix 30: loss %f (causal %f)", l2, loss);
    c2.mask.prefix_attention = false;  // the causal baseline on the same targets
    model_ref::Params p3(c2);
    p3.data = p.data;
    const double l3 = model_ref::forward_backward(p3, tokens, targets, nullptr);
    CHECK(std::isfinite(l3) && l3 != l2 && l3 != loss, "prefix 30 without the attention prefix: loss %f", l3);
    int bad = 0, n = 0;
    for (auto& t : p2.tensors)
      for (int k = 0; k < 3; k++, n++) {
        size_t i = t.offset + rng() % t.size();
        if (t.name == "embed" || t.name.rfind("value_embed", 0) == 0) i = t.offset + (size_t)tokens[rng() % T] * t.cols + rng() % t.cols;
        bad += std::fabs(central_difference(p2, i, tokens, targets) - g2[i]) > 1e-7 * std::max(1.0, std::fabs(g2[i]));
      }
    CHECK(bad == 0, "prefix 30: %d of %d gradient entries differ from finite differences", bad, n);
  }
  // The SparseAttnGate record's pieces (model::Config; docs/recipes.md, its recipe's section):
  // each against a model it must equal, then all at once against finite differences.
  {
    auto copy_by_name = [](const model_ref::Params& from, model_ref::Params& to) {  // the tensors both have
      for (const auto& t : to.tensors)
        for (const auto& f : from.tensors)
          if (f.name == t.name)
            std::copy(from.data.begin() + f.offset, from.data.begin() + f.offset + f.size(), to.data.begin() + t.offset);
    };
    auto slice = [](const model_ref::Params& q, const std::vector<double>& v, const std::string& name) {
      const auto& t = q.t(name);
      return std::vector<double>(v.begin() + t.offset, v.begin() + t.offset + t.size());
    };
    std::vector<double> base_grad, base_logits;
    // the gate at W = 0 is exactly 0.5 times each head's output: the model with Wo halved (exact:
    // halving is exact in binary floating point)
    {
      model_ref::Config cg = cfg;
      cg.gate_dims = 4;
      model_ref::Params pg(cg);
      copy_by_name(p, pg);
      model_ref::Params half = p;
      for (int i = 0; i < cfg.layers; i++) {
        const auto& t = half.t("layer" + std::to_string(i) + ".wo");
        for (size_t k = 0; k < t.size(); k++) half.data[t.offset + k] *= 0.5;
      }
      std::vector<double> gg, lg, gh, lh;
      const double l_gate = model_ref::forward_backward(pg, tokens, targets, &gg, &lg);
      const double l_half = model_ref::forward_backward(half, tokens, targets, &gh, &lh);
      double gate_grad = 0;
      for (double v : slice(pg, gg, "layer1.gate")) gate_grad += std::fabs(v);
      CHECK(l_gate == l_half && lg == lh && pg.t("layer1.gate").rows == 4 && pg.t("layer1.gate").cols == 2 && gate_grad > 0,
            "gate at W = 0: loss %.17g, the model with Wo halved %.17g (exact), gate gradient %g (want > 0)", l_gate, l_half, gate_grad);
    }
    // a layer without attention is its block's MLP path alone: the model whose layer 1 has Wo = 0,
    // to the bit, gradients of every tensor both have included
    {
      model_ref::Config cn = cfg;
      cn.no_attention = {1};
      model_ref::Params pn(cn);
      copy_by_name(p, pn);
      model_ref::Params zero = p;
      const auto& wo = zero.t("layer1.wo");
      std::fill(zero.data.begin() + wo.offset, zero.data.begin() + wo.offset + wo.size(), 0.0);
      std::vector<double> gn, ln, gz, lz;
      const double l_none = model_ref::forward_backward(pn, tokens, targets, &gn, &ln);
      const double l_zero = model_ref::forward_backward(zero, tokens, targets, &gz, &lz);
      int differ = 0;
      for (const auto& t : pn.tensors) differ += slice(pn, gn, t.name) != slice(zero, gz, t.name);
      bool threw = false;
      try {
        pn.t("layer1.wq");
      } catch (const std::invalid_argument&) {
        threw = true;
      }
      CHECK(l_none == l_zero && ln == lz && differ == 0 && threw && l_none != loss,
            "layer 1 without attention: loss %.17g, with its Wo zero %.17g (exact), %d tensors' gradients differ, no layer1.wq: %d",
            l_none, l_zero, differ, threw);
    }
    // the short window: floor(W / 2) blocks, at least 1: every layer short at W = 2 is W = 1
    // (the test's window) to the bit; one short layer at W = 2 is neither
    {
      model_ref::Config c2 = cfg, c1 = cfg;
      c2.mask.window = 2;
      c2.short_window = {0, 1, 2, 3};
      c1.short_window = {0, 1, 2, 3};  // floor(1 / 2) = 0, kept at 1
      model_ref::Params p2(c2), p1(c1);
      p2.data = p.data, p1.data = p.data;
      const double l2 = model_ref::forward_backward(p2, tokens, targets, nullptr);
      const double l1 = model_ref::forward_backward(p1, tokens, targets, nullptr);
      model_ref::Config cw = cfg, cs = cfg;
      cw.mask.window = 2;
      cs.mask.window = 2;
      cs.short_window = {2};
      model_ref::Params pw(cw), ps(cs);
      pw.data = p.data, ps.data = p.data;
      const double lw = model_ref::forward_backward(pw, tokens, targets, nullptr);
      const double ls = model_ref::forward_backward(ps, tokens, targets, nullptr);
      CHECK(l2 == loss && l1 == loss && ls != lw && ls != loss,
            "short windows: all short at 2 blocks %.17g and at 1 %.17g = 1 block %.17g (exact); one short %.17g differs from 2 blocks %.17g", l2,
            l1, loss, ls, lw);
    }
    // the half-truncated rotary: dims [D/4, D/2) and [3D/4, D) pass unchanged (their frequency is
    // 0), the others turn (t > 0); the frequencies run from 1 to exactly 1/base; sign -1 undoes it
    {
      const int Tt = 6, Hh = 2, D = 16;
      std::vector<double> xr((size_t)Tt * Hh * D), yr(xr.size()), back(xr.size());
      std::normal_distribution<double> nd(0, 1);
      for (auto& v : xr) v = nd(rng);
      model_ref::rotary_with(xr.data(), yr.data(), Tt, Hh, D, 1.0, 1024.0, true);
      model_ref::rotary_with(yr.data(), back.data(), Tt, Hh, D, -1.0, 1024.0, true);
      int kept = 0, turned = 0;
      double undo = 0;
      for (int t = 0; t < Tt; t++)
        for (int h = 0; h < Hh; h++)
          for (int d = 0; d < D; d++) {
            const size_t k = ((size_t)t * Hh + h) * D + d;
            const bool fixed = (d >= D / 4 && d < D / 2) || d >= 3 * D / 4;
            kept += fixed && yr[k] == xr[k];
            turned += !fixed && t > 0 && yr[k] != xr[k];
            undo = std::max(undo, std::fabs(back[k] - xr[k]));
          }
      CHECK(kept == Tt * Hh * D / 2 && turned == (Tt - 1) * Hh * D / 2 && undo < 1e-14 &&
                model_ref::rotary_frequency(0, D, 1024.0, true) == 1.0 && model_ref::rotary_frequency(3, D, 1024.0, true) == 1.0 / 1024 &&
                model_ref::rotary_frequency(4, D, 1024.0, true) == 0.0,
            "half-truncated rotary: %d of %d dims kept (exact), %d of %d turned, undone to %.2e (1e-14)", kept, Tt * Hh * D / 2, turned,
            (Tt - 1) * Hh * D / 2, undo);
    }
    // the sigmoid logits 30 sigmoid(z / 7.5) lie in [0, 30] however large the head's output,
    // and match z recovered from the tanh logits of the same parameters (1e-9)
    {
      model_ref::Config cl = cfg;
      cl.logit_sigmoid = true;
      model_ref::Params pl(cl);
      pl.data = p.data;
      const auto& hd = pl.t("head");
      for (size_t k = 0; k < hd.size(); k++) pl.data[hd.offset + k] *= 40;
      model_ref::Params pt = pl;
      pt.cfg.logit_sigmoid = false;
      std::vector<double> ls, lt;
      model_ref::forward_backward(pl, tokens, targets, nullptr, &ls);
      model_ref::forward_backward(pt, tokens, targets, nullptr, &lt);
      const double lo = *std::min_element(ls.begin(), ls.end()), hi = *std::max_element(ls.begin(), ls.end());
      double worst_z = 0;
      for (size_t k = 0; k < ls.size(); k++)
        if (std::fabs(lt[k]) < 29) {  // (z recoverable from the tanh logit)
          const double z = 30 * std::atanh(lt[k] / 30);
          worst_z = std::max(worst_z, std::fabs(ls[k] - 30 / (1 + std::exp(-z / 7.5))));
        }
      CHECK(lo >= 0 && hi <= 30 && lo < 3 && hi > 27 && worst_z < 1e-9,
            "sigmoid logits in [%.4f, %.4f] (want within [0, 30], reaching below 3 and above 27), off 30 sigmoid(z / 7.5) by %.2e", lo, hi,
            worst_z);
    }
    // the value tables: N of them, layers i < N use table i and the last N again (repeated) or
    // mirrored; init_bound scales the uniform bound; the gate starts at zero
    {
      model_ref::Config cv = cfg;
      cv.value_embeds = 1;
      cv.value_embeds_repeated = true;
      cv.init_bound = 0.5;
      cv.gate_dims = 4;
      model_ref::Params pv(cv);
      pv.init(5);
      bool one_table = true;
      try {
        pv.t("value_embed.1");
        one_table = false;
      } catch (const std::invalid_argument&) {
      }
      const auto& wq = pv.t("layer0.wq");
      double big = 0, gate = 0;
      for (size_t k = 0; k < wq.size(); k++) big = std::max(big, std::fabs(pv.data[wq.offset + k]));
      for (double v : slice(pv, pv.data, "layer2.gate")) gate += std::fabs(v);
      model_ref::Config cm = cv;
      cm.value_embeds_repeated = false;
      CHECK(one_table && cv.value_table(0) == 0 && cv.value_table(1) == -1 && cv.value_table(2) == -1 && cv.value_table(3) == 0 &&
                cm.value_table(3) == 0 && big < 0.5 / std::sqrt(16.0) && big > 0.45 / std::sqrt(16.0) && gate == 0,
            "value tables and init: one table %d, |Wq| up to %.4f (want below 0.5 / 4 and near it), gate %g (want 0)", one_table, big, gate);
    }
    // every piece at once: the gradient against central differences (tolerance as above)
    {
      model_ref::Config ca = cfg;
      ca.value_embeds = 1;
      ca.value_embeds_repeated = true;
      ca.no_attention = {2};
      ca.short_window = {1, 3};
      ca.mask.window = 2;
      ca.attn_scale = 0.12;
      ca.gate_dims = 4;
      ca.rotary_half = true;
      ca.rotary_base = 1024;
      ca.logit_sigmoid = true;
      ca.init_bound = 0.8660254037844386;
      model_ref::Params pa(ca);
      pa.init(5, /*zero_init_outputs=*/false);
      std::uniform_real_distribution<double> ul(-0.8, 1.2);
      for (auto& t : pa.tensors)
        if (t.name.find("lambda") != std::string::npos || t.name == "skip")
          for (size_t k = 0; k < t.size(); k++) pa.data[t.offset + k] = ul(rng);
      std::vector<double> ga;
      const double la = model_ref::forward_backward(pa, tokens, targets, &ga);
      int bad = 0, n = 0;
      for (auto& t : pa.tensors)
        for (int k = 0; k < 12; k++, n++) {
          size_t i = t.offset + rng() % t.size();
          if (t.name == "embed" || t.name.rfind("value_embed", 0) == 0) i = t.offset + (size_t)tokens[rng() % T] * t.cols + rng() % t.cols;
          const double fd = central_difference(pa, i, tokens, targets);
          if (std::fabs(fd - ga[i]) > 1e-7 * std::max(1.0, std::fabs(ga[i]))) {
            bad++;
            std::printf("  %s[%zu]: grad %.10e fd %.10e\n", t.name.c_str(), i - t.offset, ga[i], fd);
          }
        }
      CHECK(std::isfinite(la) && bad == 0, "the 2025-08-23 pieces at once: %d of %d gradient entries differ from finite differences", bad, n);
    }
  }
  return test_summary("model-cpu");
}
