// The one way the project checks a CUDA call: cuda_check(call, what) throws CudaError naming
// what failed and CUDA's reason; CUDA_CHECK(call) names the call and its place in the source.
// Binaries catch it at the top and exit 1 with the message (test binaries: tests/check.h).
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(e));
}

#define CUDA_CHECK_STR2(x) #x
#define CUDA_CHECK_STR(x) CUDA_CHECK_STR2(x)
#define CUDA_CHECK(x) ::cuda_check((x), #x " (" __FILE__ ":" CUDA_CHECK_STR(__LINE__) ")")
