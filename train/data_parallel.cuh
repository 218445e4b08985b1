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
// Copy engines (--collectives copy-engines, the default): the slices' reduce-scatters (each
// embedding's and the head's, and the staged matrices') run as an all-to-all that the GPUs' copy
// engines carry over NVLink (NCCL's zero-CTA policy, on buffers registered as symmetric windows),
// then a kernel adds the N slices that arrived in rank order (layers/sum_slices.cuh); the
// all-gathers run on the copy engines alone. Kernel collectives hold SMs for as long as they run,
// and the trainer's persistent matmuls wait for every SM they hold; the copy engines hold none,
// so a collective can run beside the backward at the cost of the sum's short passes. The
// weights, the gradients and the staging buffers then come from exchange_alloc() (memory every
// rank of the host can map). Where NCCL cannot register them (ranks on several hosts), every
// collective runs as kernels (copy_engines() says which). The all-reduces of the remainders and
// scalars, and in --grad-sync overlap the matrices' reduces and broadcasts, stay kernels, as do
// the gradients' collectives with --grad-exchange bf16. The sum in rank order is fixed, as NCCL's
// ring is; the two add N > 2 values in different orders, so their sums differ in the last bits
// (two values: one addition either way, the same bits).
//
// Every rank applies the same arithmetic to the same sums and receives the same bf16 weights: the
// replicas' weights stay bit-identical, which --check-replicas verifies after every step.
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
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda_check.h"
#include "layers/cast.cuh"
#include "layers/sum_slices.cuh"
#include "train/dist.h"
#include "train/shard_plan.h"

namespace train {

class DataParallel {
 public:
  // grads, weights: the model's flat buffers of n elements (from exchange_alloc() when
  // copy_engines); bf16_grads: --grad-exchange bf16; stage_rank: elements of a rank's region of
  // the staging buffers (0: none); timeout_s: the longest wait for a collective; copy_engines:
  // --collectives copy-engines; max_slice: the most elements a slice piece spans (the all-to-all's
  // receive buffer holds that many, or the staging buffer's, whichever is larger).
  DataParallel(const dist::Context& ctx, float* grads, __nv_bfloat16* weights, size_t n, bool bf16_grads, size_t stage_rank,
               double timeout_s, bool copy_engines = false, size_t max_slice = 0)
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
      gstage_ = (float*)buffer(s * sizeof(float), copy_engines, "data parallel: gradient staging buffer");
      wstage_ = (__nv_bfloat16*)buffer(s * sizeof(__nv_bfloat16), copy_engines, "data parallel: weight staging buffer");
      cuda_check(cudaMemset(gstage_, 0, s * sizeof(float)), "data parallel: gradient staging buffer");  // (the padding stays zero)
      cuda_check(cudaMemset(wstage_, 0, s * sizeof(__nv_bfloat16)), "data parallel: weight staging buffer");
    }
    if (copy_engines) start_copy_engines(std::max(stage_rank * ctx.world, max_slice));
  }
  ~DataParallel() {
    // while an error unwinds, the peers may never join NCCL's collective tear-down: abort, which
    // returns at once, so that the error reaches main and MPI_Abort ends the job
    const bool unwinding = std::uncaught_exceptions() > 0;
    if (ce_comm_ && !unwinding)
      for (ncclWindow_t w : windows_) ncclCommWindowDeregister(ce_comm_, w);
    if (ce_comm_) unwinding ? ncclCommAbort(ce_comm_) : ncclCommDestroy(ce_comm_);
    if (comm_) unwinding ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
    cudaFree(scratch_);
    for (void* p : {(void*)gstage_, (void*)wstage_, (void*)recv_})
      if (p) shared_ ? (void)ncclMemFree(p) : (void)cudaFree(p);
    for (cudaEvent_t e : {host_wait_, step_start_, compute_done_, comm_done_}) cudaEventDestroy(e);
    for (const std::vector<Timed>* list : {&reduce_, &gather_})
      for (const Timed& t : *list) cudaEventDestroy(t.start), cudaEventDestroy(t.end);
  }
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // The staging buffers (staged matrices): a matrix's gradient sums at its piece's stage in the
  // first (its owner's region), its new bf16 weights to be written at the same place in the second.
  float* grad_stage() const { return gstage_; }
  __nv_bfloat16* weight_stage() const { return wstage_; }
  int rank() const { return ctx_.rank; }
  bool copy_engines() const { return ce_; }

  // The allocator of the buffers the copy engines read and write (the model's weights and
  // gradients): memory that every rank of the host can map. nullptr when it cannot.
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
    Timed& t = timed(&reduce_);
    cuda_check(cudaEventRecord(t.start, stream_), "data parallel: event");
    // (each piece's own elements only: other tensors in between may still be written by the
    // backward when the exchange runs beside it)
    if (bf16_grads_)
      for (const Piece& p : pieces) cuda_check(layers::cast_to_bf16(grads_ + p.base, scratch_ + p.base, p.span, stream_), "bf16 gradients");
    const bool ce = ce_ && !bf16_grads_;
    if (ce)
      for (const Piece& p : pieces)
        if (p.kind == Piece::kSlice) reduce_scatter_ce(grads_ + p.base, p.span / ctx_.world);
    nccl_ok(ncclGroupStart(), "ncclGroupStart");
    for (const Piece& p : pieces) {
      if (ce && p.kind == Piece::kSlice) continue;
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
    Timed& t = timed(&gather_);
    cuda_check(cudaEventRecord(t.start, stream_), "data parallel: event");
    if (ce_)  // (the copy engines' collectives one by one, outside the kernels' group)
      for (const Piece& p : pieces)
        if (p.kind == Piece::kSlice) {
          const size_t q = p.span / ctx_.world;
          nccl_ok(ncclAllGather(weights_ + p.base + ctx_.rank * q, weights_ + p.base, q, ncclBfloat16, ce_comm_, stream_),
                  "ncclAllGather (weights, copy engines)");
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
  }
  // After `after`, every matrix's gradient into the gradient staging buffer and one
  // reduce-scatter of it (this rank's region summed); returns an event that completes with it.
  cudaEvent_t reduce_staged(const std::vector<Piece>& matrices, cudaEvent_t after) {
    cuda_check(cudaStreamWaitEvent(stream_, after, 0), "data parallel: stream wait");
    Timed& t = timed(&reduce_);
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
      if (ce_) reduce_scatter_ce(gstage_, q);
      else nccl_ok(ncclReduceScatter(gstage_, gstage_ + ctx_.rank * q, q, ncclFloat32, ncclSum, comm_, stream_), "ncclReduceScatter (matrices)");
    }
    cuda_check(cudaEventRecord(t.end, stream_), "data parallel: event");
    return t.end;
  }
  // After `after` (the owners' updates wrote their regions of the weight staging buffer), one
  // all-gather of it and every matrix's bf16 weights copied back into the model.
  void gather_staged(const std::vector<Piece>& matrices, cudaEvent_t after) {
    cuda_check(cudaStreamWaitEvent(stream_, after, 0), "data parallel: stream wait");
    Timed& t = timed(&gather_);
    cuda_check(cudaEventRecord(t.start, stream_), "data parallel: event");
    const size_t q = stage_rank_;
    nccl_ok(ncclAllGather(wstage_ + ctx_.rank * q, wstage_, q, ncclBfloat16, ce_ ? ce_comm_ : comm_, stream_), "ncclAllGather (matrices)");
    for (const Piece& p : matrices)
      cuda_check(cudaMemcpyAsync(weights_ + p.base, wstage_ + p.stage, p.span * sizeof(__nv_bfloat16), cudaMemcpyDeviceToDevice, stream_),
                 "data parallel: staging");
    cuda_check(cudaEventRecord(t.end, stream_), "data parallel: event");
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
  // The compute stream waits for every collective enqueued; the time it waits is "exposed".
  void wait() {
    cuda_check(cudaEventRecord(compute_done_, 0), "data parallel: event");
    cuda_check(cudaEventRecord(comm_done_, stream_), "data parallel: event");
    cuda_check(cudaStreamWaitEvent(0, comm_done_, 0), "data parallel: stream wait");
    waited_ = true;
  }

  // The host waits for all work enqueued on a stream (the compute stream unless told),
  // watching NCCL and the clock. Every host wait of the step goes through here, the tuned
  // matmuls' included (Matmul::set_host_wait): a wait after wait() depends on the peers.
  void sync(const std::string& what, cudaStream_t stream = 0) {
    cuda_check(cudaEventRecord(host_wait_, stream), "data parallel: event");
    const auto t0 = std::chrono::steady_clock::now();
    for (int polls = 0;; polls++) {
      cudaError_t q = cudaEventQuery(host_wait_);
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
  // for the last of them, and the compute stream's time from step_start() to wait() (this rank's
  // forward and backward, its waits for the host included).
  struct StepTimes {
    double reduce_ms = 0, gather_ms = 0, exposed_ms = 0, compute_ms = 0;
  };
  StepTimes times() {
    StepTimes r;
    for (auto [list, ms] : {std::pair<std::vector<Timed>*, double*>{&reduce_, &r.reduce_ms}, {&gather_, &r.gather_ms}}) {
      for (size_t i = 0; i < used(list); i++) *ms += elapsed((*list)[i].start, (*list)[i].end);
    }
    if (waited_) r.exposed_ms = std::max(0.0, elapsed(compute_done_, comm_done_));
    if (waited_ && started_) r.compute_ms = elapsed(step_start_, compute_done_);
    waited_ = started_ = false;
    used_reduce_ = used_gather_ = 0;
    return r;
  }

 private:
  // The copy engines' communicator (NCCL's zero-CTA policy) and the buffers it reads and writes,
  // registered on every rank as symmetric windows; recv elements: the all-to-all's receive
  // buffer. If any rank cannot register them, every rank goes on with kernel collectives.
  void start_copy_engines(size_t recv) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
    nccl_ok(ncclCommSplit(comm_, 0, ctx_.rank, &ce_comm_, &cfg), "ncclCommSplit (copy engines)");
    recv_ = (float*)buffer(recv * sizeof(float), true, "data parallel: all-to-all receive buffer");
    bool ok = true;
    for (auto [p, bytes] : {std::pair<void*, size_t>{grads_, n_ * sizeof(float)}, {weights_, n_ * sizeof(__nv_bfloat16)},
                            {gstage_, stage_rank_ * ctx_.world * sizeof(float)}, {wstage_, stage_rank_ * ctx_.world * sizeof(__nv_bfloat16)},
                            {recv_, recv * sizeof(float)}}) {
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
  // This rank's slice of the sum over the ranks of x (N slices of q floats, in a registered
  // window), written over x's slice `rank`: the copy engines' all-to-all, then the sum.
  void reduce_scatter_ce(float* x, size_t q) {
    nccl_ok(ncclAlltoAll(x, recv_, q, ncclFloat32, ce_comm_, stream_), "ncclAlltoAll (gradients, copy engines)");
    cuda_check(layers::sum_slices(recv_, ctx_.world, q, x + ctx_.rank * q, stream_), "data parallel: sum of the slices");
  }
  // A buffer of the exchange: from exchange_alloc() for the copy engines, else cudaMalloc.
  void* buffer(size_t bytes, bool shared, const char* what) {
    shared_ = shared;
    void* p = shared ? exchange_alloc(bytes) : nullptr;
    if (!shared) cuda_check(cudaMalloc(&p, bytes), what);
    if (!p) throw std::runtime_error(std::string(what) + ": cannot allocate " + std::to_string(bytes >> 20) + " MiB");
    return p;
  }
  void abort_comms() {
    for (ncclComm_t* c : {&ce_comm_, &comm_})
      if (*c) ncclCommAbort(*c), *c = nullptr;
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
  size_t used(const std::vector<Timed>* list) const { return list == &reduce_ ? used_reduce_ : used_gather_; }
  Timed& timed(std::vector<Timed>* list) {  // the next pair of events of a list, reused across steps
    size_t& u = list == &reduce_ ? used_reduce_ : used_gather_;
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
  bool ce_ = false;      // the copy engines run the slices' collectives
  bool shared_ = false;  // the staging and receive buffers came from exchange_alloc()
  float* recv_ = nullptr;
  std::vector<ncclWindow_t> windows_;
  cudaStream_t stream_ = nullptr;
  std::vector<Timed> reduce_, gather_;
  size_t used_reduce_ = 0, used_gather_ = 0;
  cudaEvent_t host_wait_ = nullptr, step_start_ = nullptr, compute_done_ = nullptr, comm_done_ = nullptr;
  bool waited_ = false, started_ = false;
};

}  // namespace train
