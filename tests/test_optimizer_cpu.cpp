// The optimiser and schedule references (model/optimizer_reference.h) against values worked out
// by hand from docs/model.md, optimisation, and properties of the Newton-Schulz iteration.
#include <cmath>
#include <random>
#include <string>

#include "model/optimizer_reference.h"
#include "tests/check.h"

int main() {
  using namespace model_ref;
  Schedule s;  // 1480 steps, cooldown 600, momentum warm-up 300
  CHECK(s.lr_multiplier(0) == 1.0 && s.lr_multiplier(879) == 1.0 && s.lr_multiplier(880) == 1.0, "lr flat part");
  CHECK(s.lr_multiplier(1180) == 0.5 && std::fabs(s.lr_multiplier(1479) - 1.0 / 600) < 1e-15, "lr cooldown %f", s.lr_multiplier(1180));
  CHECK(s.muon_momentum(0) == 0.85 && std::fabs(s.muon_momentum(150) - 0.90) < 1e-15 && std::fabs(s.muon_momentum(300) - 0.95) < 1e-15 &&
            std::fabs(s.muon_momentum(1000) - 0.95) < 1e-15,
        "momentum");
  // N = floor(((1-f) 64 + f 1792 + 64) / 128): 1 at the start, 14 at the end, floor(992/128) = 7 halfway
  CHECK(s.window_blocks(0) == 1 && s.window_blocks(1480) == 14 && s.window_blocks(740) == 7, "window %d %d %d",
        s.window_blocks(0), s.window_blocks(1480), s.window_blocks(740));
  int prev = 0, changes = 0, shrinks = 0;
  for (int st = 0; st <= 1480; st++) {
    shrinks += s.window_blocks(st) < prev;
    changes += s.window_blocks(st) != prev;
    prev = s.window_blocks(st);
  }
  CHECK(shrinks == 0 && changes == 14, "window must grow through 1..14 (%d changes, %d shrinks)", changes, shrinks);

  // Newton-Schulz: scale-free, transposes with its input, and pushes singular values near 1
  std::mt19937 rng(3);
  std::normal_distribution<double> nd(0, 1);
  const int r = 16, c = 48;
  std::vector<double> x(r * c);
  for (auto& v : x) v = nd(rng);
  std::vector<double> a = x, b = x, t(r * c);
  for (auto& v : b) v *= 10;
  newton_schulz5(a, r, c);
  newton_schulz5(b, r, c);
  double diff = 0;
  for (int i = 0; i < r * c; i++) diff = std::max(diff, std::fabs(a[i] - b[i]));
  CHECK(diff < 1e-6, "Newton-Schulz depends on the input's scale: %g", diff);
  for (int i = 0; i < r; i++)
    for (int j = 0; j < c; j++) t[j * r + i] = x[i * c + j];
  newton_schulz5(t, c, r);
  diff = 0;
  for (int i = 0; i < r; i++)
    for (int j = 0; j < c; j++) diff = std::max(diff, std::fabs(t[j * r + i] - a[i * c + j]));
  // equal up to rounding: the Frobenius norm sums the elements in another order
  CHECK(diff < 1e-13, "tall input is not the transpose of the wide result: %g", diff);
  for (int i = 0; i < r; i++) {  // diagonal of X X^T = squared row norms, near 1 for an orthogonalised X
    double d = 0;
    for (int j = 0; j < c; j++) d += a[i * c + j] * a[i * c + j];
    CHECK(d > 0.3 && d < 1.6, "row %d of X X^T: %f", i, d);
  }

  // Adam's first step is lr * g / (|g| + eps) after bias correction; Muon's matrices move
  Config cfg;
  cfg.vocab = 8;
  cfg.width = 8;
  cfg.heads = 2;
  cfg.layers = 2;
  cfg.hidden = 16;
  Params p(cfg);
  p.init(1, false);
  std::vector<double> g(p.data.size());
  for (auto& v : g) v = nd(rng);
  Params before = p;
  OptimizerState st;
  optimizer_step(p, g, st, 0, s);
  const Tensor& head = p.t("head");
  const size_t i = head.offset + 3;
  const double want = before.data[i] - 0.008 * g[i] / (std::fabs(g[i]) + 1e-8);
  CHECK(std::fabs(p.data[i] - want) < 1e-15, "Adam first step %.17g want %.17g", p.data[i], want);
  const Tensor& sk = p.t("skip");
  CHECK(std::fabs(p.data[sk.offset] - (before.data[sk.offset] - 0.04 * g[sk.offset] / (std::fabs(g[sk.offset]) + 1e-8))) < 1e-15,
        "scalar lr");
  const Tensor& wq = p.t("layer0.wq");
  std::vector<double> u(g.begin() + wq.offset, g.begin() + wq.offset + wq.size());
  for (size_t k = 0; k < u.size(); k++) u[k] = (1 - 0.85) * (1 + 0.85) * g[wq.offset + k];
  newton_schulz5(u, 8, 8);
  double err = 0;
  for (size_t k = 0; k < u.size(); k++) err = std::max(err, std::fabs(p.data[wq.offset + k] - (before.data[wq.offset + k] - 0.05 * u[k])));
  CHECK(err < 1e-15, "Muon first step: %g", err);
  // Muon's shape scale is the record's max(1, rows/cols)^0.5 of PyTorch's weight, which is stored
  // [out][in]: here W is stored [in][out], so the scale is max(1, out/in)^0.5. The MLP's
  // up-projection Wfc (8 -> 16, stored 8 x 16) moves sqrt(2) times as far; the down-projection
  // Wproj (16 -> 8, stored 16 x 8, tall) is not scaled.
  for (const char* name : {"layer0.wfc", "layer0.wproj"}) {
    const Tensor& t = p.t(name);
    std::vector<double> u2(g.begin() + t.offset, g.begin() + t.offset + t.size());
    for (auto& v : u2) v *= (1 - 0.85) * (1 + 0.85);
    newton_schulz5(u2, (int)t.rows, (int)t.cols);
    const double scale = std::string(name) == "layer0.wfc" ? std::sqrt(2.0) : 1.0;
    err = 0;
    for (size_t k = 0; k < u2.size(); k++)
      err = std::max(err, std::fabs(p.data[t.offset + k] - (before.data[t.offset + k] - 0.05 * scale * u2[k])));
    CHECK(err < 1e-15, "Muon lr scale of %s (%zu x %zu stored, want %g): %g", name, t.rows, t.cols, scale, err);
  }
  // the SparseAttnGate record's forms (model::OptimizerHyper): Adam's eps outside the bias
  // correction, lr sqrt(bc2) / bc1 m / (sqrt(v) + eps): at the first step lr g / (|g| + eps /
  // sqrt(1 - beta2)); Muon's factor 1 for every matrix (Wfc moves as far as Wproj's scale 1)
  {
    OptimizerHyper hp;
    hp.adam_eps = 0.5;  // (large, so that the two forms differ far beyond rounding)
    hp.adam_eps_scaled = true, hp.muon_fan_scale = false;
    Params q = before;
    OptimizerState st2;
    optimizer_step(q, g, st2, 0, s, hp);
    const double want2 = before.data[i] - 0.008 * g[i] / (std::fabs(g[i]) + 0.5 / std::sqrt(1 - 0.95));
    const double torch_form = before.data[i] - 0.008 * g[i] / (std::fabs(g[i]) + 0.5);
    CHECK(std::fabs(q.data[i] - want2) < 1e-15 && std::fabs(q.data[i] - torch_form) > 1e-6,
          "Adam's scaled eps, first step %.17g want %.17g (1e-15; the torch form's %.17g differs by more than 1e-6)", q.data[i], want2,
          torch_form);
    const Tensor& t = q.t("layer0.wfc");
    std::vector<double> u3(g.begin() + t.offset, g.begin() + t.offset + t.size());
    for (auto& v : u3) v *= (1 - 0.85) * (1 + 0.85);
    newton_schulz5(u3, (int)t.rows, (int)t.cols);
    err = 0;
    for (size_t k = 0; k < u3.size(); k++) err = std::max(err, std::fabs(q.data[t.offset + k] - (before.data[t.offset + k] - 0.05 * u3[k])));
    CHECK(err < 1e-15, "Muon without the fan scale: Wfc moves lr times the orthogonalised update (1e-15): %g", err);
  }
  // the SparseAttnGate record's lr (cooldown over the last 0.45 of the run to 0.1) and window
  // (the next multiple of 128 of 1728 f, at least 128), at 1695 steps
  {
    Schedule r;
    r.steps = 1695, r.cooldown_frac = 0.45, r.lr_floor = 0.1, r.window_start = 0, r.window_end = 1728, r.window_ceil = true;
    CHECK(r.lr_multiplier(932) == 1.0 && std::fabs(r.lr_multiplier(933) - (0.1 + 0.9 * (1 - 933.0 / 1695) / 0.45)) < 1e-15 &&
              std::fabs(r.lr_multiplier(1695) - 0.1) < 1e-15,
          "record lr: 1 at step 932, 0.1 + 0.9 w after (1e-15): %.17g %.17g", r.lr_multiplier(933), r.lr_multiplier(1695));
    CHECK(r.window_blocks(0) == 1 && r.window_blocks(1) == 1 && r.window_blocks(1695) == 14 && r.window_blocks(1130) == 9,
          "record window: 1 at the start, 14 at the end, 9 at step 1130 (1728 x 2/3 = 1152 = 9 blocks): %d %d %d", r.window_blocks(0),
          r.window_blocks(1695), r.window_blocks(1130));
    // the floor in the steps form: w + (1 - w) floor
    Schedule f;
    f.lr_floor = 0.1;
    CHECK(f.lr_multiplier(880) == 1.0 && std::fabs(f.lr_multiplier(1180) - 0.55) < 1e-15, "lr floor 0.1 in the steps form: %.17g",
          f.lr_multiplier(1180));
  }
  return test_summary("optimizer-cpu");
}
