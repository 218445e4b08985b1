// Muon for one block matrix (docs/model.md, optimisation), on fp32 master weights with a bf16 copy:
//   buf = m buf + (1 - m) g;  u = (1 - m) g + m buf                       (fp32, Nesterov)
//   X = u / (||u||_F + 1e-7) in bf16, transposed if rows > cols (so X is r x c, r <= c)
//   five times: A = X X^T;  B = -4.7750 A + 2.0315 A A;  X = 3.4445 X + B X   (bf16 matmuls
//   through cuBLASLt, fp32 accumulation, every result stored in bf16)
//   W -= lr * max(1, cols/rows)^0.5 * X (transposed back);  W_bf16 = bf16(W)
//   (the record's max(1, rows/cols)^0.5 of PyTorch's [out][in] weight, W being stored [in][out]
//   here: fan_out/fan_in, which is 4 for the MLP's up-projection Wfc and 1/4 for Wproj)
//   W, g, buf: fp32 [rows][cols].
// The three stages are separate calls too (muon_momentum, muon_orthogonalize, muon_apply), so
// that data-parallel ranks can each orthogonalise their share of the matrices and exchange X:
// muon_step is exactly their composition. The optimiser of train_gpt.cu runs the second stage's
// Newton-Schulz batched over the matrices of one shape (newton_schulz5_batched).  The Frobenius norm is layers/reduce.cuh's deterministic dot. CPU reference: model/optimizer_reference.h (newton_schulz5, optimizer_step).
#pragma once
#include <cmath>

#include "layers/common.cuh"
#include "layers/matmul.cuh"
#include "layers/reduce.cuh"

namespace optim {

using layers::Batch;
using layers::bf16;
using layers::dot;
using layers::kDotBlocks;
using layers::Matmul;

// The momentum's two expressions with their roundings spelled out (each a product of (1 - mom)
// and g, then one fused multiply-add), so that every kernel computing them gives the same bits
// whatever the compiler would contract (optim/multi_tensor.cuh recomputes u from buf and g).
__device__ __forceinline__ float muon_buf(float mom, float buf, float g) { return __fmaf_rn(buf, mom, __fmul_rn(1.f - mom, g)); }
__device__ __forceinline__ float muon_u(float mom, float buf_new, float g) { return __fmaf_rn(buf_new, mom, __fmul_rn(1.f - mom, g)); }

__global__ void muon_momentum_kernel(const float* __restrict__ g, float* __restrict__ buf, float* u, size_t n,
                                     float mom) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float b = muon_buf(mom, buf[i], g[i]);
  buf[i] = b;
  if (u) u[i] = muon_u(mom, b, g[i]);  // u null: only the momentum buffer moves
}

// X[r][c] = bf16(u / (||u|| + 1e-7)), reading u [rows][cols] transposed when rows > cols.
__global__ void muon_normalize_kernel(const float* __restrict__ u, const float* __restrict__ sumsq, bf16* __restrict__ X,
                                      int rows, int cols) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)rows * cols) return;
  const float inv = 1.f / (sqrtf(sumsq[0]) + 1e-7f);
  const bool tall = rows > cols;
  const size_t src = tall ? (i % rows) * cols + i / rows : i;  // X is [cols][rows] when tall
  X[i] = __float2bfloat16(u[src] * inv);
}

// out = a * x + b * y (bf16); runs in place, so no __restrict__
__global__ void axpby_kernel(const bf16* x, const bf16* y, bf16* out, size_t n, float a,  // out may be x or y
                             float b) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = __float2bfloat16(a * __bfloat162float(x[i]) + b * __bfloat162float(y[i]));
}

__global__ void muon_update_kernel(float* __restrict__ w, bf16* __restrict__ w_bf16, const bf16* __restrict__ X, int rows,
                                   int cols, float step) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)rows * cols) return;
  const bool tall = rows > cols;
  const size_t r = i / cols, c = i % cols;
  const float x = __bfloat162float(X[tall ? c * rows + r : i]);
  const float v = w[i] - step * x;
  w[i] = v;
  if (w_bf16) w_bf16[i] = __float2bfloat16(v);
}

// Scratch for one matrix of up to max_rows x max_cols.
struct MuonScratch {
  float *u = nullptr, *partial = nullptr;
  bf16 *X = nullptr, *A = nullptr, *AA = nullptr, *BX = nullptr;
  explicit MuonScratch(size_t max_elems, size_t max_small) {
    bool ok = cudaMalloc(&u, max_elems * sizeof(float)) == cudaSuccess && cudaMalloc(&partial, (kDotBlocks + 1) * sizeof(float)) == cudaSuccess &&
              cudaMalloc(&X, max_elems * sizeof(bf16)) == cudaSuccess && cudaMalloc(&BX, max_elems * sizeof(bf16)) == cudaSuccess &&
              cudaMalloc(&A, max_small * sizeof(bf16)) == cudaSuccess && cudaMalloc(&AA, max_small * sizeof(bf16)) == cudaSuccess;
    if (!ok) throw std::runtime_error("muon: cannot allocate scratch");
  }
  ~MuonScratch() {
    for (void* p : {(void*)u, (void*)partial, (void*)X, (void*)A, (void*)AA, (void*)BX}) cudaFree(p);
  }
  MuonScratch(const MuonScratch&) = delete;
  MuonScratch& operator=(const MuonScratch&) = delete;
};

// Newton-Schulz on count matrices X_i = X + i stride (r x c each, r <= c, already normalised),
// in place, each product one batched call for all of them (a step's 72 block matrices come in
// two shapes: one call a product per shape instead of one per matrix, whose launches made most
// of the optimiser's time). A, AA: count r x r of scratch; BX: count r x c. count = 1 is the
// single matrix's products, unbatched.
inline void newton_schulz5_batched(Matmul& mm, bf16* X, int count, long long stride, int r, int c, bf16* A, bf16* AA, bf16* BX,
                                   cudaStream_t stream = 0) {
  const long long nx = (long long)r * c, na = (long long)r * r;
  auto prod = [&](const bf16* P, const bf16* Q, bf16* R, int m, int n, int k, bool tq, long long sp, long long sq, long long sr) {
    if (count == 1) mm(P, Q, R, m, n, k, false, tq, false, false, stream);
    else mm.batched(P, Q, R, m, n, k, false, tq, false, false, Batch{count, sp, sq, sr}, stream);
  };
  auto axpby = [&](const bf16* x, const bf16* y, bf16* out, size_t n, float a, float b) {
    axpby_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, out, n, a, b);
  };
  for (int it = 0; it < 5; it++) {
    prod(X, X, A, r, r, c, true, stride, stride, na);  // A = X X^T
    prod(A, A, AA, r, r, r, false, na, na, na);        // A A
    axpby(A, AA, AA, (size_t)(count * na), -4.7750f, 2.0315f);  // B, over the whole batch
    prod(AA, X, BX, r, c, r, false, na, stride, nx);             // B X
    if (stride == nx) {                                          // X = 3.4445 X + B X: the batch at once where X is too
      axpby(X, BX, X, (size_t)(count * nx), 3.4445f, 1.f);
    } else {
      for (int i = 0; i < count; i++) axpby(X + i * stride, BX + i * nx, X + i * stride, (size_t)nx, 3.4445f, 1.f);
    }
  }
}
// One matrix, with s's scratch.
inline void newton_schulz5(Matmul& mm, MuonScratch& s, bf16* X, int r, int c, cudaStream_t stream = 0) {
  newton_schulz5_batched(mm, X, 1, (long long)r * c, r, c, s.A, s.AA, s.BX, stream);
}

// Stage 1, on every rank: buf = m buf + (1 - m) g, and u (Nesterov) into s.u when u_out.
inline cudaError_t muon_momentum(MuonScratch& s, const float* g, float* buf, size_t n, float momentum, bool u_out,
                                 cudaStream_t stream = 0) {
  muon_momentum_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(g, buf, u_out ? s.u : nullptr, n, momentum);
  return cudaGetLastError();
}

// Stage 2: X (bf16, min(rows, cols) x max(rows, cols)) = Newton-Schulz(s.u / ||s.u||), in two
// parts: muon_normalize (X = s.u / ||s.u||) then Newton-Schulz, which the data-parallel
// optimiser runs batched over the matrices of one shape (newton_schulz5_batched).
inline cudaError_t muon_normalize(MuonScratch& s, bf16* X, int rows, int cols, cudaStream_t stream = 0) {
  const size_t n = (size_t)rows * cols;
  float* sumsq = s.partial + kDotBlocks;
  dot(s.u, s.u, n, sumsq, s.partial, /*accumulate=*/false, stream);
  muon_normalize_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(s.u, sumsq, X, rows, cols);
  return cudaGetLastError();
}
inline cudaError_t muon_orthogonalize(Matmul& mm, MuonScratch& s, bf16* X, int rows, int cols, cudaStream_t stream = 0) {
  cudaError_t e = muon_normalize(s, X, rows, cols, stream);
  if (e == cudaSuccess) newton_schulz5(mm, s, X, rows > cols ? cols : rows, rows > cols ? rows : cols, stream);
  return e == cudaSuccess ? cudaGetLastError() : e;
}

// Stage 3: W -= lr * max(1, cols/rows)^0.5 * X (transposed back), and the bf16 copy.
inline cudaError_t muon_apply(float* w, bf16* w_bf16, const bf16* X, int rows, int cols, float lr, cudaStream_t stream = 0) {
  const size_t n = (size_t)rows * cols;
  const float step = lr * std::sqrt(std::max(1.f, (float)cols / rows));
  muon_update_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(w, w_bf16, X, rows, cols, step);
  return cudaGetLastError();
}

// One Muon update of W [rows][cols] with gradient g; lr already includes the schedule.
inline cudaError_t muon_step(Matmul& mm, MuonScratch& s, float* w, bf16* w_bf16, const float* g, float* buf, int rows, int cols,
                             float lr, float momentum, cudaStream_t stream = 0) {
  cudaError_t e = muon_momentum(s, g, buf, (size_t)rows * cols, momentum, true, stream);
  if (e == cudaSuccess) e = muon_orthogonalize(mm, s, s.X, rows, cols, stream);
  if (e == cudaSuccess) e = muon_apply(w, w_bf16, s.X, rows, cols, lr, stream);
  return e;
}

}  // namespace optim
