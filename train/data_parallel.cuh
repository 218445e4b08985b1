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
//
// The class is declared here, its members defined by concern beside it:
// data_parallel_setup.cuh (the communicators, the stream, the staging buffers, the copy engines'
// windows, the tear-down), data_parallel_gradients.cuh (the gradients' sums: reduce,
// reduce_staged), data_parallel_weights.cuh (the weights' all-gathers and broadcasts, their
// arrivals) and data_parallel_waits.cuh (the host's waits with their deadline, the step's times).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <map>
#include <string>
#include <vector>

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
               double timeout_s, bool copy_engines = false);
  ~DataParallel();
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
  void wait_for(const std::vector<cudaEvent_t>& arrivals);

  // The allocator of the buffers the copy engines read and write (the model's weights): memory
  // that every rank of the host can map. nullptr when it cannot.
  static void* exchange_alloc(size_t bytes);
  static void exchange_free(void* p) { ncclMemFree(p); }
  int world() const { return ctx_.world; }
  cudaStream_t stream() const { return stream_; }

  // After `after` (an event recorded on the stream that finished the gradients), the point's
  // gradients summed as the plan wants them; returns an event that completes with the sums.
  cudaEvent_t reduce(const std::vector<Piece>& pieces, cudaEvent_t after);
  // After `after`, the updated weights' bf16 copies spread from their owners.
  void gather(const std::vector<Piece>& pieces, cudaEvent_t after);
  // After `after`, every matrix's gradient into the gradient staging buffer and one
  // reduce-scatter of it (this rank's region summed); returns an event that completes with it.
  cudaEvent_t reduce_staged(const std::vector<Piece>& matrices, cudaEvent_t after);
  // After `after` (the owners' updates wrote their regions of the weight staging buffer), one
  // all-gather of it and every matrix's bf16 weights copied back into the model.
  void gather_staged(const std::vector<Piece>& matrices, cudaEvent_t after);
  // fp32 values (masters, optimiser state in the layout) spread from the ranks that own them, in
  // place: the slices all-gathered, the matrices broadcast, for the kinds asked; then the
  // compute stream waits for it. Checkpoints and the replica check only.
  void gather_fp32(float* data, const std::vector<Piece>& pieces, bool slices, bool matrices);
  // A step's work starts on the compute stream (its forward and backward are timed from here to wait()).
  void step_start();
  // The compute stream waits for every collective enqueued, or, given `until` (the optimiser's
  // last update), for that alone (the gathers after it are waited for stage by stage: Arrivals);
  // the time it waits is "exposed".
  void wait(cudaEvent_t until = nullptr);

  // The host waits for all work enqueued on a stream (the compute stream unless told),
  // watching NCCL and the clock. Every host wait of the step goes through here or wait_event,
  // the tuned matmuls' (Matmul::set_host_wait) and the model's upload and loss read-back waits
  // (gpt::Model::set_host_wait) included: a wait after wait(), or after a forward's wait for
  // the weights' arrival, depends on the peers.
  void sync(const std::string& what, cudaStream_t stream = 0);
  // The host waits for an event, as sync() does for a stream.
  void wait_event(cudaEvent_t e, const std::string& what);

  // After sync(): the step's time in the gradients' and the weights' collectives (summed over
  // the points, as they ran beside the backward), how long the compute stream waited at wait()
  // for the last of them, the compute stream's time from step_start() to wait() (this rank's
  // forward and backward, its waits for the host and for the weights' arrival included), and
  // how long its forwards waited for the weights' arrival (wait_for).
  struct StepTimes {
    double reduce_ms = 0, gather_ms = 0, exposed_ms = 0, compute_ms = 0, arrival_wait_ms = 0;
  };
  // Gated (set_gated), the gathers' time is the step before's (this step's may still run).
  StepTimes times();

 private:
  // The tensor's own arrival event, made on first use, now its arrival.
  cudaEvent_t arrived(int tensor);
  // The copy engines' communicator (NCCL's zero-CTA policy) and the buffers the all-gathers
  // write, registered on every rank as symmetric windows. If any rank cannot register them,
  // every rank goes on with kernel collectives.
  void start_copy_engines();
  // After a failure: the kernels' communicator aborted (its kernels stop spinning), the copy
  // engines' left alone (see the destructor).
  void abort_comms();
  struct Timed {
    cudaEvent_t start, end;
  };
  void nccl_ok(ncclResult_t r, const char* what);
  static double elapsed(cudaEvent_t a, cudaEvent_t b);
  Timed& timed(std::vector<Timed>* list, size_t* used);  // the next pair of events of a list, reused across steps

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

// the members' definitions (see the top)
#include "train/data_parallel_setup.cuh"
#include "train/data_parallel_gradients.cuh"
#include "train/data_parallel_weights.cuh"
#include "train/data_parallel_waits.cuh"
