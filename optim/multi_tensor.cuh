// The optimiser's element-wise stages over all of a model's tensors in one launch each, where
// optim/adam.cuh and optim/muon.cuh take one tensor a launch (docs/model.md, optimisation):
//   Adam, every tensor i of the list: m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//     p -= (mult lr_i) (m / bc1) / (sqrt(v / bc2) + eps);  p_bf16 = bf16(p)
//   Muon, every matrix j [rows_j][cols_j] of the list:
//     momentum:   buf = mom buf + (1 - mom) g                          (every matrix)
//     normalise:  u = (1 - mom) g + mom buf;  X_j = bf16(u / (||u||_F + 1e-7)), transposed when
//                 rows > cols (X_j is min x max)                       (the matrices marked owned)
//     apply:      W -= lr max(1, cols/rows)^0.5 X_j (transposed back);  W_bf16 = bf16(W)
//   p, g, m, v, W, buf: fp32; X, p_bf16, W_bf16: bf16 (a null p_bf16 / W_bf16 is skipped).
// Every element gets the per-tensor kernels' arithmetic (the same expressions in fp32; Muon's
// momentum through muon.cuh's muon_buf and muon_u, whose roundings are spelled out), and
// ||u||^2 is summed as layers/reduce.cuh's dot sums it (kDotBlocks fixed slices of 256 threads,
// then one block of kDotBlocks adds them by the same tree), so the results are those kernels'
// bits (tests/layers/multi_tensor.cu checks it). What changes is the launches: a step's 72
// block matrices took five each and its 33 other tensors one each, about 400 launches of a few
// microseconds; here five in all. The transposed reads and writes of the tall matrices go
// through 32 x 32 tiles in shared memory, so both sides stay coalesced.
// Blocks find their tensor by a binary search of the first block of each (a table uploaded
// once, since the tensors' addresses do not move between steps).
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "layers/common.cuh"
#include "layers/reduce.cuh"
#include "optim/muon.cuh"

namespace optim {

using layers::bf16;
using layers::block_tree_sum;
using layers::kDotBlocks;

struct AdamTensor {
  float* p;
  bf16* p_bf16;
  const float* g;
  float* m;
  float* v;
  size_t n;
  float lr;  // the tensor's rate before the schedule's multiplier
};
struct MuonMatrix {
  float* w;
  bf16* w_bf16;
  const float* g;
  float* buf;
  bf16* X;  // min(rows, cols) x max(rows, cols); written only when owned
  int rows, cols;
  bool owned;  // this rank orthogonalises it
};

namespace multi {

constexpr int kAdamChunk = 4096;  // elements a block of 256 threads (16 each)
constexpr int kTile = 32;         // the tiled stages: 32 x 32 elements a block of 32 x 8 threads

template <typename Desc>
__device__ __forceinline__ int find_tensor(const Desc* d, int count, long long block) {
  int lo = 0, hi = count - 1;  // the last tensor whose first block is <= block
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (d[mid].first_block <= block) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

struct AdamDesc {
  AdamTensor t;
  long long first_block;
};
struct MuonDesc {
  MuonMatrix m;
  long long first_block;  // of the tiled stages (tiles of the [rows][cols] matrix)
  float scale;            // max(1, cols/rows)^0.5
};

__global__ void adam_multi_kernel(const AdamDesc* __restrict__ d, int count, float mult, float b1, float b2, float bc1, float bc2,
                                  float eps) {
  const int j = find_tensor(d, count, blockIdx.x);
  const AdamTensor t = d[j].t;
  const float lr = mult * t.lr;
  const size_t start = (size_t)(blockIdx.x - d[j].first_block) * kAdamChunk;
#pragma unroll 4
  for (int k = 0; k < kAdamChunk / 256; k++) {
    const size_t i = start + (size_t)k * 256 + threadIdx.x;
    if (i >= t.n) break;
    const float gi = t.g[i];
    const float mi = b1 * t.m[i] + (1.f - b1) * gi, vi = b2 * t.v[i] + (1.f - b2) * gi * gi;  // as adam.cuh
    t.m[i] = mi;
    t.v[i] = vi;
    const float pi = t.p[i] - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    t.p[i] = pi;
    if (t.p_bf16) t.p_bf16[i] = __float2bfloat16(pi);
  }
}

// momentum for every matrix; for the owned ones each block's share of ||u||^2, in dot's slices
// (grid kDotBlocks x matrices)
__global__ void muon_momentum_multi_kernel(const MuonDesc* __restrict__ d, float mom, float* __restrict__ partial) {
  __shared__ float s[256];
  const MuonMatrix m = d[blockIdx.y].m;
  const size_t n = (size_t)m.rows * m.cols;
  float acc = 0.f;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float gi = m.g[i];
    const float b = muon_buf(mom, m.buf[i], gi);
    m.buf[i] = b;
    const float u = muon_u(mom, b, gi);
    acc += u * u;
  }
  if (!m.owned) return;  // (the whole block returns together: no one is left at the tree's barriers)
  block_tree_sum<256>(acc, s);
  if (threadIdx.x == 0) partial[(size_t)blockIdx.y * kDotBlocks + blockIdx.x] = s[0];
}

__global__ void muon_sumsq_kernel(const MuonDesc* __restrict__ d, const float* __restrict__ partial, float* __restrict__ sumsq) {
  __shared__ float s[kDotBlocks];
  if (!d[blockIdx.x].m.owned) return;
  block_tree_sum<kDotBlocks>(partial[(size_t)blockIdx.x * kDotBlocks + threadIdx.x], s);
  if (threadIdx.x == 0) sumsq[blockIdx.x] = 0.f + s[0];  // as dot_final_kernel
}

// the tile of matrix j a block takes: its rows r0.., columns c0..
struct TileAt {
  int j, r0, c0;
};
__device__ __forceinline__ TileAt tile_of(const MuonDesc* d, int count) {
  const int j = find_tensor(d, count, blockIdx.x);
  const int t = (int)(blockIdx.x - d[j].first_block), tiles_c = (d[j].m.cols + kTile - 1) / kTile;
  return {j, (t / tiles_c) * kTile, (t % tiles_c) * kTile};
}

// X = bf16(u / (||u|| + 1e-7)) of the owned matrices (the others' tiles return at once)
__global__ void muon_normalize_multi_kernel(const MuonDesc* __restrict__ d, int count, float mom, const float* __restrict__ sumsq) {
  __shared__ float tile[kTile][kTile + 1];
  const TileAt at = tile_of(d, count);
  const MuonMatrix m = d[at.j].m;
  if (!m.owned) return;
  const float inv = 1.f / (sqrtf(sumsq[at.j]) + 1e-7f);  // as muon.cuh
  const bool tall = m.rows > m.cols;
  for (int y = threadIdx.y; y < kTile; y += blockDim.y) {
    const int r = at.r0 + y, c = at.c0 + threadIdx.x;
    if (r >= m.rows || c >= m.cols) continue;
    const size_t i = (size_t)r * m.cols + c;
    const float u = muon_u(mom, m.buf[i], m.g[i]);
    if (tall) tile[y][threadIdx.x] = u;
    else m.X[i] = __float2bfloat16(u * inv);
  }
  if (!tall) return;
  __syncthreads();
  for (int y = threadIdx.y; y < kTile; y += blockDim.y) {  // X [cols][rows]: row c = at.c0 + y, column r
    const int c = at.c0 + y, r = at.r0 + threadIdx.x;
    if (r < m.rows && c < m.cols) m.X[(size_t)c * m.rows + r] = __float2bfloat16(tile[threadIdx.x][y] * inv);
  }
}

// W -= lr scale X (transposed back), every matrix
__global__ void muon_apply_multi_kernel(const MuonDesc* __restrict__ d, int count, float lr) {
  __shared__ float tile[kTile][kTile + 1];
  const TileAt at = tile_of(d, count);
  const MuonMatrix m = d[at.j].m;
  const float step = lr * d[at.j].scale;  // as muon_apply: lr * max(1, cols/rows)^0.5
  const bool tall = m.rows > m.cols;
  if (tall) {  // X [cols][rows]: read its rows c along r, coalesced
    for (int y = threadIdx.y; y < kTile; y += blockDim.y) {
      const int c = at.c0 + y, r = at.r0 + threadIdx.x;
      if (r < m.rows && c < m.cols) tile[threadIdx.x][y] = __bfloat162float(m.X[(size_t)c * m.rows + r]);
    }
    __syncthreads();
  }
  for (int y = threadIdx.y; y < kTile; y += blockDim.y) {
    const int r = at.r0 + y, c = at.c0 + threadIdx.x;
    if (r >= m.rows || c >= m.cols) continue;
    const size_t i = (size_t)r * m.cols + c;
    const float x = tall ? tile[y][threadIdx.x] : __bfloat162float(m.X[i]);
    const float v = m.w[i] - step * x;
    m.w[i] = v;
    if (m.w_bf16) m.w_bf16[i] = __float2bfloat16(v);
  }
}

template <typename T>
inline T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  if (cudaMalloc(&d, std::max<size_t>(h.size(), 1) * sizeof(T)) != cudaSuccess ||
      cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess)
    throw std::runtime_error("multi-tensor optimiser: cannot upload its table of " + std::to_string(h.size()) + " tensors");
  return d;
}

}  // namespace multi

// Adam over a fixed list of tensors, one launch a step.
class AdamMulti {
 public:
  explicit AdamMulti(const std::vector<AdamTensor>& list) : count_((int)list.size()) {
    std::vector<multi::AdamDesc> h;
    for (const AdamTensor& t : list) {
      h.push_back({t, blocks_});
      blocks_ += (long long)((t.n + multi::kAdamChunk - 1) / multi::kAdamChunk);
    }
    d_ = multi::upload(h);
  }
  ~AdamMulti() { cudaFree(d_); }
  AdamMulti(const AdamMulti&) = delete;
  AdamMulti& operator=(const AdamMulti&) = delete;
  // t: Adam steps taken, from 1; mult: the schedule's multiplier of every tensor's lr
  cudaError_t step(float mult, int t, float b1, float b2, float eps, cudaStream_t stream = 0) const {
    if (t < 1 || blocks_ > INT32_MAX) return cudaErrorInvalidValue;
    if (blocks_ == 0) return cudaSuccess;
    const float bc1 = (float)(1.0 - std::pow((double)b1, t)), bc2 = (float)(1.0 - std::pow((double)b2, t));  // as adam_step
    multi::adam_multi_kernel<<<(unsigned)blocks_, 256, 0, stream>>>(d_, count_, mult, b1, b2, bc1, bc2, eps);
    return cudaGetLastError();
  }

 private:
  int count_;
  long long blocks_ = 0;
  multi::AdamDesc* d_ = nullptr;
};

// Muon's element-wise stages over a fixed list of matrices; Newton-Schulz runs between
// normalize() and apply() on the owned matrices' X (newton_schulz5_batched).
class MuonMulti {
 public:
  explicit MuonMulti(const std::vector<MuonMatrix>& list) : count_((int)list.size()) {
    std::vector<multi::MuonDesc> h;
    for (const MuonMatrix& m : list) {
      if (m.rows <= 0 || m.cols <= 0) throw std::invalid_argument("multi-tensor Muon: a matrix of no elements");
      h.push_back({m, tiles_, std::sqrt(std::max(1.f, (float)m.cols / m.rows))});  // as muon_apply
      tiles_ += (long long)((m.rows + multi::kTile - 1) / multi::kTile) * ((m.cols + multi::kTile - 1) / multi::kTile);
    }
    d_ = multi::upload(h);
    bool ok = cudaMalloc(&partial_, std::max(count_, 1) * (size_t)kDotBlocks * sizeof(float)) == cudaSuccess &&
              cudaMalloc(&sumsq_, std::max(count_, 1) * sizeof(float)) == cudaSuccess;
    if (!ok) {
      for (void* q : {(void*)d_, (void*)partial_, (void*)sumsq_}) cudaFree(q);  // (null: nothing to free)
      throw std::runtime_error("multi-tensor Muon: cannot allocate its sums");
    }
  }
  ~MuonMulti() {
    cudaFree(d_);
    cudaFree(partial_);
    cudaFree(sumsq_);
  }
  MuonMulti(const MuonMulti&) = delete;
  MuonMulti& operator=(const MuonMulti&) = delete;
  // every matrix's momentum, then the owned matrices' X = u / ||u|| (three launches)
  cudaError_t normalize(float mom, cudaStream_t stream = 0) const {
    if (count_ == 0) return cudaSuccess;
    if (count_ > 65535 || tiles_ > INT32_MAX) return cudaErrorInvalidValue;
    multi::muon_momentum_multi_kernel<<<dim3(kDotBlocks, count_), 256, 0, stream>>>(d_, mom, partial_);
    multi::muon_sumsq_kernel<<<count_, kDotBlocks, 0, stream>>>(d_, partial_, sumsq_);
    multi::muon_normalize_multi_kernel<<<(unsigned)tiles_, dim3(multi::kTile, 8), 0, stream>>>(d_, count_, mom, sumsq_);
    return cudaGetLastError();
  }
  // every matrix's W -= lr scale X; lr includes the schedule
  cudaError_t apply(float lr, cudaStream_t stream = 0) const {
    if (count_ == 0) return cudaSuccess;
    if (tiles_ > INT32_MAX) return cudaErrorInvalidValue;
    multi::muon_apply_multi_kernel<<<(unsigned)tiles_, dim3(multi::kTile, 8), 0, stream>>>(d_, count_, lr);
    return cudaGetLastError();
  }

 private:
  int count_;
  long long tiles_ = 0;
  multi::MuonDesc* d_ = nullptr;
  float *partial_ = nullptr, *sumsq_ = nullptr;
};

}  // namespace optim
