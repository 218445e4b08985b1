// The GPU model's forward (model/gpt.cuh) against the fp64 reference model on tiny
// configurations with every parameter mattering (outputs not zero-initialised, scalars away
// from their initial values) and three masks (causal + 2-block window + documents; no causal +
// a bidirectional token window; prefix-LM of 50 tokens + documents + a bidirectional 1-block
// window, whose loss drops the predictions inside each prefix); on Hopper both paths (ReLU^2
// fused into the MLP products, the cross-entropy into the head's and q and k's norm + rotary into
// the q, k, v product's, and all apart). Widths 256 (head dims 128 and 64, which the fused q, k,
// v product takes) and 128 (which it does not: its pass runs on both paths).
// Tolerance: the GPU keeps every activation in bf16 (2^-9 relative rounding, a few dozen
// roundings along any path through 4 layers, about sqrt(30) * 2e-3 = 1e-2): softcapped logits
// within 3e-2 relative (Frobenius; 7.5e-3 and 4.8e-3 measured on H100), the mean loss within
// 1e-3 relative (it averages the logit errors over 384 tokens). A structural error (a wrong
// sign, a missed skip, a wrong mask) moves the logits by O(1).
#include <cmath>
#include <random>

#include "model/gpt.cuh"
#include "model/reference_model.h"
#include "tests/check.h"

// Gradients pass through bf16 activations and bf16 gradient tensors twice as long a path as the
// forward: 1e-1 relative (Frobenius) per tensor (about 1e-2 measured for matrices and
// embeddings on H100, up to 4e-2 for scalars); measured values are printed.
static const double kGradTol = 1e-1;

int main() {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("test_model_gpu: no GPU\n");
    return 1;
  }
  std::mt19937 rng(17);
  for (int variant = 0; variant < 3; variant++) {
    model_ref::Config cfg;
    cfg.vocab = 256;
    cfg.width = variant < 2 ? 256 : 128;
    cfg.heads = variant == 1 ? 4 : 2;
    cfg.layers = 4;
    cfg.hidden = 512;
    const int T = 384, kBos = 0;
    std::vector<int> tokens(T), targets(T);
    for (int t = 0; t < T; t++) tokens[t] = 1 + rng() % 255;
    for (int t : {0, 70, 71, 200, 333}) tokens[t] = kBos;
    for (int t = 0; t < T; t++) targets[t] = rng() % 256;
    if (variant == 0) {
      cfg.mask.causal = true;
      cfg.mask.window = 2;
      cfg.mask.blocks = true;
      cfg.mask.documents = true;
      cfg.mask.bos = kBos;
    } else if (variant == 1) {
      cfg.mask.causal = false;
      cfg.mask.window = 100;
      cfg.mask.bidir = true;
    } else {
      cfg.mask.causal = true;
      cfg.mask.window = 1;
      cfg.mask.blocks = true;
      cfg.mask.bidir = true;
      cfg.mask.documents = true;
      cfg.mask.bos = kBos;
      cfg.mask.prefix = 50;
    }
    model::Batch batch;
    batch.build(tokens, targets, cfg.mask);
    const float gscale = 1.f / batch.kept_targets;
    model_ref::Params p(cfg);
    p.init(31 + variant, /*zero_init_outputs=*/false);
    std::uniform_real_distribution<double> u(-0.8, 1.2);
    for (auto& t : p.tensors)
      if (t.name.find("lambda") != std::string::npos || t.name == "skip")
        for (size_t i = 0; i < t.size(); i++) p.data[t.offset + i] = u(rng);
    std::vector<double> logits_ref;
    const double loss_ref = model_ref::forward_backward(p, tokens, targets, nullptr, &logits_ref);

    std::vector<double> gref;
    model_ref::forward_backward(p, tokens, targets, &gref);
    // both paths where the device has the fused ones (gemm/gemm.cuh: ReLU^2 in the MLP
    // products' epilogues; gemm/epilogue_softcap_ce.cuh: the cross-entropy in the head product's), each
    // against the reference. The logits come from a forward that returns z (which runs the head
    // apart); the loss and the gradients checked are those of the forward as training runs it.
    std::vector<int> paths = {0};
    if (gemm::available()) paths.insert(paths.begin(), 1);
    for (int fused : paths) {
      gpt::Model m(cfg, T, /*head_chunk=*/160);  // chunks of 160 rows: 3 chunks, the last partial
      m.set_fused_mlp(fused);
      m.set_fused_head(fused);
      m.set_fused_qkv(fused && gemm::qkv_norm_rotary_shape(cfg.width, cfg.head_dim()));
      m.load(p.data);
      std::vector<float> z;
      const double loss_z = m.forward(batch, gscale, &z);
      m.zero_grad();
      const double loss = m.forward(batch, gscale);
      // the two heads' z differ only where an fp32 sum sits at a bf16 rounding boundary (one ulp
      // of z, a few elements): 1e-4 relative on the mean
      CHECK(std::fabs(loss - loss_z) < 1e-4 * loss_z, "variant %d, fused %d: the loss with z returned %.7f, without %.7f", variant,
            fused, loss_z, loss);
      double num = 0, den = 0;
      for (size_t i = 0; i < z.size(); i++) {
        const double lg = 30.0 * std::tanh(z[i] / 30.0), d = lg - logits_ref[i];
        num += d * d;
        den += logits_ref[i] * logits_ref[i];
      }
      const double le = std::sqrt(num / den), lossrel = std::fabs(loss - loss_ref) / loss_ref;
      CHECK(le < 3e-2, "variant %d, fused %d: logits rel err %.2e", variant, fused, le);
      CHECK(lossrel < 1e-3, "variant %d, fused %d: loss %.6f vs reference %.6f", variant, fused, loss, loss_ref);
      std::printf("model forward, variant %d (width %d, head dim %d), fused %d (q, k, v %d): loss %.6f (reference %.6f, rel %.1e), logits rel err %.2e, logit rms %.2f\n", variant,
                  cfg.width, cfg.head_dim(), fused, (int)m.fused_qkv(), loss, loss_ref, lossrel, le, std::sqrt(den / z.size()));
      // the backward against the reference gradient, tensor by tensor
      m.backward();
      std::vector<float> g = m.gradients();
      // scalar gradients (l, a, s) are sums over the whole residual stream that can cancel to
      // nearly nothing: their error is measured against the norm of all scalar gradients together
      auto is_scalar = [](const std::string& n) { return n.find("lambda") != std::string::npos || n == "skip"; };
      double scalar_norm2 = 0;
      for (auto& t : p.tensors)
        if (is_scalar(t.name))
          for (size_t i = t.offset; i < t.offset + t.size(); i++) scalar_norm2 += gref[i] * gref[i];
      double worst = 0;
      std::string worst_name;
      for (auto& t : p.tensors) {
        double num = 0, den = 0;
        for (size_t i = t.offset; i < t.offset + t.size(); i++) {
          num += (g[i] - gref[i]) * (g[i] - gref[i]);
          den += gref[i] * gref[i];
        }
        const double e = std::sqrt(num / std::max(is_scalar(t.name) ? scalar_norm2 : den, 1e-300));
        if (e > worst) worst = e, worst_name = t.name;
        std::printf("  grad %-22s rel err %.2e (norm %.2e)\n", t.name.c_str(), e, std::sqrt(den));
        CHECK(e < kGradTol && den > 0, "variant %d, fused %d: gradient of %s rel err %.2e", variant, fused, t.name.c_str(), e);
      }
      std::printf("model backward, variant %d, fused %d: worst gradient %s at %.2e\n", variant, fused, worst_name.c_str(), worst);
      // the same inputs give the same loss and gradients to the bit
      m.zero_grad();
      CHECK(m.forward(batch, gscale) == loss, "variant %d, fused %d: forward is not deterministic", variant, fused);
      m.backward();
      CHECK(m.gradients() == g, "variant %d, fused %d: backward is not deterministic", variant, fused);
    }
  }
  return test_summary("model-gpu");
}
