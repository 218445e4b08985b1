// train::DataParallel (train/data_parallel.cuh) made and torn down: its NCCL communicator and
// communication stream, its events, the bf16 gradient and staging buffers, the copy engines'
// communicator and symmetric windows, and the NCCL error check every call goes through.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/cuda_check.h"
#include "train/data_parallel.cuh"
#include "train/dist.h"

namespace train {

inline DataParallel::DataParallel(const dist::Context& ctx, float* grads, __nv_bfloat16* weights, size_t n, bool bf16_grads,
                                  size_t stage_rank, double timeout_s, bool copy_engines)
    : ctx_(ctx), grads_(grads), weights_(weights), n_(n), bf16_grads_(bf16_grads), stage_rank_(stage_rank), timeout_s_(timeout_s) {
  ncclUniqueId id;
  if (ctx.rank == 0) nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
  dist::broadcast(ctx, &id, sizeof(id), 0);
  nccl_ok(ncclCommInitRank(&comm_, ctx.world, id, ctx.rank), "ncclCommInitRank");
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "data parallel: communication stream");
  for (cudaEvent_t* e : {&host_wait_, &step_start_, &compute_done_, &comm_done_}) cuda_check(cudaEventCreate(e), "data parallel: event");
  if (bf16_grads) cuda_check(cudaMalloc(&scratch_, n * sizeof(__nv_bfloat16)), "data parallel: bf16 gradient buffer");
  if (stage_rank) {
    const size_t s = stage_rank * ctx.world;
    cuda_check(cudaMalloc(&gstage_, s * sizeof(float)), "data parallel: gradient staging buffer");
    wstage_ = (__nv_bfloat16*)(copy_engines ? exchange_alloc(s * sizeof(__nv_bfloat16)) : nullptr);
    shared_stage_ = wstage_ != nullptr;
    if (!wstage_) cuda_check(cudaMalloc(&wstage_, s * sizeof(__nv_bfloat16)), "data parallel: weight staging buffer");
    cuda_check(cudaMemset(gstage_, 0, s * sizeof(float)), "data parallel: gradient staging buffer");  // (the padding stays zero)
    cuda_check(cudaMemset(wstage_, 0, s * sizeof(__nv_bfloat16)), "data parallel: weight staging buffer");
  }
  // every rank on one host (NCCL runs its copy-engine collectives within a host only) and every
  // buffer from exchange_alloc(), on every rank, else kernels everywhere (registering is collective)
  const bool here = copy_engines && ctx.local_size == ctx.world && (!stage_rank || shared_stage_);
  if (dist::max(ctx, here ? 0.0 : 1.0) == 0) start_copy_engines();
}

inline DataParallel::~DataParallel() {
  // while an error unwinds, the peers may never join NCCL's collective tear-down: abort, which
  // returns at once, so that the error reaches main and MPI_Abort ends the job
  // (the copy engines' communicator is left to the process's end then: a copy-engine collective
  // waits for its peers' flags on the stream, which no abort releases, and its tear-down could
  // wait for it; a failed run ends the job at once, train_gpt.cu run_training)
  const bool unwinding = std::uncaught_exceptions() > 0 || failed_;
  if (ce_comm_ && !unwinding) {
    for (ncclWindow_t w : windows_) ncclCommWindowDeregister(ce_comm_, w);
    ncclCommDestroy(ce_comm_);
  }
  if (comm_) unwinding ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
  if (stream_) cudaStreamDestroy(stream_);
  for (void* p : {(void*)scratch_, (void*)gstage_}) cudaFree(p);
  if (wstage_) shared_stage_ ? (void)ncclMemFree(wstage_) : (void)cudaFree(wstage_);
  for (cudaEvent_t e : {host_wait_, step_start_, compute_done_, comm_done_}) cudaEventDestroy(e);
  for (const std::vector<Timed>* list : {&reduce_, &gather_[0], &gather_[1], &waits_})
    for (const Timed& t : *list) cudaEventDestroy(t.start), cudaEventDestroy(t.end);
  for (auto& kv : arrival_events_) cudaEventDestroy(kv.second);
}

inline void* DataParallel::exchange_alloc(size_t bytes) {
  void* p = nullptr;
  return ncclMemAlloc(&p, bytes) == ncclSuccess ? p : nullptr;
}

inline void DataParallel::start_copy_engines() {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  nccl_ok(ncclCommSplit(comm_, 0, ctx_.rank, &ce_comm_, &cfg), "ncclCommSplit (copy engines)");
  bool ok = true;
  for (auto [p, bytes] : {std::pair<void*, size_t>{weights_, n_ * sizeof(__nv_bfloat16)},
                          {wstage_, stage_rank_ * ctx_.world * sizeof(__nv_bfloat16)}}) {
    if (!p || !bytes) continue;
    ncclWindow_t w = nullptr;
    if (ncclCommWindowRegister(ce_comm_, p, bytes, &w, NCCL_WIN_COLL_SYMMETRIC) != ncclSuccess || !w) {
      ok = false;  // (registering is collective: every rank tries every buffer, so that none waits for the others)
      continue;
    }
    windows_.push_back(w);
  }
  ce_ = dist::max(ctx_, ok ? 0.0 : 1.0) == 0;
}

inline void DataParallel::abort_comms() {
  failed_ = true;
  if (comm_) ncclCommAbort(comm_), comm_ = nullptr;
}

inline void DataParallel::nccl_ok(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    const char* last = ncclGetLastError(comm_);
    throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r) + (last && *last ? std::string(" (") + last + ")" : ""));
  }
}

}  // namespace train
