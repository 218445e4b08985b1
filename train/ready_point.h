// At which point of the backward each tensor's gradient is final, so that the optimiser's
// exchange and update of it may start there (train/shard_plan.h, train/optimizer.cuh), and at
// which stage of the forward its weights are first read; host-only, so that it is tested
// without a GPU.
//
// gpt::Model::backward() walks the layers L-1 .. 0 and calls ready(i) after layer i, ready(-1)
// at the end; the lm head's gradient is complete when the forward returns (point L). A tensor's
// gradient is final after the last layer (in that order) that writes it:
//   head: L;  layer i's matrices and scalars: i;  value_embed.j (used by layers j and L-1-j): j;
//   skip (entry j written by layer L/2 + j): L/2;  embed: -1 (after the last layer).
#pragma once
#include <string>

#include "model/config.h"

namespace train {

inline int ready_point(const std::string& name, int layers) {
  if (name == "head") return layers;
  if (name == "skip") return layers / 2;
  if (name.rfind("value_embed.", 0) == 0) return std::stoi(name.substr(12));
  if (name.rfind("layer", 0) == 0) return std::stoi(name.substr(5));
  return -1;
}

// The mirror image for the forward: the stage at which a forward first reads a tensor's weights
// (gpt::Model::set_before_stage: -1 the embedding, i layer i, L the head), so that the next
// step's forward can wait for each tensor's updated weights only there:
//   embed: -1;  value_embed.j (used by layers j and L-1-j): j;  layer i's tensors: i;
//   skip (entry j read by layer L/2 + j): L/2;  head: L.
// The backward runs the stages in the opposite order, so the first to read a tensor in the
// forward is the last to write its gradient: the same numbers as ready_point.
inline int first_read_stage(const std::string& name, int layers) { return ready_point(name, layers); }

}  // namespace train
