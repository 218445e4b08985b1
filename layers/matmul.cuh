// Matrix products through cuBLASLt in bf16 with fp32 accumulation (docs/model.md), row-major:
//   C[m][n] (+)= op(A)[m][k] * op(B)[k][n]
//   A is stored [m][k], or [k][m] when trans_a;  B is stored [k][n], or [n][k] when trans_b;
//   C is bf16, or fp32 when c_fp32 (gradients); accumulate adds to C (beta = 1).
//   add(): D = C + op(A) op(B) in bf16 with C and D separate buffers (a residual connection
//   written to a new tensor without a copy), or the same one.
// Forward y = x W is (x, W); backward dx = dy W^T is (dy, W, trans_b) and dW = x^T dy is
// (x, dy, trans_a). cuBLASLt is column-major, so the call computes C^T = op(B)^T op(A)^T.
// Errors come back as a message naming the shape, never as a raw status code. Each shape's
// descriptors and algorithm are chosen once and cached (the same choice every call, so results
// do not change between calls). The algorithm is cuBLASLt's first heuristic choice; a benchmark
// (bench/bench_matmul.cu) may ask for the rank-th instead, and algorithm() says which it is.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

namespace layers {

class Matmul {
 public:
  // rank: which of cuBLASLt's heuristic choices to use, 0 = its first (benchmarks try others)
  explicit Matmul(size_t workspace_bytes = 32u << 20, int rank = 0) : ws_bytes_(workspace_bytes), rank_(rank) {
    if (rank < 0 || rank >= kMaxRank) throw std::invalid_argument("matmul: heuristic rank must lie in [0, " + std::to_string(kMaxRank) + ")");
    check(cublasLtCreate(&handle_), "cublasLtCreate");
    if (cudaMalloc(&workspace_, ws_bytes_) != cudaSuccess) throw std::runtime_error("matmul: cannot allocate the cuBLASLt workspace");
  }
  ~Matmul() {
    for (auto& kv : plans_) destroy(kv.second);
    cudaFree(workspace_);
    cublasLtDestroy(handle_);
  }
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  // Named for what they compute, for a layer y[rows][out] = x[rows][in] W[in][out]:
  void xW(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int rows, int in, int out) {
    (*this)(x, W, y, rows, out, in, false, false);
  }
  // y = c + x W (c and y may be one buffer)
  void xW_plus(const __nv_bfloat16* x, const __nv_bfloat16* W, const __nv_bfloat16* c, __nv_bfloat16* y, int rows, int in, int out) {
    add(x, W, c, y, rows, out, in, false, false);
  }
  // dx[rows][in] = dy[rows][out] W^T (+= with accumulate), bf16
  void dX(const __nv_bfloat16* dy, const __nv_bfloat16* W, __nv_bfloat16* dx, int rows, int in, int out, bool accumulate = false) {
    (*this)(dy, W, dx, rows, in, out, false, true, accumulate);
  }
  // dW[in][out] += x^T dy, fp32 (gradients accumulate over micro-steps)
  void dW(const __nv_bfloat16* x, const __nv_bfloat16* dy, float* dW, int rows, int in, int out) {
    (*this)(x, dy, dW, in, out, rows, true, false, true, true);
  }

  // The algorithm the shape of operator() runs: cuBLASLt's id, tile, stages and split-K, and how
  // many choices its heuristic offered. Throws when it offers fewer than rank + 1.
  std::string algorithm(int m, int n, int k, bool trans_a, bool trans_b, bool c_fp32) {
    const Plan& p = plan(m, n, k, trans_a, trans_b, c_fp32);
    int id = 0, tile = 0, stages = 0, splitk = 0;
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
    return "algo " + std::to_string(id) + " tile " + std::to_string(tile) + " stages " + std::to_string(stages) + " split-K " +
           std::to_string(splitk) + " (rank " + std::to_string(rank_) + " of " + std::to_string(p.offered) + ")";
  }

  void operator()(const __nv_bfloat16* A, const __nv_bfloat16* B, void* C, int m, int n, int k, bool trans_a, bool trans_b,
                  bool accumulate = false, bool c_fp32 = false, cudaStream_t stream = 0) {
    if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C) % 16)
      throw std::runtime_error(shape_name(m, n, k) + ": operands must be 16-byte aligned for cuBLASLt");
    const Plan& p = plan(m, n, k, trans_a, trans_b, c_fp32);
    const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
    check(cublasLtMatmul(handle_, p.op, &alpha, B, p.lx, A, p.ly, &beta, C, p.lz, C, p.lz, &p.algo, workspace_, ws_bytes_, stream),
          shape_name(m, n, k));
  }
  void add(const __nv_bfloat16* A, const __nv_bfloat16* B, const __nv_bfloat16* C, __nv_bfloat16* D, int m, int n, int k,
           bool trans_a, bool trans_b, cudaStream_t stream = 0) {
    if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C | (uintptr_t)D) % 16)
      throw std::runtime_error(shape_name(m, n, k) + ": operands must be 16-byte aligned for cuBLASLt");
    const Plan& p = plan(m, n, k, trans_a, trans_b, false);
    const float alpha = 1.f, beta = 1.f;
    check(cublasLtMatmul(handle_, p.op, &alpha, B, p.lx, A, p.ly, &beta, C, p.lz, D, p.lz, &p.algo, workspace_, ws_bytes_, stream),
          shape_name(m, n, k));
  }

 private:
  // Descriptors and the heuristic's algorithm for one shape, built on first use and kept: a
  // training step calls a few dozen shapes thousands of times.
  struct Plan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t lx, ly, lz;
    cublasLtMatmulAlgo_t algo;
    int offered;  // heuristic choices cuBLASLt gave
  };
  static constexpr int kMaxRank = 16;
  static std::string shape_name(int m, int n, int k) {
    return "matmul m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
  }
  const Plan& plan(int m, int n, int k, bool trans_a, bool trans_b, bool c_fp32) {
    const auto key = std::make_tuple(m, n, k, trans_a, trans_b, c_fp32);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    const std::string shape = shape_name(m, n, k);
    Plan p;
    check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), shape);
    const cublasOperation_t tx = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, ty = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &tx, sizeof(tx)), shape);
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &ty, sizeof(ty)), shape);
    // column-major views: X = B buffer, Y = A buffer, Z = C^T
    check(cublasLtMatrixLayoutCreate(&p.lx, CUDA_R_16BF, trans_b ? k : n, trans_b ? n : k, trans_b ? k : n), shape);
    check(cublasLtMatrixLayoutCreate(&p.ly, CUDA_R_16BF, trans_a ? m : k, trans_a ? k : m, trans_a ? m : k), shape);
    check(cublasLtMatrixLayoutCreate(&p.lz, c_fp32 ? CUDA_R_32F : CUDA_R_16BF, n, m, n), shape);
    cublasLtMatmulPreference_t pref;
    check(cublasLtMatmulPreferenceCreate(&pref), shape);
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes_, sizeof(ws_bytes_)), shape);
    cublasLtMatmulHeuristicResult_t heur[kMaxRank];
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.lx, p.ly, p.lz, p.lz, pref, rank_ + 1, heur, &found), shape);
    cublasLtMatmulPreferenceDestroy(pref);
    if (found <= rank_) {
      destroy(p);
      throw std::runtime_error(shape + (found ? ": cuBLASLt offers " + std::to_string(found) + " algorithms, fewer than rank " +
                                                    std::to_string(rank_) + " needs"
                                              : ": cuBLASLt has no algorithm for this shape (dimensions must be multiples of 8)"));
    }
    p.algo = heur[rank_].algo;
    p.offered = found;
    return plans_.emplace(key, p).first->second;
  }
  static void destroy(Plan& p) {
    cublasLtMatrixLayoutDestroy(p.lx);
    cublasLtMatrixLayoutDestroy(p.ly);
    cublasLtMatrixLayoutDestroy(p.lz);
    cublasLtMatmulDescDestroy(p.op);
  }
  static void check(cublasStatus_t s, const std::string& what) {
    if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(what + ": cuBLASLt error " + std::to_string((int)s));
  }
  std::map<std::tuple<int, int, int, bool, bool, bool>, Plan> plans_;
  cublasLtHandle_t handle_;
  void* workspace_ = nullptr;
  size_t ws_bytes_;
  int rank_;
};

}  // namespace layers
