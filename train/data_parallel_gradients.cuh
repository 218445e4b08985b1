// train::DataParallel's gradient exchange (train/data_parallel.cuh): each point's gradients summed
// as the shard plan wants them (reduce), and the staged matrices' one reduce-scatter
// (reduce_staged), through bf16 copies with --grad-exchange bf16.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <vector>

#include "common/cuda_check.h"
#include "layers/cast.cuh"
#include "train/data_parallel.cuh"
#include "train/shard_plan.h"

namespace train {

inline cudaEvent_t DataParallel::reduce(const std::vector<Piece>& pieces, cudaEvent_t after) {
  cuda_check(cudaStreamWaitEvent(stream_, after, 0), "data parallel: stream wait");
  Timed& t = timed(&reduce_, &used_reduce_);
  cuda_check(cudaEventRecord(t.start, stream_), "data parallel: event");
  // (each piece's own elements only: other tensors in between may still be written by the
  // backward when the exchange runs beside it)
  if (bf16_grads_)
    for (const Piece& p : pieces) cuda_check(layers::cast_to_bf16(grads_ + p.base, scratch_ + p.base, p.span, stream_), "bf16 gradients");
  nccl_ok(ncclGroupStart(), "ncclGroupStart");
  for (const Piece& p : pieces) {
    void* base = bf16_grads_ ? (void*)(scratch_ + p.base) : (void*)(grads_ + p.base);
    const ncclDataType_t type = bf16_grads_ ? ncclBfloat16 : ncclFloat32;
    const size_t elem = bf16_grads_ ? sizeof(__nv_bfloat16) : sizeof(float);
    if (p.kind == Piece::kSlice) {
      const size_t q = p.span / ctx_.world;
      nccl_ok(ncclReduceScatter(base, (char*)base + ctx_.rank * q * elem, q, type, ncclSum, comm_, stream_), "ncclReduceScatter (gradients)");
    } else if (p.kind == Piece::kReplicated) {
      nccl_ok(ncclAllReduce(base, base, p.span, type, ncclSum, comm_, stream_), "ncclAllReduce (gradients)");
    } else {
      nccl_ok(ncclReduce(base, base, p.span, type, ncclSum, p.owner, comm_, stream_), "ncclReduce (gradients)");
    }
  }
  nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
  // (the parts of a piece this rank does not update hold partial sums: nothing reads them)
  if (bf16_grads_)
    for (const Piece& p : pieces) cuda_check(layers::cast_to_fp32(scratch_ + p.base, grads_ + p.base, p.span, stream_), "bf16 gradients");
  cuda_check(cudaEventRecord(t.end, stream_), "data parallel: event");
  return t.end;
}

inline cudaEvent_t DataParallel::reduce_staged(const std::vector<Piece>& matrices, cudaEvent_t after) {
  cuda_check(cudaStreamWaitEvent(stream_, after, 0), "data parallel: stream wait");
  Timed& t = timed(&reduce_, &used_reduce_);
  cuda_check(cudaEventRecord(t.start, stream_), "data parallel: event");
  const size_t q = stage_rank_;
  if (bf16_grads_) {  // through the weight staging buffer (free until the owners' updates write it)
    for (const Piece& p : matrices) cuda_check(layers::cast_to_bf16(grads_ + p.base, wstage_ + p.stage, p.span, stream_), "bf16 gradients");
    nccl_ok(ncclReduceScatter(wstage_, wstage_ + ctx_.rank * q, q, ncclBfloat16, ncclSum, comm_, stream_), "ncclReduceScatter (matrices)");
    cuda_check(layers::cast_to_fp32(wstage_ + ctx_.rank * q, gstage_ + ctx_.rank * q, q, stream_), "bf16 gradients");
  } else {
    for (const Piece& p : matrices)
      cuda_check(cudaMemcpyAsync(gstage_ + p.stage, grads_ + p.base, p.span * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
                 "data parallel: staging");
    nccl_ok(ncclReduceScatter(gstage_, gstage_ + ctx_.rank * q, q, ncclFloat32, ncclSum, comm_, stream_), "ncclReduceScatter (matrices)");
  }
  cuda_check(cudaEventRecord(t.end, stream_), "data parallel: event");
  return t.end;
}

}  // namespace train
