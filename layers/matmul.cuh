// Matrix products through cuBLASLt in bf16 with fp32 accumulation (SPEC section 3), row-major:
//   C[m][n] (+)= op(A)[m][k] * op(B)[k][n]
//   A is stored [m][k], or [k][m] when trans_a;  B is stored [k][n], or [n][k] when trans_b;
//   C is bf16, or fp32 when c_fp32 (the lm head's logits); accumulate adds to C (beta = 1).
// Forward y = x W is (x, W); backward dx = dy W^T is (dy, W, trans_b) and dW = x^T dy is
// (x, dy, trans_a). cuBLASLt is column-major, so the call computes C^T = op(B)^T op(A)^T.
// Errors come back as a message naming the shape, never as a raw status code.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace layers {

class Matmul {
 public:
  explicit Matmul(size_t workspace_bytes = 32u << 20) : ws_bytes_(workspace_bytes) {
    check(cublasLtCreate(&handle_), "cublasLtCreate");
    if (cudaMalloc(&workspace_, ws_bytes_) != cudaSuccess) throw std::runtime_error("matmul: cannot allocate the cuBLASLt workspace");
  }
  ~Matmul() {
    cudaFree(workspace_);
    cublasLtDestroy(handle_);
  }
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  void operator()(const __nv_bfloat16* A, const __nv_bfloat16* B, void* C, int m, int n, int k, bool trans_a, bool trans_b,
                  bool accumulate = false, bool c_fp32 = false, cudaStream_t stream = 0) {
    const std::string shape = "matmul m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
    if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C) % 16)
      throw std::runtime_error(shape + ": operands must be 16-byte aligned for cuBLASLt");
    cublasLtMatmulDesc_t op;
    check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), shape);
    const cublasOperation_t tx = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, ty = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tx, sizeof(tx)), shape);
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &ty, sizeof(ty)), shape);
    // column-major views: X = B buffer, Y = A buffer, Z = C^T
    cublasLtMatrixLayout_t lx, ly, lz;
    check(cublasLtMatrixLayoutCreate(&lx, CUDA_R_16BF, trans_b ? k : n, trans_b ? n : k, trans_b ? k : n), shape);
    check(cublasLtMatrixLayoutCreate(&ly, CUDA_R_16BF, trans_a ? m : k, trans_a ? k : m, trans_a ? m : k), shape);
    check(cublasLtMatrixLayoutCreate(&lz, c_fp32 ? CUDA_R_32F : CUDA_R_16BF, n, m, n), shape);
    cublasLtMatmulPreference_t pref;
    check(cublasLtMatmulPreferenceCreate(&pref), shape);
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes_, sizeof(ws_bytes_)), shape);
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(handle_, op, lx, ly, lz, lz, pref, 1, &heur, &found), shape);
    if (!found) throw std::runtime_error(shape + ": cuBLASLt has no algorithm for this shape (dimensions must be multiples of 8)");
    const float alpha = 1.f, beta = accumulate ? 1.f : 0.f;
    check(cublasLtMatmul(handle_, op, &alpha, B, lx, A, ly, &beta, C, lz, C, lz, &heur.algo, workspace_, ws_bytes_, stream), shape);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lx);
    cublasLtMatrixLayoutDestroy(ly);
    cublasLtMatrixLayoutDestroy(lz);
    cublasLtMatmulDescDestroy(op);
  }

 private:
  static void check(cublasStatus_t s, const std::string& what) {
    if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(what + ": cuBLASLt error " + std::to_string((int)s));
  }
  cublasLtHandle_t handle_;
  void* workspace_ = nullptr;
  size_t ws_bytes_;
};

}  // namespace layers
