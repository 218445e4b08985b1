// fp64 CPU references of the model's elementwise and row-wise layers, shared by the reference
// model (reference_model.cpp) and the CUDA layer tests (tests/layers/, one a layer).
//   rmsnorm:  y = x / sqrt(mean(x^2) + eps) over rows of n;  backward dx += r dy - r^3 x (dy.x) / n
//   rotary:   on [T][H][Dh], halves x1 = [0, Dh/2), x2 = [Dh/2, Dh), angle t * 10000^(-j/(Dh/2)):
//             y1 = x1 cos + x2 sin, y2 = -x1 sin + x2 cos; sign = -1 gives the transpose (backward);
//             rotary_with: any base, and the half-truncated form (D/4 frequencies base^(-j/(D/4-1)),
//             then D/4 of zero: dims [D/4, D/2) and [3D/4, D) pass unchanged)
//   relu2:    r = max(u, 0)^2;  backward du = 2 max(u, 0) dr
//   softcap_ce: one row of V head outputs z: logits 30 tanh(z / 30), loss logsumexp - logit[target],
//             dz = scale (softmax - onehot(target)) (1 - tanh^2(z / 30))
//   sigmoid_ce: the same with logits 30 sigmoid(z / 7.5): dz = scale (softmax - onehot) 4 s (1 - s),
//             s = sigmoid(z / 7.5)
#pragma once
#include <cmath>
#include <cstddef>

namespace model_ref {

// rows of length n: y = x / sqrt(mean(x^2) + eps)
inline void rmsnorm(const double* x, double* y, double* rstd, int rows, int n, double eps) {
  for (int r = 0; r < rows; r++) {
    double ss = 0;
    for (int j = 0; j < n; j++) ss += x[(size_t)r * n + j] * x[(size_t)r * n + j];
    rstd[r] = 1.0 / std::sqrt(ss / n + eps);
    for (int j = 0; j < n; j++) y[(size_t)r * n + j] = x[(size_t)r * n + j] * rstd[r];
  }
}
// dx += r dy - r^3 x (dy . x) / n
inline void rmsnorm_bwd(const double* x, const double* rstd, const double* dy, double* dx, int rows, int n) {
  for (int r = 0; r < rows; r++) {
    double dot = 0;
    for (int j = 0; j < n; j++) dot += dy[(size_t)r * n + j] * x[(size_t)r * n + j];
    const double s = rstd[r], s3 = s * s * s;
    for (int j = 0; j < n; j++) dx[(size_t)r * n + j] += s * dy[(size_t)r * n + j] - s3 * x[(size_t)r * n + j] * dot / n;
  }
}
// The rotary frequency of the dim pair (j, Dh/2 + j), j < Dh/2: base^(-j/(Dh/2)), or with
// half_truncated base^(-j/(Dh/4 - 1)) for j < Dh/4 and 0 after (Dh >= 8).
inline double rotary_frequency(int j, int Dh, double base, bool half_truncated) {
  if (!half_truncated) return std::pow(base, -(double)j / (Dh / 2));
  const int quarter = Dh / 4;
  return j < quarter ? std::pow(base, -(double)j / (quarter - 1)) : 0.0;
}
// Rotary on [T][H][Dh]: halves x1 = dims [0, Dh/2), x2 = [Dh/2, Dh), angle t * frequency(j).
// sign = +1 applies it; sign = -1 applies the transpose (the backward).
inline void rotary_with(const double* x, double* y, int T, int H, int Dh, double sign, double base, bool half_truncated) {
  const int half = Dh / 2;
  for (int t = 0; t < T; t++)
    for (int h = 0; h < H; h++)
      for (int j = 0; j < half; j++) {
        const double ang = t * rotary_frequency(j, Dh, base, half_truncated);
        const double c = std::cos(ang), s = sign * std::sin(ang);
        const size_t base = ((size_t)t * H + h) * Dh;
        const double x1 = x[base + j], x2 = x[base + half + j];
        y[base + j] = x1 * c + x2 * s;
        y[base + half + j] = -x1 * s + x2 * c;
      }
}

// The speedrun preset's rotary: base 10000, every dim pair.
inline void rotary(const double* x, double* y, int T, int H, int Dh, double sign) { rotary_with(x, y, T, H, Dh, sign, 10000.0, false); }

inline void relu2(const double* u, double* r, size_t n) {
  for (size_t i = 0; i < n; i++) r[i] = u[i] > 0 ? u[i] * u[i] : 0.0;
}
inline void relu2_bwd(const double* u, const double* dr, double* du, size_t n) {
  for (size_t i = 0; i < n; i++) du[i] = u[i] > 0 ? 2 * u[i] * dr[i] : 0.0;
}

// One row: returns the loss, writes dz (V values) when dz != nullptr
inline double softcap_ce(const double* z, int V, int target, double scale, double* dz) {
  double mx = -INFINITY, sum = 0;
  for (int i = 0; i < V; i++) mx = std::fmax(mx, 30 * std::tanh(z[i] / 30.0));
  for (int i = 0; i < V; i++) sum += std::exp(30 * std::tanh(z[i] / 30.0) - mx);
  const double lse = mx + std::log(sum);
  if (dz)
    for (int i = 0; i < V; i++) {
      const double th = std::tanh(z[i] / 30.0);
      dz[i] = scale * (std::exp(30 * th - lse) - (i == target)) * (1 - th * th);
    }
  return lse - 30 * std::tanh(z[target] / 30.0);
}

// One row with logits 30 sigmoid(z / 7.5), each in (0, 30): returns the loss, writes dz (V
// values) when dz != nullptr
inline double sigmoid_ce(const double* z, int V, int target, double scale, double* dz) {
  double mx = -INFINITY, sum = 0;
  auto logit = [](double zi) { return 30.0 / (1.0 + std::exp(-zi / 7.5)); };
  for (int i = 0; i < V; i++) mx = std::fmax(mx, logit(z[i]));
  for (int i = 0; i < V; i++) sum += std::exp(logit(z[i]) - mx);
  const double lse = mx + std::log(sum);
  if (dz)
    for (int i = 0; i < V; i++) {
      const double s = 1.0 / (1.0 + std::exp(-z[i] / 7.5));
      dz[i] = scale * (std::exp(logit(z[i]) - lse) - (i == target)) * 4 * s * (1 - s);
    }
  return lse - logit(z[target]);
}

}  // namespace model_ref
