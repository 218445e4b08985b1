// --check-replicas: every rank's weights compared, by checksum, after a step.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include "layers/checksum.cuh"
#include "model/gpt.cuh"
#include "train/data_parallel.cuh"
#include "train/dist.h"
#include "train/optimizer.cuh"

namespace train {

// --check-replicas: the fp32 masters (each gathered from the rank that updates it) and every
// rank's bf16 weights must be bit-identical on every rank. What each rank updates alone reaches
// the others through the exchange, so this catches a rank whose update, exchange or copy-back
// went wrong, and the replicated scalars as each rank updated them.
inline uint64_t check_replicas(const dist::Context& ctx, gpt::Model& model, Optimizer& opt, train::DataParallel* dp,
                               unsigned long long* d_sum, int step) {
  opt.gather_masters(model.parameters(), dp);
  const size_t n = model.layout().size();
  unsigned long long a = 0, b = 0;
  gpt::cuda_check(layers::checksum(model.master(), n * sizeof(float), d_sum), "checksum");
  gpt::cuda_check(cudaMemcpy(&a, d_sum, sizeof(a), cudaMemcpyDeviceToHost), "checksum");
  gpt::cuda_check(layers::checksum(model.weights(), n / 2 * 2 * sizeof(layers::bf16), d_sum), "checksum");
  gpt::cuda_check(cudaMemcpy(&b, d_sum, sizeof(b), cudaMemcpyDeviceToHost), "checksum");
  const uint64_t sum = a ^ (b * 0x9e3779b97f4a7c15ULL);
  const auto sums = dist::gather_all(ctx, sum);
  for (int r = 1; r < ctx.world; r++)
    if (sums[r] != sums[0]) {
      char msg[160];
      std::snprintf(msg, sizeof(msg), "weights differ across ranks after step %d: rank 0 checksum %016llx, rank %d %016llx (--check-replicas)",
                    step, (unsigned long long)sums[0], r, (unsigned long long)sums[r]);
      throw std::runtime_error(msg);
    }
  return sum;
}

}  // namespace train
