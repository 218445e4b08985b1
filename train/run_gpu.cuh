// This rank's GPU (the one of its rank on its node) and where the model's bf16 weights are
// allocated (memory the copy engines' all-gathers can reach, train/data_parallel.cuh).
#pragma once
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "model/gpt.cuh"
#include "train/data_parallel.cuh"
#include "train/dist.h"
#include "train/options.h"

namespace train {

// This rank's GPU: the one of its rank on its node.
inline cudaDeviceProp open_gpu(const dist::Context& ctx) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
    throw std::runtime_error("no CUDA GPU found (training needs one; --check-data does not)");
  if (ctx.local_rank >= ndev)
    throw std::runtime_error("this node runs " + std::to_string(ctx.local_size) + " ranks but has " + std::to_string(ndev) +
                             " GPU(s): start at most one rank per GPU (mpirun -np / the host file's slots)");
  gpt::cuda_check(cudaSetDevice(ctx.local_rank), "cudaSetDevice");
  cudaDeviceProp prop;
  gpt::cuda_check(cudaGetDeviceProperties(&prop, ctx.local_rank), "device properties");
  if (ctx.world > 1) {
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    std::fprintf(stderr, "train_gpt: %s: pid %d on %s, GPU %d (%s)\n", ctx.who().c_str(), (int)getpid(), host, ctx.local_rank, prop.name);
  }
  return prop;
}

// The allocator of the model's bf16 weights: memory the copy engines can reach on every rank
// when the all-gathers run on them (train/data_parallel.cuh), else nullptr (cudaMalloc).
inline const gpt::ExchangeAllocator* exchange_allocator(const Options& o, const dist::Context& ctx) {
  static const gpt::ExchangeAllocator shared{train::DataParallel::exchange_alloc, train::DataParallel::exchange_free};
  return ctx.world > 1 && o.gather_engine == "copy-engines" ? &shared : nullptr;
}

}  // namespace train
