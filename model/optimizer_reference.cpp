// fp64 CPU reference of Adam, Muon and the schedules: see optimizer_reference.h.
#include "model/optimizer_reference.h"

#include <cmath>

namespace model_ref {

// C[r][c] = A[r][k] B[k][c]
static std::vector<double> mm(const std::vector<double>& a, const std::vector<double>& b, int r, int k, int c) {
  std::vector<double> out((size_t)r * c, 0.0);
  for (int i = 0; i < r; i++)
    for (int j = 0; j < k; j++) {
      const double av = a[(size_t)i * k + j];
      for (int l = 0; l < c; l++) out[(size_t)i * c + l] += av * b[(size_t)j * c + l];
    }
  return out;
}
static std::vector<double> transpose(const std::vector<double>& a, int r, int c) {
  std::vector<double> t((size_t)r * c);
  for (int i = 0; i < r; i++)
    for (int j = 0; j < c; j++) t[(size_t)j * r + i] = a[(size_t)i * c + j];
  return t;
}

void newton_schulz5(std::vector<double>& x, int rows, int cols) {
  double fro = 0;
  for (double v : x) fro += v * v;
  fro = std::sqrt(fro);
  for (double& v : x) v /= fro + 1e-7;
  const bool tall = rows > cols;
  std::vector<double> X = tall ? transpose(x, rows, cols) : x;
  const int r = tall ? cols : rows, c = tall ? rows : cols;  // X is r x c with r <= c
  for (int it = 0; it < 5; it++) {
    std::vector<double> A = mm(X, transpose(X, r, c), r, c, r);  // r x r
    std::vector<double> AA = mm(A, A, r, r, r);
    std::vector<double> B(A.size());
    for (size_t i = 0; i < A.size(); i++) B[i] = -4.7750 * A[i] + 2.0315 * AA[i];
    std::vector<double> BX = mm(B, X, r, r, c);
    for (size_t i = 0; i < X.size(); i++) X[i] = 3.4445 * X[i] + BX[i];
  }
  x = tall ? transpose(X, r, c) : X;
}

void optimizer_step(Params& p, const std::vector<double>& grad, OptimizerState& s, int step, const Schedule& sched,
                    const OptimizerHyper& hp) {
  if (s.m.empty()) {
    s.m.assign(p.data.size(), 0.0);
    s.v.assign(p.data.size(), 0.0);
    s.buf.assign(p.data.size(), 0.0);
  }
  s.adam_steps++;
  const double mult = sched.lr_multiplier(step), mom = sched.muon_momentum(step);
  const double bc1 = 1 - std::pow(hp.beta1, s.adam_steps), bc2 = 1 - std::pow(hp.beta2, s.adam_steps);
  for (const Tensor& t : p.tensors) {
    const ParamGroup grp = group_of(t);
    double* w = p.data.data() + t.offset;
    const double* g = grad.data() + t.offset;
    if (grp != ParamGroup::kMatrix) {
      const double lr = mult * (grp == ParamGroup::kEmbed ? hp.lr_embed : grp == ParamGroup::kHead ? hp.lr_head : hp.lr_scalar);
      double* m = s.m.data() + t.offset;
      double* v = s.v.data() + t.offset;
      for (size_t i = 0; i < t.size(); i++) {
        m[i] = hp.beta1 * m[i] + (1 - hp.beta1) * g[i];
        v[i] = hp.beta2 * v[i] + (1 - hp.beta2) * g[i] * g[i];
        if (hp.adam_eps_scaled)  // the SparseAttnGate record's DistAdam: eps outside the bias correction
          w[i] -= m[i] / (std::sqrt(v[i]) + hp.adam_eps) * (lr * (std::sqrt(bc2) / bc1));
        else
          w[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + hp.adam_eps);
      }
      continue;
    }
    double* buf = s.buf.data() + t.offset;
    std::vector<double> u(t.size());
    for (size_t i = 0; i < t.size(); i++) {
      buf[i] = mom * buf[i] + (1 - mom) * g[i];
      u[i] = (1 - mom) * g[i] + mom * buf[i];
    }
    newton_schulz5(u, (int)t.rows, (int)t.cols);
    // the record's max(1, rows/cols)^0.5 of PyTorch's [out][in] weight; W here is [in][out]
    // (hp.muon_fan_scale false: the SparseAttnGate record, whose matrices all have the factor 1)
    const double lr = mult * hp.lr_muon * (hp.muon_fan_scale ? std::sqrt(std::max(1.0, (double)t.cols / t.rows)) : 1.0);
    for (size_t i = 0; i < t.size(); i++) w[i] -= lr * u[i];
  }
}

}  // namespace model_ref
