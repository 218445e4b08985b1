// Muon for one block matrix (SPEC section 4), on fp32 master weights with a bf16 copy:
//   buf = m buf + (1 - m) g;  u = (1 - m) g + m buf                       (fp32, Nesterov)
//   X = u / (||u||_F + 1e-7) in bf16, transposed if rows > cols (so X is r x c, r <= c)
//   five times: A = X X^T;  B = -4.7750 A + 2.0315 A A;  X = 3.4445 X + B X   (bf16 matmuls
//   through cuBLASLt, fp32 accumulation, every result stored in bf16)
//   W -= lr * max(1, rows/cols)^0.5 * X (transposed back);  W_bf16 = bf16(W)
//   W, g, buf: fp32 [rows][cols].  The Frobenius norm is layers/reduce.cuh's deterministic dot. CPU reference: model/optimizer_reference.h (newton_schulz5, optimizer_step).
#pragma once
#include <cmath>

#include "layers/common.cuh"
#include "layers/matmul.cuh"
#include "layers/reduce.cuh"

namespace layers {

__global__ void muon_momentum_kernel(const float* __restrict__ g, float* __restrict__ buf, float* __restrict__ u, size_t n,
                                     float mom) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float b = mom * buf[i] + (1.f - mom) * g[i];
  buf[i] = b;
  u[i] = (1.f - mom) * g[i] + mom * b;
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

// Newton-Schulz on s.X (r x c, r <= c, already normalised), in place.
inline void newton_schulz5(Matmul& mm, MuonScratch& s, int r, int c, cudaStream_t stream = 0) {
  const size_t nx = (size_t)r * c, na = (size_t)r * r;
  for (int it = 0; it < 5; it++) {
    mm(s.X, s.X, s.A, r, r, c, false, true, false, false, stream);  // A = X X^T
    mm(s.A, s.A, s.AA, r, r, r, false, false, false, false, stream);  // A A
    axpby_kernel<<<(unsigned)((na + 255) / 256), 256, 0, stream>>>(s.A, s.AA, s.AA, na, -4.7750f, 2.0315f);  // B
    mm(s.AA, s.X, s.BX, r, c, r, false, false, false, false, stream);  // B X
    axpby_kernel<<<(unsigned)((nx + 255) / 256), 256, 0, stream>>>(s.X, s.BX, s.X, nx, 3.4445f, 1.f);
  }
}

// One Muon update of W [rows][cols] with gradient g; lr already includes the schedule.
inline cudaError_t muon_step(Matmul& mm, MuonScratch& s, float* w, bf16* w_bf16, const float* g, float* buf, int rows, int cols,
                             float lr, float momentum, cudaStream_t stream = 0) {
  const size_t n = (size_t)rows * cols;
  const unsigned grid = (unsigned)((n + 255) / 256);
  muon_momentum_kernel<<<grid, 256, 0, stream>>>(g, buf, s.u, n, momentum);
  float* sumsq = s.partial + kDotBlocks;
  dot(s.u, s.u, n, sumsq, s.partial, /*accumulate=*/false, stream);
  muon_normalize_kernel<<<grid, 256, 0, stream>>>(s.u, sumsq, s.X, rows, cols);
  const int r = rows > cols ? cols : rows, c = rows > cols ? rows : cols;
  newton_schulz5(mm, s, r, c, stream);
  const float step = lr * std::sqrt(std::max(1.f, (float)rows / cols));
  muon_update_kernel<<<grid, 256, 0, stream>>>(w, w_bf16, s.X, rows, cols, step);
  return cudaGetLastError();
}

}  // namespace layers
