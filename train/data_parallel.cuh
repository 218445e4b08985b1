// Data parallelism over NCCL: gradient averaging overlapped with the backward pass,
// the exchange of Muon's orthogonalised updates, and a host wait that cannot hang.
//
// Gradients: every rank sums its micro-steps' gradients into the model's flat fp32 buffer, the
// loss already scaled by 1 / (tokens of the global batch), so an NCCL sum is the average. On the
// last micro-step each tensor is reduced as soon as the backward has produced its final value:
// the model calls ready(point) after the lm head (point L, in the forward), after each layer
// (point i, layers L-1 .. 0) and at the end (point -1); the tensors final at a point
// (train/grad_buckets.h) are summed in place on a communication stream of their own, which
// waits for an event of the compute stream, so the reduction of late layers runs while earlier
// layers still compute. wait() makes the compute stream wait for all of it before the optimiser.
// With overlap off (--grad-sync end) one all-reduce of the whole buffer runs after the backward.
//
// Every rank gets the same bits from an NCCL all-reduce, runs the same Adam and Muon momentum
// on them, and applies the same broadcast Muon updates: the replicas stay bit-identical, which
// --check-replicas verifies with checksums after every step.
//
// Faults: sync() waits for the compute stream by polling, with NCCL's asynchronous error
// checked on each poll and a deadline (--timeout): a peer that died or stalls makes this rank
// abort its communicator and throw a message, and the trainer then ends the job (MPI_Abort).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda_check.h"
#include "train/dist.h"
#include "train/grad_buckets.h"

namespace train {

class DataParallel {
 public:
  struct Broadcast {
    __nv_bfloat16* data;
    size_t count;
    int root;
  };

  // buckets: train::grad_buckets of the model's layout. timeout_s: longest wait for a collective.
  DataParallel(const dist::Context& ctx, const Buckets& buckets, float* grads, bool overlap, double timeout_s)
      : ctx_(ctx), grads_(grads), overlap_(overlap), timeout_s_(timeout_s), ranges_(buckets) {
    ncclUniqueId id;
    if (ctx.rank == 0) nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
    dist::broadcast(ctx, &id, sizeof(id), 0);
    nccl_ok(ncclCommInitRank(&comm_, ctx.world, id, ctx.rank), "ncclCommInitRank");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "data parallel: communication stream");
    for (cudaEvent_t* e : {&compute_done_, &comm_done_, &host_wait_}) cuda_check(cudaEventCreate(e), "data parallel: event");
    for (auto& kv : ranges_) {
      Timing& t = timing_[kv.first];
      cuda_check(cudaEventCreate(&t.start), "data parallel: event");
      cuda_check(cudaEventCreate(&t.end), "data parallel: event");
    }
    cuda_check(cudaEventCreate(&bcast_start_), "data parallel: event");
    cuda_check(cudaEventCreate(&bcast_end_), "data parallel: event");
  }
  ~DataParallel() {
    // while an error unwinds, the peers may never join NCCL's collective tear-down: abort, which
    // returns at once, so that the error reaches main and MPI_Abort ends the job
    if (comm_) std::uncaught_exceptions() ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return ctx_.rank; }
  int world() const { return ctx_.world; }
  bool overlap() const { return overlap_; }

  // The gradients final at this point may be summed now (call on the last micro-step only).
  void ready(int point) {
    auto it = ranges_.find(point);
    if (it == ranges_.end()) return;
    Timing& t = timing_[point];
    cuda_check(cudaEventRecord(t.start_on_compute = compute_event(), 0), "data parallel: event");
    cuda_check(cudaStreamWaitEvent(stream_, t.start_on_compute, 0), "data parallel: stream wait");
    cuda_check(cudaEventRecord(t.start, stream_), "data parallel: event");
    nccl_ok(ncclGroupStart(), "ncclGroupStart");
    for (auto [off, n] : it->second)
      nccl_ok(ncclAllReduce(grads_ + off, grads_ + off, n, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce (gradients)");
    nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
    cuda_check(cudaEventRecord(t.end, stream_), "data parallel: event");
    t.used = true;
  }
  // The compute stream waits for every reduction enqueued; the time it waits is "exposed".
  void wait() {
    cuda_check(cudaEventRecord(compute_done_, 0), "data parallel: event");
    cuda_check(cudaEventRecord(comm_done_, stream_), "data parallel: event");
    cuda_check(cudaStreamWaitEvent(0, comm_done_, 0), "data parallel: stream wait");
    waited_ = true;
  }
  // Muon: each item broadcast from its root (the rank that orthogonalised it), in one group,
  // after the compute stream's work so far; the compute stream then waits for it.
  void broadcast(const std::vector<Broadcast>& items) {
    cuda_check(cudaEventRecord(host_wait_, 0), "data parallel: event");
    cuda_check(cudaStreamWaitEvent(stream_, host_wait_, 0), "data parallel: stream wait");
    cuda_check(cudaEventRecord(bcast_start_, stream_), "data parallel: event");
    nccl_ok(ncclGroupStart(), "ncclGroupStart");
    for (const Broadcast& b : items)
      nccl_ok(ncclBroadcast(b.data, b.data, b.count, ncclBfloat16, b.root, comm_, stream_), "ncclBroadcast (Muon updates)");
    nccl_ok(ncclGroupEnd(), "ncclGroupEnd");
    cuda_check(cudaEventRecord(bcast_end_, stream_), "data parallel: event");
    cuda_check(cudaStreamWaitEvent(0, bcast_end_, 0), "data parallel: stream wait");
    broadcasted_ = true;
  }

  // The host waits for all work enqueued on a stream (the compute stream unless told),
  // watching NCCL and the clock. Every host wait of the step goes through here, the tuned
  // matmuls' included (Matmul::set_host_wait): a wait after wait() or broadcast() depends on
  // the peers.
  void sync(const std::string& what, cudaStream_t stream = 0) {
    cuda_check(cudaEventRecord(host_wait_, stream), "data parallel: event");
    const auto t0 = std::chrono::steady_clock::now();
    for (int polls = 0;; polls++) {
      cudaError_t q = cudaEventQuery(host_wait_);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) cuda_check(q, what.c_str());
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        throw std::runtime_error(what + ": NCCL reported " + ncclGetErrorString(async) + " (a peer rank or the link failed)");
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s > timeout_s_) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        throw std::runtime_error(what + ": no progress for " + std::to_string((int)timeout_s_) +
                                 " s (--timeout): another rank has stopped or failed");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(polls < 100 ? 20 : 200));
    }
  }

  // After sync(): the step's communication time (sum over the reductions, as they ran next to
  // the backward), the part of it the compute stream waited for, and the Muon broadcast.
  struct StepTimes {
    double allreduce_ms = 0, exposed_ms = 0, broadcast_ms = 0;
  };
  StepTimes times() {
    StepTimes r;
    for (auto& kv : timing_) {
      Timing& t = kv.second;
      if (!t.used) continue;
      r.allreduce_ms += elapsed(t.start, t.end);
      t.used = false;
    }
    if (waited_) r.exposed_ms = std::max(0.0, elapsed(compute_done_, comm_done_));
    if (broadcasted_) r.broadcast_ms = elapsed(bcast_start_, bcast_end_);
    waited_ = broadcasted_ = false;
    pool_used_ = 0;
    return r;
  }

 private:
  struct Timing {
    cudaEvent_t start = nullptr, end = nullptr, start_on_compute = nullptr;
    bool used = false;
  };
  void nccl_ok(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) {
      const char* last = ncclGetLastError(comm_);
      throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r) + (last && *last ? std::string(" (") + last + ")" : ""));
    }
  }
  static double elapsed(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    return cudaEventElapsedTime(&ms, a, b) == cudaSuccess ? ms : 0.0;
  }
  cudaEvent_t compute_event() {  // one event per ready point per step, reused across steps
    if (pool_used_ == pool_.size()) {
      cudaEvent_t e;
      cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "data parallel: event");
      pool_.push_back(e);
    }
    return pool_[pool_used_++];
  }

  dist::Context ctx_;
  float* grads_;
  bool overlap_;
  double timeout_s_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  Buckets ranges_;  // point -> (offset, count) runs
  std::map<int, Timing> timing_;
  std::vector<cudaEvent_t> pool_;
  size_t pool_used_ = 0;
  cudaEvent_t compute_done_, comm_done_, host_wait_, bcast_start_, bcast_end_;
  bool waited_ = false, broadcasted_ = false;
};

}  // namespace train
