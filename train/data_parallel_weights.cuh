// train::DataParallel's weight exchange (train/data_parallel.cuh): the updated bf16 weights
// all-gathered and broadcast from their owners (on the copy engines where they run), the staged
// matrices' all-gather, the fp32 gathers of checkpoints and the replica check, and each
// tensor's arrival event, which a forward's stage waits for.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <vector>

#include "common/cuda_check.h"
#include "train/data_parallel.cuh"
#include "train/shard_plan.h"

namespace train {

inline void DataParallel::gather(const std::vector<Piece>& pieces, cudaEvent_t after) {
  cuda_check(cudaStreamWaitEvent(stream_, after, 0), "data parallel: stream wait");
  Timed& t = timed(&gather_[cur_], &used_gather_[cur_]);
  cuda_check(cudaEventRecord(t.start, stream_), "data parallel: event");
  if (ce_)  // (the copy engines' collectives one by one, outside the kernels' group, each tensor's arrival its own)
    for (const Piece& p : pieces)
      if (p.kind == Piece::kSlice) {
        const size_t q = p.span / ctx_.world;
        nccl_ok(ncclAllGather(weights_ + p.base + ctx_.rank * q, weights_ + p.base, q, ncclBfloat16, ce_comm_, stream_),
                "ncclAllGather (weights, copy engines)");
        cuda_check(cudaEventRecord(arrived(p.tensor), stream_), "data parallel: event");
      }
  nccl_ok(ncclGroupStart(), "ncclGroupStart");
  for (const Piece& p : pieces) {
    __nv_bfloat16* base = weights_ + p.base;
    if (p.kind == Piece::kSlice && !ce_) {
      const size_t q = p.span / ctx_.world;
      nccl_ok(ncclAllGather(base + ctx_.rank * q, base, q, ncclBfloat16, comm_, stream_), "ncclAllGather (weights)");
    } else if (p.kind == Piece::kMatrix) {
      nccl_ok(ncclBroadcast(base, base, p.span, ncclBfloat16, p.owner, comm_, stream_), "ncclBroadcast (weights)");
    }  // (a replicated piece is updated by every rank)
  }
  nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
  cuda_check(cudaEventRecord(t.end, stream_), "data parallel: event");
  for (const Piece& p : pieces)  // the group's tensors arrive with its end
    if (p.kind == Piece::kMatrix || (p.kind == Piece::kSlice && !ce_)) arrival_[p.tensor] = t.end;
}

inline void DataParallel::gather_staged(const std::vector<Piece>& matrices, cudaEvent_t after) {
  cuda_check(cudaStreamWaitEvent(stream_, after, 0), "data parallel: stream wait");
  Timed& t = timed(&gather_[cur_], &used_gather_[cur_]);
  cuda_check(cudaEventRecord(t.start, stream_), "data parallel: event");
  const size_t q = stage_rank_;
  nccl_ok(ncclAllGather(wstage_ + ctx_.rank * q, wstage_, q, ncclBfloat16, ce_ ? ce_comm_ : comm_, stream_), "ncclAllGather (matrices)");
  for (const Piece& p : matrices)
    cuda_check(cudaMemcpyAsync(weights_ + p.base, wstage_ + p.stage, p.span * sizeof(__nv_bfloat16), cudaMemcpyDeviceToDevice, stream_),
               "data parallel: staging");
  cuda_check(cudaEventRecord(t.end, stream_), "data parallel: event");
  for (const Piece& p : matrices) arrival_[p.tensor] = t.end;
}

inline void DataParallel::gather_fp32(float* data, const std::vector<Piece>& pieces, bool slices, bool matrices) {
  cuda_check(cudaEventRecord(host_wait_, 0), "data parallel: event");
  cuda_check(cudaStreamWaitEvent(stream_, host_wait_, 0), "data parallel: stream wait");
  nccl_ok(ncclGroupStart(), "ncclGroupStart");
  for (const Piece& p : pieces) {
    float* base = data + p.base;
    if (p.kind == Piece::kSlice && slices) {
      const size_t q = p.span / ctx_.world;
      nccl_ok(ncclAllGather(base + ctx_.rank * q, base, q, ncclFloat32, comm_, stream_), "ncclAllGather (fp32)");
    } else if (p.kind == Piece::kMatrix && matrices) {
      nccl_ok(ncclBroadcast(base, base, p.span, ncclFloat32, p.owner, comm_, stream_), "ncclBroadcast (fp32)");
    }
  }
  nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
  cuda_check(cudaEventRecord(comm_done_, stream_), "data parallel: event");
  cuda_check(cudaStreamWaitEvent(0, comm_done_, 0), "data parallel: stream wait");
}

inline cudaEvent_t DataParallel::arrived(int tensor) {
  cudaEvent_t& e = arrival_events_[tensor];
  if (!e) cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "data parallel: event");
  return arrival_[tensor] = e;
}

inline void DataParallel::wait_for(const std::vector<cudaEvent_t>& arrivals) {
  Timed& t = timed(&waits_, &used_waits_);
  cuda_check(cudaEventRecord(t.start, 0), "data parallel: event");
  for (cudaEvent_t e : arrivals) cuda_check(cudaStreamWaitEvent(0, e, 0), "data parallel: waiting for a stage's weights");
  cuda_check(cudaEventRecord(t.end, 0), "data parallel: event");
}

}  // namespace train
