// A run's model and optimiser state saved into a checkpoint and loaded from one (the file:
// train/checkpoint.h).
#pragma once
#include <cstdio>
#include <string>

#include "model/gpt.cuh"
#include "train/checkpoint.h"
#include "train/data_parallel.cuh"
#include "train/dist.h"
#include "train/optimizer.cuh"
#include "train/options.h"

namespace train {

// Checkpoints: everything a run needs to continue as if never stopped (train/checkpoint.h). The
// state is gathered from every rank (collective); rank 0 writes the file.
inline void save_checkpoint(const Options& o, const dist::Context& ctx, const std::string& data, gpt::Model& model, Optimizer& opt,
                            train::DataParallel* dp, int steps_done, std::string* path) {
  char name[64];
  std::snprintf(name, sizeof(name), "/ckpt_%06d.bin", steps_done);
  train::Checkpoint ck;
  ck.config = train::fingerprint(o);
  ck.data = data;
  ck.step = steps_done;
  opt.save(ck, model.parameters(), dp);
  *path = o.checkpoint_dir + name;
  if (ctx.rank == 0) train::write_checkpoint(*path, ck);
}
inline int load_checkpoint(const Options& o, const train::Checkpoint& ck, gpt::Model& model, Optimizer& opt) {
  const size_t n = model.layout().size();
  auto master = ck.blobs.find("master");
  if (master == ck.blobs.end() || master->second.size() != n)
    throw train::CheckpointError(o.resume + ": blob master is missing or of another size");
  if (ck.step < 0 || ck.step > o.steps) throw train::CheckpointError(o.resume + ": step " + std::to_string(ck.step) + " outside the run");
  model.upload_master(master->second);
  opt.load(ck, n, o.resume);
  return (int)ck.step;
}

}  // namespace train
