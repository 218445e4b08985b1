// The data-parallel exchange's collectives on their own, with nothing else on the GPU, on the
// model's parameter layout (the speedrun's by default): the gradients' reduce-scatter and the
// weights' all-gather exactly as the trainer issues them after the backward (--grad-sync end:
// train/data_parallel.cuh over train/shard_plan.h; the matrices staged and reduced in one
// collective, then each embedding's and the head's slices and the scalars in one NCCL group; the
// weights the same way back); the same without the scalars' all-reduces (a few dozen values in
// as many collectives: what they cost); and one reduce-scatter of the whole fp32 gradient buffer
// and one all-gather of the whole bf16 weight buffer (the collectives' own rate at the same bytes).
// Each twice: with the all-gathers on NCCL's kernels and on the copy engines (--gather-engine; the
// weights in symmetric windows).
//
//   mpirun -np N build/bench/exchange_bench [--reps 20] [--layers 12 --width 768 --hidden 3072 --vocab 50304]
//
// For each: the median over the repetitions of the gradients' and the weights' time (CUDA events
// on the communication stream, the staging copies included, as the trainer's log counts them) and
// the bus bandwidth, a rank's bytes on the wire ((N - 1) / N of what is exchanged) over that time;
// "sum" adds the two medians. Every repetition starts on all ranks at once (the GPUs idle, then
// an MPI barrier), so that no rank's times hold another's lateness; the gradients hold random
// values, refilled before each repetition.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench/fill.cuh"
#include "common/cli.h"
#include "common/cuda_check.h"
#include "common/median.h"
#include "layers/cast.cuh"
#include "model/config.h"
#include "train/data_parallel.cuh"
#include "train/dist.h"
#include "train/shard_plan.h"

namespace {

struct Row {
  std::string name;
  int grad_ops, weight_ops;  // collectives each way
  double grad_bytes, weight_bytes;  // a rank's bytes on the wire
  double grad_ms, weight_ms;  // medians
};

// The repetitions of one exchange: pieces `others` (and `matrices`, staged, when stage_rank > 0)
// at point -1, as train/optimizer.cuh issues them; returns the medians of the two phases.
void time_exchange(const dist::Context& ctx, float* grads, __nv_bfloat16* weights, const __nv_bfloat16* source, size_t n,
                   const std::vector<train::Piece>& matrices, const std::vector<train::Piece>& others, size_t stage_rank, int reps,
                   bool copy_engines, Row* row) {
  train::DataParallel dp(ctx, grads, weights, n, false, stage_rank, 300.0, copy_engines);
  if (copy_engines && !dp.copy_engines())
    throw std::runtime_error("the copy engines cannot run the all-gathers here (ranks on several hosts, or NCCL could not register the buffers)");
  cudaEvent_t ready;
  cuda_check(cudaEventCreate(&ready), "event");
  std::vector<double> g, w;
  for (int i = -3; i < reps; i++) {  // three untimed first
    cuda_check(layers::cast_to_fp32(source, grads, n), "refilling the gradients");
    cuda_check(cudaDeviceSynchronize(), "refilling the gradients");
    dist::barrier(ctx);
    cuda_check(cudaEventRecord(ready, 0), "event");
    cudaEvent_t mats = stage_rank ? dp.reduce_staged(matrices, ready) : nullptr;
    cudaEvent_t sums = dp.reduce(others, ready);
    if (stage_rank) dp.gather_staged(matrices, mats);
    dp.gather(others, sums);
    dp.wait();
    dp.sync("exchange_bench");
    const train::DataParallel::StepTimes t = dp.times();
    if (i >= 0) g.push_back(t.reduce_ms), w.push_back(t.gather_ms);
  }
  cudaEventDestroy(ready);
  row->grad_ms = median(g), row->weight_ms = median(w);
}

int run(int argc, char** argv, const dist::Context& ctx) {
  int reps = 20;
  model::Config cfg;
  cfg.vocab = 50304, cfg.width = 768, cfg.heads = 6, cfg.layers = 12, cfg.hidden = 3072;
  CLI::App app{"exchange_bench: the data-parallel exchange's collectives alone, as the trainer issues them and as one collective each way"};
  cli::integer(app, "--reps", reps, 1, 1000, "timed repetitions of each exchange")->capture_default_str();
  cli::integer(app, "--layers", cfg.layers, 2, 256, "layers (even)")->capture_default_str();
  cli::integer(app, "--width", cfg.width, 12, 1 << 14, "model width (a multiple of 12)")->capture_default_str();
  cli::integer(app, "--hidden", cfg.hidden, 64, 1 << 16, "MLP width")->capture_default_str();
  cli::integer(app, "--vocab", cfg.vocab, 64, 1 << 20, "vocabulary (padded)")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {  // (said once, by rank 0)
    return (ctx.rank == 0 ? app.exit(e) : e.get_exit_code()) == 0 ? 0 : 2;
  }
  if (cfg.layers % 2) {
    if (ctx.rank == 0) std::fprintf(stderr, "exchange_bench: --layers must be even (the model's U-net skips pair them), got %d\n", cfg.layers);
    return 2;
  }
  if (cfg.width % (2 * cfg.heads)) {
    if (ctx.rank == 0)
      std::fprintf(stderr, "exchange_bench: --width must be a multiple of %d (%d heads of an even size), got %d\n", 2 * cfg.heads, cfg.heads,
                   cfg.width);
    return 2;
  }
  if (ctx.world < 2) {
    std::fprintf(stderr, "exchange_bench: needs several ranks: run it under mpirun -np N with N from 2 to the GPUs of this machine\n");
    return 2;
  }
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;  // (no driver, no device: none)
  // every rank's verdict, so that all of them stop together (the first collective would wait
  // for a rank that left); the ranks that lack a GPU say so
  const bool short_here = ctx.local_size > gpus;
  if (short_here) std::fprintf(stderr, "exchange_bench: %s: %d ranks on this machine, %d GPU(s) visible: one rank a GPU\n", ctx.who().c_str(),
                               ctx.local_size, gpus);
  if (dist::max(ctx, short_here ? 1.0 : 0.0) > 0) return 2;
  cuda_check(cudaSetDevice(ctx.local_rank), "choosing this rank's GPU");
  const model::Layout layout(cfg);
  const size_t n = layout.size(), N = (size_t)ctx.world;
  float* grads = nullptr;
  __nv_bfloat16 *weights = nullptr, *source = nullptr;
  cuda_check(cudaMalloc(&grads, n * sizeof(float)), "gradient buffer");
  weights = (__nv_bfloat16*)train::DataParallel::exchange_alloc(n * sizeof(__nv_bfloat16));  // (as the trainer's: the copy engines reach it)
  if (!weights) throw std::runtime_error("cannot allocate the weight buffer");
  cuda_check(cudaMalloc(&source, n * sizeof(__nv_bfloat16)), "random values");
  cuda_check(bench::fill_random(source, n, 1234u + ctx.rank), "random values");
  cuda_check(cudaMemcpy(weights, source, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToDevice), "weight buffer");

  std::vector<Row> rows;
  const double f = (double)(N - 1) / N;
  for (bool ce : {false, true}) {  // the all-gathers on kernels, then on the copy engines
    for (bool scalars : {true, false}) {  // the second leaves out the scalars' all-reduces: what they cost
      const train::ShardPlan plan = train::shard_plan(layout, cfg.layers, ctx.world, ctx.rank, train::Sync::kEnd);
      std::vector<train::Piece> matrices, others;
      const train::WireBytes wire = train::wire_bytes(plan, 4);
      double grad_bytes = wire.grads;
      for (const train::Piece& p : plan.points.at(-1)) {
        if (!scalars && model::group_of(layout.tensors[p.tensor]) == model::ParamGroup::kScalar) {
          grad_bytes -= 2 * f * (double)p.span * 4;  // (an all-reduce's bytes)
          continue;
        }
        (p.kind == train::Piece::kMatrix ? matrices : others).push_back(p);
      }
      int slices = 0;
      for (const train::Piece& p : others) slices += p.kind == train::Piece::kSlice;
      Row r{std::string(scalars ? "the trainer's" : "the trainer's, no scalars") + (ce ? ", copy" : ""), 1 + (int)others.size(), 1 + slices,
            grad_bytes, wire.weights, 0, 0};
      time_exchange(ctx, grads, weights, source, n, matrices, others, plan.stage_rank, reps, ce, &r);
      rows.push_back(r);
    }
  }
  for (bool ce : {false, true}) {
    const size_t q = n / N;
    const train::Piece whole{train::Piece::kSlice, 0, 0, q * N, q * (size_t)ctx.rank, q, -1};
    Row r{std::string("one collective each way") + (ce ? ", copy" : ""), 1, 1, f * 4.0 * q * N, f * 2.0 * q * N, 0, 0};
    time_exchange(ctx, grads, weights, source, n, {}, {whole}, 0, reps, ce, &r);
    rows.push_back(r);
  }
  cudaFree(grads), train::DataParallel::exchange_free(weights), cudaFree(source);
  if (ctx.rank == 0) {
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, ctx.local_rank), "device properties");
    std::printf("exchange_bench: %d ranks, %s, %zu parameters (fp32 gradients, bf16 weights), median of %d\n", ctx.world, prop.name, n, reps);
    std::printf("%-32s %5s %9s %12s %10s %10s %10s %10s %7s\n", "exchange", "ops", "grads MB", "gradients ms", "busbw GB/s", "weights MB",
                "weights ms", "busbw GB/s", "sum ms");
    for (const Row& r : rows)
      std::printf("%-32s %2d+%-2d %9.0f %12.2f %10.1f %10.0f %10.2f %10.1f %7.2f\n", r.name.c_str(), r.grad_ops, r.weight_ops,
                  r.grad_bytes / 1e6, r.grad_ms, r.grad_bytes / r.grad_ms / 1e6, r.weight_bytes / 1e6, r.weight_ms,
                  r.weight_bytes / r.weight_ms / 1e6, r.grad_ms + r.weight_ms);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dist::Context ctx;
  try {
    ctx = dist::init(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exchange_bench: error: %s\n", e.what());
    return 1;
  }
  int rc;
  try {
    rc = run(argc, argv, ctx);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exchange_bench: %s%serror: %s\n", ctx.who().c_str(), ctx.world > 1 ? ": " : "", e.what());
    rc = 1;
  }
  // a rank that failed alone takes the job down, so that none waits for it in a collective
  if (rc == 1 && ctx.world > 1) dist::abort_all(ctx, rc);
  dist::finalize(ctx);
  return rc;
}
