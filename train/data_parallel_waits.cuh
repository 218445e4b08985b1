// train::DataParallel's waits and times (train/data_parallel.cuh): the compute stream's wait for
// the collectives, the host's waits that watch NCCL and a deadline (--timeout), and the step's
// times of the collectives, read from pairs of events reused across steps.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/cuda_check.h"
#include "train/data_parallel.cuh"

namespace train {

inline void DataParallel::step_start() {
  cuda_check(cudaEventRecord(step_start_, 0), "data parallel: event");
  started_ = true;
}

inline void DataParallel::wait(cudaEvent_t until) {
  cuda_check(cudaEventRecord(compute_done_, 0), "data parallel: event");
  if (!until) cuda_check(cudaEventRecord(comm_done_, stream_), "data parallel: event");
  exposed_end_ = until ? until : comm_done_;
  cuda_check(cudaStreamWaitEvent(0, exposed_end_, 0), "data parallel: stream wait");
  waited_ = true;
}

inline void DataParallel::sync(const std::string& what, cudaStream_t stream) {
  cuda_check(cudaEventRecord(host_wait_, stream), "data parallel: event");
  wait_event(host_wait_, what);
}

inline void DataParallel::wait_event(cudaEvent_t e, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int polls = 0;; polls++) {
    cudaError_t q = cudaEventQuery(e);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) cuda_check(q, what.c_str());
    for (ncclComm_t c : {comm_, ce_comm_}) {
      ncclResult_t async = ncclSuccess;
      if (c) ncclCommGetAsyncError(c, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        abort_comms();
        throw std::runtime_error(what + ": NCCL reported " + ncclGetErrorString(async) + " (a peer rank or the link failed)");
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > timeout_s_) {
      abort_comms();
      throw std::runtime_error(what + ": no progress for " + std::to_string((int)timeout_s_) +
                               " s (--timeout): another rank has stopped or failed");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(polls < 100 ? 20 : 200));
  }
}

inline DataParallel::StepTimes DataParallel::times() {
  StepTimes r;
  const int g = gated_ ? 1 - cur_ : cur_;
  for (auto [list, used, ms] : {std::tuple<std::vector<Timed>*, size_t*, double*>{&reduce_, &used_reduce_, &r.reduce_ms},
                                {&gather_[g], &used_gather_[g], &r.gather_ms},
                                {&waits_, &used_waits_, &r.arrival_wait_ms}}) {
    for (size_t i = 0; i < *used; i++) *ms += elapsed((*list)[i].start, (*list)[i].end);
    *used = 0;
  }
  if (gated_) cur_ = 1 - cur_;
  if (waited_) r.exposed_ms = std::max(0.0, elapsed(compute_done_, exposed_end_));
  if (waited_ && started_) r.compute_ms = elapsed(step_start_, compute_done_);
  waited_ = started_ = false;
  return r;
}

inline double DataParallel::elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  return cudaEventElapsedTime(&ms, a, b) == cudaSuccess ? ms : 0.0;
}

inline DataParallel::Timed& DataParallel::timed(std::vector<Timed>* list, size_t* used) {
  size_t& u = *used;
  if (u == list->size()) {
    Timed t;
    cuda_check(cudaEventCreate(&t.start), "data parallel: event");
    cuda_check(cudaEventCreate(&t.end), "data parallel: event");
    list->push_back(t);
  }
  return (*list)[u++];
}

}  // namespace train
