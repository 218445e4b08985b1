// Data parallelism over NCCL: the collectives of the optimiser's shard plan (train/shard_plan.h)
// on a communication stream of their own, and a host wait that cannot hang.
//
// Gradients: every rank sums its micro-steps' gradients into the model's flat fp32 buffer, the
// loss already scaled by 1 / (tokens of the global batch), so an NCCL sum is the average.
// reduce(pieces) sums a point's gradients where the plan wants them: a reduce-scatter of each
// embedding's and the head's slices (rank r receives the sum of slice r, in place), an all-reduce
// of what every rank updates (a remainder, the scalars), a reduce of each Muon matrix to its owner. gather(pieces) then spreads the updated bf16 weights:
// an all-gather of the slices, a broadcast of each matrix from its owner. Each call waits for an
// event of another stream first (the compute stream's backward, the optimiser's update), so the
// exchange of late layers runs while earlier layers still compute. NCCL runs the collectives in
// the order they are enqueued on the one stream, the same on every rank.
//
// With --grad-exchange bf16 the gradients cross the wire as bf16: each point's range is rounded
// to bf16 into a scratch buffer, summed there, and the sums turned back into fp32 in place (half
// the gradient bytes, and bf16 sums: a change of numerics, in the run's fingerprint).
//
// Staged (train/shard_plan.h: the default, after the backward): reduce_staged copies every
// matrix's gradient into its owner's region of a staging buffer and sums all of them with one
// reduce-scatter; the owners' Muon reads its sums there and writes the new bf16 weights into the
// weights' staging buffer, which gather_staged all-gathers and copies back into the model.
//
// Copy engines (--gather-engine copy-engines, the default): the weights' all-gathers run on the
// GPUs' copy engines over NVLink (NCCL's zero-CTA policy, on buffers registered as symmetric
// windows: the weights and the weight staging buffer, which then come from exchange_alloc()).
// Kernel collectives hold SMs for as long as they run, and the trainer's persistent matmuls wait
// for every SM they hold; the copy engines hold none, so that the all-gathers can run beside the
// next step's forward (Arrivals, below). An all-gather moves bytes and adds nothing: the
// weights are the same bits either way. The gradients' collectives stay NCCL's kernels. With
// ranks on several hosts (NCCL's copy-engine collectives stay within a host), or where a buffer
// could not come from exchange_alloc() or NCCL cannot register it, the all-gathers run as kernels
// on every rank (copy_engines() says which).
//
// Every rank applies the same arithmetic to the same sums and receives the same bf16 weights: the
// replicas' weights stay bit-identical, which --check-replicas verifies after every step.
//
// Arrivals: each gather records, for each tensor it spreads, an event that completes when the
// tensor's new weights have arrived on this rank (arrival()). With set_gated(true) the trainer's
// compute stream waits at the step's end only for the optimiser's update (wait(until)), and the
// next step's forward waits for each tensor's arrival just before the stage that first reads it
// (gpt::Model::set_before_stage), so that the last all-gathers run beside the next forward. A
// step's gathers are then timed at the end of the next step, when they are sure to be done.
//
// Faults: sync() waits for a stream by polling, with NCCL's asynchronous error checked on each
// poll and a deadline (--timeout): a peer that died or stalls makes this rank abort its
// communicator and throw a message, and the trainer then ends the job (MPI_Abort).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/cuda_check.h"
#include "layers/cast.cuh"
#include "train/dist.h"
#include "train/shard_plan.h"

namespace train {

class DataParallel {
 public:
  // grads, weights: the model's flat buffers of n elements (weights from exchange_alloc() when
  // copy_engines); bf16_grads: --grad-exchange bf16; stage_rank: elements of a rank's region of
  // the staging buffers (0: none); timeout_s: the longest wait for a collective; copy_engines:
  // the all-gathers on the copy engines if they can (--gather-engine; weights from exchange_alloc()).
  DataParallel(const dist::Context& ctx, float* grads, __nv_bfloat16* weights, size_t n, bool bf16_grads, size_t stage_rank,
               double timeout_s, bool copy_engines = false)
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
  ~DataParallel() {
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
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // The staging buffers (staged matrices): a matrix's gradient sums at its piece's stage in the
  // first (its owner's region), its new bf16 weights to be written at the same place in the second.
  float* grad_stage() const { return gstage_; }
  __nv_bfloat16* weight_stage() const { return wstage_; }
  int rank() const { return ctx_.rank; }
  bool copy_engines() const { return ce_; }
  // Whether the step ends before its last gathers do (see Arrivals above; off by default).
  void set_gated(bool on) { gated_ = on; }
  // The event that completes when the last gather of this tensor (its index in the layout) has
  // brought its weights here; nullptr if none has gathered it (a replicated tensor, which every
  // rank updates itself, or before the first step).
  cudaEvent_t arrival(int tensor) const {
    auto it = arrival_.find(tensor);
    return it == arrival_.end() ? nullptr : it->second;
  }
  // The compute stream waits for these arrivals (a forward's stage), the wait timed.
  void wait_for(const std::vector<cudaEvent_t>& arrivals) {
    Timed& t = timed(&waits_, &used_waits_);
    cuda_check(cudaEventRecord(t.start, 0), "data parallel: event");
    for (cudaEvent_t e : arrivals) cuda_check(cudaStreamWaitEvent(0, e, 0), "data parallel: waiting for a stage's weights");
    cuda_check(cudaEventRecord(t.end, 0), "data parallel: event");
  }

  // The allocator of the buffers the copy engines read and write (the model's weights): memory
  // that every rank of the host can map. nullptr when it cannot.
  static void* exchange_alloc(size_t bytes) {
    void* p = nullptr;
    return ncclMemAlloc(&p, bytes) == ncclSuccess ? p : nullptr;
  }
  static void exchange_free(void* p) { ncclMemFree(p); }
  int world() const { return ctx_.world; }
  cudaStream_t stream() const { return stream_; }

  // After `after` (an event recorded on the stream that finished the gradients), the point's
  // gradients summed as the plan wants them; returns an event that completes with the sums.
  cudaEvent_t reduce(const std::vector<Piece>& pieces, cudaEvent_t after) {
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
  // After `after`, the updated weights' bf16 copies spread from their owners.
  void gather(const std::vector<Piece>& pieces, cudaEvent_t after) {
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
  // After `after`, every matrix's gradient into the gradient staging buffer and one
  // reduce-scatter of it (this rank's region summed); returns an event that completes with it.
  cudaEvent_t reduce_staged(const std::vector<Piece>& matrices, cudaEvent_t after) {
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
  // After `after` (the owners' updates wrote their regions of the weight staging buffer), one
  // all-gather of it and every matrix's bf16 weights copied back into the model.
  void gather_staged(const std::vector<Piece>& matrices, cudaEvent_t after) {
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
  // fp32 values (masters, optimiser state in the layout) spread from the ranks that own them, in
  // place: the slices all-gathered, the matrices broadcast, for the kinds asked; then the
  // compute stream waits for it. Checkpoints and the replica check only.
  void gather_fp32(float* data, const std::vector<Piece>& pieces, bool slices, bool matrices) {
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
  // A step's work starts on the compute stream (its forward and backward are timed from here to wait()).
  void step_start() {
    cuda_check(cudaEventRecord(step_start_, 0), "data parallel: event");
    started_ = true;
  }
  // The compute stream waits for every collective enqueued, or, given `until` (the optimiser's
  // last update), for that alone (the gathers after it are waited for stage by stage: Arrivals);
  // the time it waits is "exposed".
  void wait(cudaEvent_t until = nullptr) {
    cuda_check(cudaEventRecord(compute_done_, 0), "data parallel: event");
    if (!until) cuda_check(cudaEventRecord(comm_done_, stream_), "data parallel: event");
    exposed_end_ = until ? until : comm_done_;
    cuda_check(cudaStreamWaitEvent(0, exposed_end_, 0), "data parallel: stream wait");
    waited_ = true;
  }

  // The host waits for all work enqueued on a stream (the compute stream unless told),
  // watching NCCL and the clock. Every host wait of the step goes through here or wait_event,
  // the tuned matmuls' (Matmul::set_host_wait) and the model's upload and loss read-back waits
  // (gpt::Model::set_host_wait) included: a wait after wait(), or after a forward's wait for
  // the weights' arrival, depends on the peers.
  void sync(const std::string& what, cudaStream_t stream = 0) {
    cuda_check(cudaEventRecord(host_wait_, stream), "data parallel: event");
    wait_event(host_wait_, what);
  }
  // The host waits for an event, as sync() does for a stream.
  void wait_event(cudaEvent_t e, const std::string& what) {
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

  // After sync(): the step's time in the gradients' and the weights' collectives (summed over
  // the points, as they ran beside the backward), how long the compute stream waited at wait()
  // for the last of them, the compute stream's time from step_start() to wait() (this rank's
  // forward and backward, its waits for the host and for the weights' arrival included), and
  // how long its forwards waited for the weights' arrival (wait_for).
  struct StepTimes {
    double reduce_ms = 0, gather_ms = 0, exposed_ms = 0, compute_ms = 0, arrival_wait_ms = 0;
  };
  // Gated (set_gated), the gathers' time is the step before's (this step's may still run).
  StepTimes times() {
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

 private:
  // The tensor's own arrival event, made on first use, now its arrival.
  cudaEvent_t arrived(int tensor) {
    cudaEvent_t& e = arrival_events_[tensor];
    if (!e) cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "data parallel: event");
    return arrival_[tensor] = e;
  }
  // The copy engines' communicator (NCCL's zero-CTA policy) and the buffers the all-gathers
  // write, registered on every rank as symmetric windows. If any rank cannot register them,
  // every rank goes on with kernel collectives.
  void start_copy_engines() {
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
  // After a failure: the kernels' communicator aborted (its kernels stop spinning), the copy
  // engines' left alone (see the destructor).
  void abort_comms() {
    failed_ = true;
    if (comm_) ncclCommAbort(comm_), comm_ = nullptr;
  }
  struct Timed {
    cudaEvent_t start, end;
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
  Timed& timed(std::vector<Timed>* list, size_t* used) {  // the next pair of events of a list, reused across steps
    size_t& u = *used;
    if (u == list->size()) {
      Timed t;
      cuda_check(cudaEventCreate(&t.start), "data parallel: event");
      cuda_check(cudaEventCreate(&t.end), "data parallel: event");
      list->push_back(t);
    }
    return (*list)[u++];
  }

  dist::Context ctx_;
  float* grads_;
  __nv_bfloat16* weights_;
  size_t n_;
  bool bf16_grads_;
  size_t stage_rank_;
  double timeout_s_;
  __nv_bfloat16* scratch_ = nullptr;
  float* gstage_ = nullptr;
  __nv_bfloat16* wstage_ = nullptr;
  ncclComm_t comm_ = nullptr, ce_comm_ = nullptr;
  bool ce_ = false;            // the copy engines run the all-gathers
  bool failed_ = false;        // a peer or the link failed (abort_comms)
  bool shared_stage_ = false;  // the weight staging buffer came from exchange_alloc()
  std::vector<ncclWindow_t> windows_;
  cudaStream_t stream_ = nullptr;
  std::vector<Timed> reduce_, gather_[2], waits_;  // gather_[cur_]: this step's (two, used in turn when gated)
  size_t used_reduce_ = 0, used_gather_[2] = {0, 0}, used_waits_ = 0;
  int cur_ = 0;
  bool gated_ = false;
  std::map<int, cudaEvent_t> arrival_;         // tensor -> the event its last gather recorded
  std::map<int, cudaEvent_t> arrival_events_;  // tensor -> its own event (copy engines: one gather a tensor)
  cudaEvent_t exposed_end_ = nullptr;          // what the compute stream waited for at wait()
  cudaEvent_t host_wait_ = nullptr, step_start_ = nullptr, compute_done_ = nullptr, comm_done_ = nullptr;
  bool waited_ = false, started_ = false;
};

}  // namespace train
