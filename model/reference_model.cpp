// fp64 CPU reference of the speedrun model: see reference_model.h for the math.
#include "model/reference_model.h"
#include "model/reference_layers.h"

#include "attention/mask.h"

#include <cmath>
#include <random>
#include <stdexcept>

namespace model_ref {

typedef std::vector<double> Vec;
constexpr double kSoftcap = 30.0;

// ------------------------------------------------------------------------------ building blocks
// Y[T][out] = X[T][in] W[in][out]
static void matmul(const double* X, const double* W, double* Y, int T, int in, int out) {
  for (int t = 0; t < T; t++) {
    double* y = Y + (size_t)t * out;
    for (int o = 0; o < out; o++) y[o] = 0;
    for (int i = 0; i < in; i++) {
      const double xv = X[(size_t)t * in + i];
      const double* w = W + (size_t)i * out;
      for (int o = 0; o < out; o++) y[o] += xv * w[o];
    }
  }
}
// dX += dY W^T, dW += X^T dY
static void matmul_bwd(const double* X, const double* W, const double* dY, double* dX, double* dW, int T, int in, int out) {
  for (int t = 0; t < T; t++)
    for (int i = 0; i < in; i++) {
      double s = 0;
      for (int o = 0; o < out; o++) s += dY[(size_t)t * out + o] * W[(size_t)i * out + o];
      dX[(size_t)t * in + i] += s;
      const double xv = X[(size_t)t * in + i];
      for (int o = 0; o < out; o++) dW[(size_t)i * out + o] += xv * dY[(size_t)t * out + o];
    }
}
struct LayerCache {
  Vec x_in, x_mix, h, rstd_h, q_lin, k_lin, v_lin, ve, v, qn, kn, rstd_q, rstd_k, qr, kr, P, y, gate, yg, x_attn, h2, rstd_h2, u, r;
};

double forward_backward(const Params& p, const std::vector<int>& tokens, const std::vector<int>& targets,
                        std::vector<double>* grad, std::vector<double>* logits_out) {
  const Config& cfg = p.cfg;
  const int T = (int)tokens.size(), C = cfg.width, H = cfg.heads, Dh = cfg.head_dim(), L = cfg.layers, F = cfg.hidden,
            V = cfg.vocab;
  if ((int)targets.size() != T) throw std::invalid_argument("targets and tokens differ in length");
  for (int t = 0; t < T; t++)
    if (tokens[t] < 0 || tokens[t] >= V || targets[t] < 0 || targets[t] >= V) throw std::invalid_argument("token id out of range");
  ref::Mask rmask;  // the mask table of docs/masks.md, with the documents of these tokens
  rmask.causal = cfg.mask.causal, rmask.window = cfg.mask.window, rmask.bidir = cfg.mask.bidir, rmask.blocks = cfg.mask.blocks;
  rmask.prefix = cfg.mask.prefix_attention ? cfg.mask.prefix : 0;
  std::vector<int32_t> doc;
  if (cfg.mask.documents) {
    doc.resize(T);
    attn::doc_ids_from_tokens(tokens.data(), T, doc.data(), cfg.mask.bos);
    rmask.doc = doc.data();
  }
  // the prefix-LM loss rule (model/batch.h), written out: the prediction at t is counted unless
  // its target's position t + 1 is among the first `prefix` of its document (a BOS target starts
  // one); the loss is the mean over the counted ones
  std::vector<char> counted(T, 1);
  int n_counted = T;
  if (cfg.mask.prefix > 0)
    for (int t = 0; t < T; t++) {
      int start = t;  // the first position of t's document
      if (cfg.mask.documents)
        while (start > 0 && tokens[start] != cfg.mask.bos) start--;
      else
        start = 0;
      const int offset = cfg.mask.documents && targets[t] == cfg.mask.bos ? 0 : t + 1 - start;
      if (offset < cfg.mask.prefix) counted[t] = 0, n_counted--;
    }
  // the attention scale (cfg.attn_scale, else 1/sqrt(Dh)); the layers with the short window
  // (cfg.short_window) see floor(W / 2) of the window's W, at least 1
  const double eps = cfg.eps, scale = cfg.attn_scale > 0 ? cfg.attn_scale : 1.0 / std::sqrt((double)Dh);
  if (cfg.rotary_half && Dh < 8) throw std::invalid_argument("the half-truncated rotary needs a head size of 8 or more");
  ref::Mask short_mask = rmask;
  if (short_mask.window > 0) short_mask.window = std::max(1, short_mask.window / 2);
  const int G = cfg.gate_dims;
  const size_t TC = (size_t)T * C;
  auto table = [&](int i) { return cfg.value_table(i); };
  auto lname = [](int i, const char* w) { return "layer" + std::to_string(i) + "." + w; };

  // ---------------------------------------------------------------------------- forward
  Vec e(TC), x(TC), rstd_e(T);
  const double* E = p.ptr("embed");
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C; c++) e[(size_t)t * C + c] = E[(size_t)tokens[t] * C + c];
  rmsnorm(e.data(), x.data(), rstd_e.data(), T, C, eps);
  const Vec x0 = x;
  std::vector<Vec> pushed;
  std::vector<LayerCache> cache(L);
  for (int i = 0; i < L; i++) {
    LayerCache& c = cache[i];
    if (i >= L / 2) {
      const double s = p.ptr("skip")[i - L / 2];
      const Vec& add = pushed[L - 1 - i];
      for (size_t k = 0; k < TC; k++) x[k] += s * add[k];
    }
    c.x_in = x;
    const double* lam = p.ptr(lname(i, "lambda"));
    for (size_t k = 0; k < TC; k++) x[k] = lam[0] * x[k] + lam[1] * x0[k];
    c.x_mix = x;
    Vec o(TC);
    if (cfg.has_attention(i)) {  // (a layer without attention: x_attn = x_mix)
      const ref::Mask& lmask = cfg.has_short_window(i) ? short_mask : rmask;
      c.h.resize(TC);
      c.rstd_h.resize(T);
      rmsnorm(x.data(), c.h.data(), c.rstd_h.data(), T, C, eps);
      for (Vec* v : {&c.q_lin, &c.k_lin, &c.v_lin, &c.ve, &c.v, &c.qn, &c.kn, &c.qr, &c.kr, &c.y}) v->resize(TC);
      matmul(c.h.data(), p.ptr(lname(i, "wq")), c.q_lin.data(), T, C, C);
      matmul(c.h.data(), p.ptr(lname(i, "wk")), c.k_lin.data(), T, C, C);
      matmul(c.h.data(), p.ptr(lname(i, "wv")), c.v_lin.data(), T, C, C);
      const double* a = p.ptr(lname(i, "attn_lambda"));
      if (table(i) >= 0) {
        const double* VE = p.ptr("value_embed." + std::to_string(table(i)));
        for (int t = 0; t < T; t++)
          for (int k = 0; k < C; k++) {
            c.ve[(size_t)t * C + k] = VE[(size_t)tokens[t] * C + k];
            c.v[(size_t)t * C + k] = a[0] * c.v_lin[(size_t)t * C + k] + a[1] * c.ve[(size_t)t * C + k];
          }
      } else {  // no value embedding: v = a0 v (a1 unused)
        for (size_t k = 0; k < TC; k++) c.v[k] = a[0] * c.v_lin[k];
      }
      c.rstd_q.resize((size_t)T * H);
      c.rstd_k.resize((size_t)T * H);
      rmsnorm(c.q_lin.data(), c.qn.data(), c.rstd_q.data(), T * H, Dh, eps);
      rmsnorm(c.k_lin.data(), c.kn.data(), c.rstd_k.data(), T * H, Dh, eps);
      rotary_with(c.qn.data(), c.qr.data(), T, H, Dh, 1.0, cfg.rotary_base, cfg.rotary_half);
      rotary_with(c.kn.data(), c.kr.data(), T, H, Dh, 1.0, cfg.rotary_base, cfg.rotary_half);
      c.P.assign((size_t)H * T * T, 0.0);
      for (int h = 0; h < H; h++)
        for (int q = 0; q < T; q++) {
          double* P = &c.P[((size_t)h * T + q) * T];
          double mx = -INFINITY;
          for (int k = 0; k < T; k++) {
            if (!ref::keep(lmask, q, k)) continue;
            double s = 0;
            for (int d = 0; d < Dh; d++) s += c.qr[((size_t)q * H + h) * Dh + d] * c.kr[((size_t)k * H + h) * Dh + d];
            P[k] = scale * s;
            mx = std::max(mx, P[k]);
          }
          double sum = 0;
          for (int k = 0; k < T; k++)
            if (ref::keep(lmask, q, k)) sum += (P[k] = std::exp(P[k] - mx));
          for (int k = 0; k < T; k++) {
            if (!ref::keep(lmask, q, k)) continue;
            P[k] /= sum;
            for (int d = 0; d < Dh; d++) c.y[((size_t)q * H + h) * Dh + d] += P[k] * c.v[((size_t)k * H + h) * Dh + d];
          }
        }
      if (G > 0) {  // the gate: head h's output times sigmoid(h[t][:G] . Wg[:, h])
        const double* Wg = p.ptr(lname(i, "gate"));
        c.gate.resize((size_t)T * H);
        c.yg.resize(TC);
        for (int t = 0; t < T; t++)
          for (int hd = 0; hd < H; hd++) {
            double z = 0;
            for (int j = 0; j < G; j++) z += c.h[(size_t)t * C + j] * Wg[(size_t)j * H + hd];
            const double g = 1.0 / (1.0 + std::exp(-z));
            c.gate[(size_t)t * H + hd] = g;
            for (int d = 0; d < Dh; d++) c.yg[((size_t)t * H + hd) * Dh + d] = g * c.y[((size_t)t * H + hd) * Dh + d];
          }
      }
      matmul((G > 0 ? c.yg : c.y).data(), p.ptr(lname(i, "wo")), o.data(), T, C, C);
      for (size_t k = 0; k < TC; k++) x[k] += o[k];
    }
    c.x_attn = x;
    c.h2.resize(TC);
    c.rstd_h2.resize(T);
    rmsnorm(x.data(), c.h2.data(), c.rstd_h2.data(), T, C, eps);
    c.u.resize((size_t)T * F);
    c.r.resize((size_t)T * F);
    matmul(c.h2.data(), p.ptr(lname(i, "wfc")), c.u.data(), T, C, F);
    for (size_t k = 0; k < c.u.size(); k++) c.r[k] = c.u[k] > 0 ? c.u[k] * c.u[k] : 0.0;
    matmul(c.r.data(), p.ptr(lname(i, "wproj")), o.data(), T, F, C);
    for (size_t k = 0; k < TC; k++) x[k] += o[k];
    if (i < L / 2) pushed.push_back(x);
  }
  Vec hf(TC), rstd_f(T), z((size_t)T * V), dz((size_t)T * V);
  rmsnorm(x.data(), hf.data(), rstd_f.data(), T, C, eps);
  matmul(hf.data(), p.ptr("head"), z.data(), T, C, V);
  double loss = 0;
  if (logits_out) logits_out->assign((size_t)T * V, 0.0);
  for (int t = 0; t < T; t++) {
    double* zt = &z[(size_t)t * V];
    double mx = -INFINITY;
    std::vector<double> lg(V);
    if (cfg.logit_sigmoid)  // 30 sigmoid(z / 7.5)
      for (int v = 0; v < V; v++) mx = std::max(mx, lg[v] = kSoftcap / (1.0 + std::exp(-zt[v] / 7.5)));
    else
      for (int v = 0; v < V; v++) mx = std::max(mx, lg[v] = kSoftcap * std::tanh(zt[v] / kSoftcap));
    double sum = 0;
    for (int v = 0; v < V; v++) sum += std::exp(lg[v] - mx);
    const double w = counted[t] ? 1.0 / n_counted : 0.0;
    loss += w * (mx + std::log(sum) - lg[targets[t]]);
    for (int v = 0; v < V; v++) {
      const double dlogit = w * (std::exp(lg[v] - mx) / sum - (v == targets[t] ? 1.0 : 0.0));
      if (cfg.logit_sigmoid) {
        const double sg = 1.0 / (1.0 + std::exp(-zt[v] / 7.5));
        dz[(size_t)t * V + v] = dlogit * 4 * sg * (1 - sg);  // d(30 sigmoid(z / 7.5))/dz = 30 / 7.5 s (1 - s)
      } else {
        const double th = std::tanh(zt[v] / kSoftcap);
        dz[(size_t)t * V + v] = dlogit * (1 - th * th);
      }
      if (logits_out) (*logits_out)[(size_t)t * V + v] = lg[v];
    }
  }
  if (!grad) return loss;

  // ---------------------------------------------------------------------------- backward
  grad->assign(p.data.size(), 0.0);
  auto g = [&](const std::string& name) { return grad->data() + p.t(name).offset; };
  Vec dhf(TC, 0.0), dx(TC, 0.0), dx0(TC, 0.0);
  matmul_bwd(hf.data(), p.ptr("head"), dz.data(), dhf.data(), g("head"), T, C, V);
  rmsnorm_bwd(x.data(), rstd_f.data(), dhf.data(), dx.data(), T, C);
  std::vector<Vec> dpushed(L / 2, Vec(TC, 0.0));
  for (int i = L - 1; i >= 0; i--) {
    LayerCache& c = cache[i];
    if (i < L / 2)
      for (size_t k = 0; k < TC; k++) dx[k] += dpushed[i][k];
    // MLP: x = x_attn + relu(norm(x_attn) Wfc)^2 Wproj
    Vec dr((size_t)T * F, 0.0), du((size_t)T * F), dh2(TC, 0.0);
    matmul_bwd(c.r.data(), p.ptr(lname(i, "wproj")), dx.data(), dr.data(), g(lname(i, "wproj")), T, F, C);
    for (size_t k = 0; k < du.size(); k++) du[k] = c.u[k] > 0 ? 2 * c.u[k] * dr[k] : 0.0;
    matmul_bwd(c.h2.data(), p.ptr(lname(i, "wfc")), du.data(), dh2.data(), g(lname(i, "wfc")), T, C, F);
    rmsnorm_bwd(c.x_attn.data(), c.rstd_h2.data(), dh2.data(), dx.data(), T, C);
    if (cfg.has_attention(i)) {  // (without attention, dx of x_attn is dx of x_mix)
      const ref::Mask& lmask = cfg.has_short_window(i) ? short_mask : rmask;
      // attention: x_attn = x_mix + y Wo (y gated: y g)
      Vec dy(TC, 0.0), dqr(TC, 0.0), dkr(TC, 0.0), dv(TC, 0.0), dh_gate;
      if (G > 0) {
        Vec dyg(TC, 0.0);
        matmul_bwd(c.yg.data(), p.ptr(lname(i, "wo")), dx.data(), dyg.data(), g(lname(i, "wo")), T, C, C);
        const double* Wg = p.ptr(lname(i, "gate"));
        double* gWg = g(lname(i, "gate"));
        dh_gate.assign(TC, 0.0);
        for (int t = 0; t < T; t++)
          for (int hd = 0; hd < H; hd++) {
            const double gt = c.gate[(size_t)t * H + hd];
            double dg = 0;
            for (int d = 0; d < Dh; d++) {
              const size_t idx = ((size_t)t * H + hd) * Dh + d;
              dg += dyg[idx] * c.y[idx];
              dy[idx] = gt * dyg[idx];
            }
            const double dz = dg * gt * (1 - gt);
            for (int j = 0; j < G; j++) {
              gWg[(size_t)j * H + hd] += c.h[(size_t)t * C + j] * dz;
              dh_gate[(size_t)t * C + j] += Wg[(size_t)j * H + hd] * dz;
            }
          }
      } else {
        matmul_bwd(c.y.data(), p.ptr(lname(i, "wo")), dx.data(), dy.data(), g(lname(i, "wo")), T, C, C);
      }
      for (int h = 0; h < H; h++)
        for (int q = 0; q < T; q++) {
          const double* P = &c.P[((size_t)h * T + q) * T];
          const double* dyq = &dy[((size_t)q * H + h) * Dh];
          std::vector<double> dp(T, 0.0);
          double drow = 0;
          for (int k = 0; k < T; k++) {
            if (!ref::keep(lmask, q, k)) continue;
            for (int d = 0; d < Dh; d++) dp[k] += dyq[d] * c.v[((size_t)k * H + h) * Dh + d];
            drow += P[k] * dp[k];
          }
          for (int k = 0; k < T; k++) {
            if (!ref::keep(lmask, q, k)) continue;
            const double ds = P[k] * (dp[k] - drow);
            for (int d = 0; d < Dh; d++) {
              dqr[((size_t)q * H + h) * Dh + d] += scale * ds * c.kr[((size_t)k * H + h) * Dh + d];
              dkr[((size_t)k * H + h) * Dh + d] += scale * ds * c.qr[((size_t)q * H + h) * Dh + d];
              dv[((size_t)k * H + h) * Dh + d] += P[k] * dyq[d];
            }
          }
        }
      Vec dqn(TC), dkn(TC), dq(TC, 0.0), dk(TC, 0.0), dvl(TC), dh(TC, 0.0);
      rotary_with(dqr.data(), dqn.data(), T, H, Dh, -1.0, cfg.rotary_base, cfg.rotary_half);
      rotary_with(dkr.data(), dkn.data(), T, H, Dh, -1.0, cfg.rotary_base, cfg.rotary_half);
      rmsnorm_bwd(c.q_lin.data(), c.rstd_q.data(), dqn.data(), dq.data(), T * H, Dh);
      rmsnorm_bwd(c.k_lin.data(), c.rstd_k.data(), dkn.data(), dk.data(), T * H, Dh);
      const double* a = p.ptr(lname(i, "attn_lambda"));
      double* ga = g(lname(i, "attn_lambda"));
      if (table(i) >= 0) {
        double* gve = g("value_embed." + std::to_string(table(i)));
        for (int t = 0; t < T; t++)
          for (int k = 0; k < C; k++) {
            const size_t idx = (size_t)t * C + k;
            ga[0] += dv[idx] * c.v_lin[idx];
            ga[1] += dv[idx] * c.ve[idx];
            dvl[idx] = a[0] * dv[idx];
            gve[(size_t)tokens[t] * C + k] += a[1] * dv[idx];
          }
      } else {
        for (size_t idx = 0; idx < TC; idx++) {
          ga[0] += dv[idx] * c.v_lin[idx];
          dvl[idx] = a[0] * dv[idx];
        }
      }
      matmul_bwd(c.h.data(), p.ptr(lname(i, "wq")), dq.data(), dh.data(), g(lname(i, "wq")), T, C, C);
      matmul_bwd(c.h.data(), p.ptr(lname(i, "wk")), dk.data(), dh.data(), g(lname(i, "wk")), T, C, C);
      matmul_bwd(c.h.data(), p.ptr(lname(i, "wv")), dvl.data(), dh.data(), g(lname(i, "wv")), T, C, C);
      if (G > 0)
        for (size_t k = 0; k < TC; k++) dh[k] += dh_gate[k];
      rmsnorm_bwd(c.x_mix.data(), c.rstd_h.data(), dh.data(), dx.data(), T, C);
    }
    // x_mix = l0 x_in + l1 x0
    const double* lam = p.ptr(lname(i, "lambda"));
    double* gl = g(lname(i, "lambda"));
    for (size_t k = 0; k < TC; k++) {
      gl[0] += dx[k] * c.x_in[k];
      gl[1] += dx[k] * x0[k];
      dx0[k] += lam[1] * dx[k];
      dx[k] *= lam[0];
    }
    // x_in = x_prev + s * pushed
    if (i >= L / 2) {
      const int j = i - L / 2, src = L - 1 - i;
      const double s = p.ptr("skip")[j];
      double gs = 0;
      for (size_t k = 0; k < TC; k++) {
        gs += dx[k] * pushed[src][k];
        dpushed[src][k] += s * dx[k];
      }
      g("skip")[j] += gs;
    }
  }
  for (size_t k = 0; k < TC; k++) dx[k] += dx0[k];
  Vec de(TC, 0.0);
  rmsnorm_bwd(e.data(), rstd_e.data(), dx.data(), de.data(), T, C);
  double* gE = g("embed");
  for (int t = 0; t < T; t++)
    for (int c2 = 0; c2 < C; c2++) gE[(size_t)tokens[t] * C + c2] += de[(size_t)t * C + c2];
  return loss;
}

}  // namespace model_ref
