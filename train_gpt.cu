// train_gpt: the GPT speedrun trainer (README.md; docs/model.md, docs/formats.md), on one GPU or many.
//
// Here: main (the options, the refusals every rank agrees on before any GPU work, --check-data)
// and the training loop (run_training). The pieces of a run are in train/: the options
// (train/options.h: one table gives the flags, the recipes' keys, the fingerprint and the log's
// configuration; a run's settings are a recipe, recipes/*.toml, then the flags), the data
// (train/run_data.h; --check-data's checks, train/data_check.h), what the options make of the
// model (train/run_config.h), the GPU (train/run_gpu.cuh), the figures and the report
// (train/run_report.cuh), and train/trainer.cuh, whose Trainer does each job of the loop. The
// model is model/gpt.cuh (forward and backward, checked against the fp64 reference); the
// optimiser is train/optimizer.cuh (Adam and Muon). Checkpoints (--checkpoint-dir, --resume) are
// train/checkpoint.h, the state they hold train/run_checkpoint.cuh. Several GPUs: one process
// each under mpirun (train/dist.h), the optimiser's work and state shared out among the ranks
// (train/shard_plan.h), the gradients and weights exchanged over NCCL after the backward, or
// layer by layer beside it (train/data_parallel.cuh); the global batch stays --seqs-per-step
// sequences whatever the GPU count, so runs on 1, 2 or 8 GPUs are one experiment.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "model/target_leak.h"
#include "train/checkpoint.h"
#include "train/data_check.h"
#include "train/dist.h"
#include "train/fault_injection.h"
#include "train/options.h"
#include "train/run_config.h"
#include "train/run_log.h"
#include "train/start_gate.h"
#include "train/trainer.cuh"

using train::Options;

// An error's line on stderr, naming the rank when there are several.
static void report_error(const dist::Context& ctx, const std::exception& e) {
  std::fprintf(stderr, "train_gpt: %s%serror: %s\n", ctx.who().c_str(), ctx.world > 1 ? ": " : "", e.what());
}

// The training loop: validation at step 0, every --val-every steps and at the end; one step at a
// time in between. Returns 0, or the code of a refusal before the GPU, which every rank returns
// (train/start_gate.h); with several ranks any later failure ends the job here.
static int run_training(const Options& o, const dist::Context& ctx) {
  // With several ranks a failure ends the job from here, while the trainer still stands: its
  // destructors would wait for the GPU, whose streams can wait forever for a peer that hung (a
  // copy-engine all-gather waits for its peers' flags, which no abort releases).
  std::optional<train::Trainer> t;
  train::StartGate gate(ctx);  // a failure before it, on any rank, ends every rank there, none having touched its GPU
  try {
    t.emplace(o, ctx, gate);
    for (int step = t->start_step(); step <= o.steps; step++) {
      const int window = t->window(step);
      if (t->validates_after(step)) t->validate(step, window);
      if (step == o.steps) break;
      train::inject_fault(o, ctx, step + 1);
      t->after_step(step + 1, t->train_step(step, window));
    }
    t->finish();
  } catch (const train::Refused& e) {  // another rank refused to start; rank 0 printed why
    return e.code;
  } catch (const CLI::ValidationError& e) {
    if (ctx.world < 2) throw;
    if (!gate.passed()) return gate.pass(2, std::string("error: ") + e.what());
    report_error(ctx, e);
    dist::abort_all(ctx, 2);
  } catch (const std::exception& e) {
    if (ctx.world < 2) throw;
    if (!gate.passed()) return gate.pass(1, std::string("error: ") + e.what());
    report_error(ctx, e);
    dist::abort_all(ctx, 1);
  }
  return 0;
}

int main(int argc, char** argv) {
  dist::Context ctx;
  try {
    ctx = dist::init(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: error: %s\n", e.what());
    return 1;
  }
  // one exit path: under mpirun a rank that fails while training takes the job down
  // (MPI_Abort) so that none waits forever; a refusal before the GPU is agreed by every rank
  // (train/start_gate.h), and each rank simply exits with the job's code
  auto finish = [&](int rc, bool every_rank_agrees = false) {
    if (rc != 0 && ctx.world > 1 && !every_rank_agrees) dist::abort_all(ctx, rc);
    dist::finalize(ctx);
    return rc;
  };
  // every rank parses its own flags (mpirun may give each its own); what exists on disk is rank
  // 0's to judge (it alone writes logs and checkpoints). The log and the checkpoint folder are
  // tried for writing now (and made only once the run can start), so that neither is found
  // unwritable after training has begun. Then the ranks agree: one's refusal ends every rank,
  // and so does a rank whose resolved configuration differs from rank 0's.
  Options o;
  std::string refusal;
  int rc = train::parse_options(argc, argv, ctx.world, ctx.rank, &o, &refusal);
  // a mask that shows the loss its own targets runs only on purpose (model/target_leak.h)
  if (rc < 0 && !o.check_data && !o.allow_target_leak) {
    const model::TargetLeak leak = train::target_leak(o);
    if (leak.leaks) rc = 2, refusal = std::string(ctx.world > 1 ? "" : "train_gpt: ") + train::target_leak_refusal(o, leak);
  }
  if (rc < 0 && ctx.rank == 0 && !o.check_data) {
    std::string why = o.log_file.empty() ? "" : train::RunLog::refuse_existing(o.log_file);
    const char* flag = "--log-file";
    if (why.empty() && !o.checkpoint_dir.empty()) why = train::used_checkpoint_dir(o.checkpoint_dir, o.resume), flag = "--checkpoint-dir";
    if (why.empty() && !o.checkpoint_dir.empty()) why = train::unwritable_checkpoint_dir(o.checkpoint_dir);  // made once the run can start
    if (!why.empty()) rc = 2, refusal = std::string(ctx.world > 1 ? "" : "train_gpt: ") + flag + ": " + why;
  }
  // --check-data reads every shard in one process and never reaches the GPU's gate: under
  // mpirun the ranks without it would wait there for ever, so it is refused at this gate
  if (rc < 0 && o.check_data && ctx.world > 1)
    rc = 2, refusal = "--check-data: checks the data in one process; run it without mpirun";
  rc = train::StartGate(ctx).pass(rc, refusal, train::resolved(o));  // every rank given the same configuration
  if (rc >= 0) return finish(rc, true);
  if (o.check_data) {
    int bad = ctx.rank == 0 ? train::check_data(o) : 0;
    if (bad) std::fprintf(stderr, "check-data: %d problem(s) found\n", bad);
    else if (ctx.rank == 0) std::printf("check-data: all shards good\n");
    return finish(bad ? 1 : 0);
  }
  try {
    return finish(run_training(o, ctx), true);  // (its code is every rank's: a later failure ended the job inside it)
  } catch (const CLI::ValidationError& e) {
    report_error(ctx, e);
    return finish(2);
  } catch (const std::exception& e) {
    report_error(ctx, e);
    return finish(1);
  }
}

