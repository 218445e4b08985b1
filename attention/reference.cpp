// fp64 CPU reference of masked attention: see reference.h.
#include "attention/reference.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace ref {

float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  u &= 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

static double maybe_round(double x, bool r) { return r ? (double)round_bf16((float)x) : x; }

int doc_start(const Mask& m, int q) {
  if (!m.doc) return 0;
  // The reference's passes ask row after row, so the last answer is tried first; it is taken only
  // if it is, by definition, the start of q's document (its id is q's and the position before
  // it has another), which no change of inputs between calls can fool.
  thread_local int guess = 0;
  const int id = m.doc[q];
  if (!(guess <= q && m.doc[guess] == id && (guess == 0 || m.doc[guess - 1] != id))) {
    guess = q;
    while (guess > 0 && m.doc[guess - 1] == id) guess--;
  }
  return guess;
}

bool keep(const Mask& m, int q, int k) {
  if (m.doc && m.doc[q] != m.doc[k]) return false;
  if (m.causal && !(k <= q || (m.prefix > 0 && k - doc_start(m, q) < m.prefix))) return false;
  if (m.window > 0) {
    long long a = q, b = k;
    if (m.blocks) {
      a = q / 128;
      b = k / 128;
    }
    if (m.bidir ? !(std::llabs(a - b) < m.window) : !(a - b < m.window)) return false;
  }
  return true;
}

static double dot(const float* a, const float* b, int D) {
  double s = 0;
  for (int d = 0; d < D; d++) s += (double)a[d] * (double)b[d];
  return s;
}

void forward_row(const float* q, const float* k, const float* v, int T, int H, int D, const Mask& m, int h, int row,
                 double* o_row, double* lse, bool bf16_steps) {
  const double scale = 1.0 / std::sqrt((double)D);
  const size_t ld = (size_t)H * D;
  const float* qr = q + row * ld + h * D;
  std::vector<double> s(T);
  double mx = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < T; j++) {
    s[j] = keep(m, row, j) ? maybe_round(scale * dot(qr, k + j * ld + h * D, D), bf16_steps)
                           : -std::numeric_limits<double>::infinity();
    mx = std::max(mx, s[j]);
  }
  for (int d = 0; d < D; d++) o_row[d] = 0;
  if (mx == -std::numeric_limits<double>::infinity()) {  // nothing kept
    *lse = -std::numeric_limits<double>::infinity();
    return;
  }
  double sum = 0;
  for (int j = 0; j < T; j++) sum += std::exp(s[j] - mx);
  *lse = mx + std::log(sum);
  for (int j = 0; j < T; j++) {
    if (s[j] == -std::numeric_limits<double>::infinity()) continue;
    double p = maybe_round(std::exp(s[j] - *lse), bf16_steps);
    const float* vr = v + j * ld + h * D;
    for (int d = 0; d < D; d++) o_row[d] += p * vr[d];
  }
  for (int d = 0; d < D; d++) o_row[d] = maybe_round(o_row[d], bf16_steps);
}

void forward(const float* q, const float* k, const float* v, int T, int H, int D, const Mask& m, std::vector<double>& o,
             std::vector<double>& lse, bool bf16_steps) {
  o.assign((size_t)T * H * D, 0.0);
  lse.assign((size_t)H * T, 0.0);
#pragma omp parallel for collapse(2) schedule(dynamic, 16)
  for (int h = 0; h < H; h++)
    for (int i = 0; i < T; i++) forward_row(q, k, v, T, H, D, m, h, i, &o[((size_t)i * H + h) * D], &lse[(size_t)h * T + i], bf16_steps);
}

void backward(const float* q, const float* k, const float* v, const float* dout, int T, int H, int D, const Mask& m,
              std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv, bool bf16_steps) {
  const double scale = 1.0 / std::sqrt((double)D);
  const size_t ld = (size_t)H * D;
  std::vector<double> o, lse;
  forward(q, k, v, T, H, D, m, o, lse, bf16_steps);
  // Drow[h, i] = sum_d dout * o  (= sum_j p_ij dp_ij). A bf16 implementation forms Drow from
  // its own bf16 forward output, which is what bf16_steps imitates.
  std::vector<double> drow((size_t)H * T);
  for (int h = 0; h < H; h++)
    for (int i = 0; i < T; i++) {
      double s = 0;
      for (int d = 0; d < D; d++) s += (double)dout[i * ld + h * D + d] * o[(i * H + h) * (size_t)D + d];
      drow[(size_t)h * T + i] = s;
    }
  dq.assign((size_t)T * H * D, 0.0);
  dk.assign((size_t)T * H * D, 0.0);
  dv.assign((size_t)T * H * D, 0.0);
  // p, dp and ds of one pair (i query, j key), shared by both passes
  auto pair = [&](int h, int i, int j, double& p, double& ds) {
    double s = maybe_round(scale * dot(q + i * ld + h * D, k + j * ld + h * D, D), bf16_steps);
    p = std::exp(s - lse[(size_t)h * T + i]);
    double dp = maybe_round(dot(dout + i * ld + h * D, v + j * ld + h * D, D), bf16_steps);
    ds = p * (dp - drow[(size_t)h * T + i]);
    p = maybe_round(p, bf16_steps);
    ds = maybe_round(ds, bf16_steps);
  };
  // dq: one pass over query rows
#pragma omp parallel for collapse(2) schedule(dynamic, 16)
  for (int h = 0; h < H; h++)
    for (int i = 0; i < T; i++) {
      double* g = &dq[((size_t)i * H + h) * D];
      for (int j = 0; j < T; j++) {
        if (!keep(m, i, j)) continue;
        double p, ds;
        pair(h, i, j, p, ds);
        const float* kr = k + j * ld + h * D;
        for (int d = 0; d < D; d++) g[d] += scale * ds * kr[d];
      }
      for (int d = 0; d < D; d++) g[d] = maybe_round(g[d], bf16_steps);
    }
  // dk, dv: one pass over key rows
#pragma omp parallel for collapse(2) schedule(dynamic, 16)
  for (int h = 0; h < H; h++)
    for (int j = 0; j < T; j++) {
      double* gk = &dk[((size_t)j * H + h) * D];
      double* gv = &dv[((size_t)j * H + h) * D];
      for (int i = 0; i < T; i++) {
        if (!keep(m, i, j)) continue;
        double p, ds;
        pair(h, i, j, p, ds);
        const float* qr = q + i * ld + h * D;
        const float* dor = dout + i * ld + h * D;
        for (int d = 0; d < D; d++) {
          gk[d] += scale * ds * qr[d];
          gv[d] += p * dor[d];
        }
      }
      for (int d = 0; d < D; d++) {
        gk[d] = maybe_round(gk[d], bf16_steps);
        gv[d] = maybe_round(gv[d], bf16_steps);
      }
    }
}

void backward_dq_row(const float* q, const float* k, const float* v, const float* dout, int T, int H, int D,
                     const Mask& m, int h, int row, double* dq_row) {
  const double scale = 1.0 / std::sqrt((double)D);
  const size_t ld = (size_t)H * D;
  std::vector<double> o(D);
  double lse;
  forward_row(q, k, v, T, H, D, m, h, row, o.data(), &lse);
  const float* dor = dout + row * ld + h * D;
  double drow = 0;
  for (int d = 0; d < D; d++) drow += dor[d] * o[d];
  for (int d = 0; d < D; d++) dq_row[d] = 0;
  for (int j = 0; j < T; j++) {
    if (!keep(m, row, j)) continue;
    double p = std::exp(scale * dot(q + row * ld + h * D, k + j * ld + h * D, D) - lse);
    double ds = p * (dot(dor, v + j * ld + h * D, D) - drow);
    for (int d = 0; d < D; d++) dq_row[d] += scale * ds * k[j * ld + h * D + d];
  }
}

}  // namespace ref
