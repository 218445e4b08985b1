// The GPU model's parameters as the optimiser reaches them: device pointers to the fp32 master
// weights, their bf16 copies (what the forward reads) and the fp32 gradients, each `count`
// floats (bf16s) in the parameter layout (model/config.h Layout). gpt::Model::parameters()
// hands them out; the optimiser (train/optimizer.cuh) needs nothing else of the model.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "common/cuda_check.h"

namespace model {

struct Parameters {
  float* master = nullptr;
  __nv_bfloat16* weights = nullptr;
  float* grads = nullptr;
  size_t count = 0;

  // the fp32 masters on the host (checkpoints)
  std::vector<float> download_master() const {
    std::vector<float> h(count);
    cuda_check(cudaMemcpy(h.data(), master, h.size() * sizeof(float), cudaMemcpyDeviceToHost), "download master");
    return h;
  }
};

}  // namespace model
