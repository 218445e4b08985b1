// Which gradients the data-parallel exchange may sum at which point of the backward
// (train/data_parallel.cuh), host-only so that the plan is tested without a GPU.
//
// gpt::Model::backward() walks the layers L-1 .. 0 and calls ready(i) after layer i, ready(-1)
// at the end; the lm head's gradient is complete when the forward returns (point L). A tensor's
// gradient is final after the last layer (in that order) that writes it:
//   head: L;  layer i's matrices and scalars: i;  value_embed.j (used by layers j and L-1-j): j;
//   skip (entry j written by layer L/2 + j): L/2;  embed: -1 (after the last layer).
// grad_buckets groups the layout's tensors by that point into contiguous runs of the flat
// gradient buffer (a layer's tensors are adjacent in the layout); with overlap off everything is
// one run at point -1.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace train {

inline int ready_point(const std::string& name, int layers) {
  if (name == "head") return layers;
  if (name == "skip") return layers / 2;
  if (name.rfind("value_embed.", 0) == 0) return std::stoi(name.substr(12));
  if (name.rfind("layer", 0) == 0) return std::stoi(name.substr(5));
  return -1;
}

// point -> (offset, count) runs, in layout order
using Buckets = std::map<int, std::vector<std::pair<size_t, size_t>>>;

inline Buckets grad_buckets(const model::Layout& layout, int layers, bool overlap) {
  Buckets b;
  const auto& ts = layout.tensors;
  int prev = 0;
  for (size_t i = 0; i < ts.size(); i++) {
    const int p = overlap ? ready_point(ts[i].name, layers) : -1;
    auto& runs = b[p];
    const size_t end = ts[i].offset + ts[i].size();
    if (i > 0 && prev == p && !runs.empty()) runs.back().second = end - runs.back().first;  // extends the previous run
    else runs.push_back({ts[i].offset, ts[i].size()});
    prev = p;
  }
  return b;
}

}  // namespace train
