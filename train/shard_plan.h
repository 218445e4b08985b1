// How the optimiser's work and state are shared out among the N ranks of a run, and which
// collectives exchange the gradients and the weights (host only, so that the plan is tested
// without a GPU; train/optimizer.cuh runs it, train/data_parallel.cuh issues the collectives).
//
// Adam's embeddings and head are split element-wise. A tensor of n elements, with q = floor(n / N),
// is N slices of q elements and a remainder of n - N q < N:
//   rank r updates slice r and keeps its Adam moments; every rank updates the remainder;
//   gradient: a reduce-scatter of the N q elements (rank r receives the sum of slice r) and an
//   all-reduce of the remainder; weights: an all-gather of the slices' bf16 copies.
// The scalars (a few dozen values, which the model reads from the fp32 masters) are replicated
// whole, as a remainder is: an all-reduce of their gradients, and every rank updates them.
// Muon matrices are whole (Newton-Schulz needs all of a matrix): the largest first, each goes to
// the rank with the fewest matrix elements so far (ties: the lowest rank), which keeps its
// momentum and runs its update. Exchanged after the backward (kEnd, kEmbeddings), the
// matrices go through staging buffers ordered by owner: each rank's matrices one after another
// in a region of stage_rank elements (the largest rank's share, padded), so that one
// reduce-scatter sums every rank's matrices at once and one all-gather spreads their bf16 weights
// (large collectives, which NCCL runs near its peak bandwidth). Exchanged point by point during
// the backward (kOverlap), each matrix is reduced to its owner and broadcast from it.
// Every rank thus holds every bf16 weight (the forward reads them) and the fp32 masters of what
// it updates; the masters of the rest are gathered only for a checkpoint or a replica check.
//
// The pieces are grouped by points of the backward (train/ready_point.h), so that a point's
// exchange and update run while the backward of the layers below still runs (Sync):
//   kEnd: everything at point -1, after the backward;
//   kEmbeddings: the head's and the value embeddings' slices at the point where their gradients
//     are final (the head after the forward, value_embed.j after layer j) while a layer's
//     backward still follows; the rest (the block matrices, staged; the token embedding and the
//     scalars) at point -1. The largest tensors' exchange then runs beside the backward, in a
//     few large collectives (each started with the next layer's attention backward:
//     train/exchange_windows.h), and the matrices' stays in the staged ones;
//   kOverlap: every piece at the point where its gradient is final.
//
// Bytes on the wire, a rank's share of what the ring algorithms send, for S bytes exchanged:
// reduce-scatter and all-gather (N - 1) / N S; all-reduce 2 (N - 1) / N S; reduce to and
// broadcast from one rank (N - 1) / N S on average over the ranks.
#pragma once
#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "model/config.h"
#include "train/ready_point.h"

namespace train {

struct Piece {
  enum Kind { kSlice, kReplicated, kMatrix };
  Kind kind;
  int tensor;         // index in the layout's tensors
  size_t base;        // the collective's first element in the layout: the tensor's offset (slices, matrix) or the replicated part's
  size_t span;        // elements the collective covers: N q (slices), the replicated part, or the matrix
  size_t offset;      // the first element this rank updates (its slice, the replicated part, or the matrix)
  size_t count;       // elements this rank updates (0: a matrix of another rank)
  int owner;          // kMatrix: the rank that updates it; otherwise -1
  size_t state = 0;   // where this rank's optimiser state of the piece starts in its compact arrays (count > 0)
  size_t stage = 0;   // kMatrix, staged: where the matrix sits in the staging buffers (owner * stage_rank + its place)
};

// When the exchange and update of each tensor run (--grad-sync end|embeddings|overlap).
enum class Sync { kEnd, kEmbeddings, kOverlap };

// The point a tensor's pieces belong to under sync.
inline int sync_point(const model::Tensor& t, int layers, Sync sync) {
  const int ready = ready_point(t.name, layers);
  if (sync == Sync::kOverlap) return ready;
  const model::ParamGroup g = model::group_of(t);
  if (sync == Sync::kEmbeddings && (g == model::ParamGroup::kEmbed || g == model::ParamGroup::kHead) && ready > 0) return ready;
  return -1;
}

struct ShardPlan {
  int world = 1, rank = 0;
  std::map<int, std::vector<Piece>> points;  // ready point -> its pieces, in layout order
  size_t adam_state = 0;                     // elements of this rank's Adam moments (each of m and v)
  size_t muon_state = 0;                     // elements of this rank's Muon momentum
  size_t updated = 0;                        // elements this rank updates
  bool staged = false;                       // the matrices go through the staging buffers (several ranks, not kOverlap)
  size_t stage_rank = 0;                     // elements of each rank's region of the staging buffers
};

inline ShardPlan shard_plan(const model::Layout& layout, int layers, int world, int rank, Sync sync) {
  ShardPlan p;
  p.world = world, p.rank = rank;
  const size_t N = (size_t)world;
  // the matrices' owners: largest first (stable), each to the least loaded rank
  std::vector<size_t> mats;
  for (size_t i = 0; i < layout.tensors.size(); i++)
    if (model::group_of(layout.tensors[i]) == model::ParamGroup::kMatrix) mats.push_back(i);
  std::stable_sort(mats.begin(), mats.end(), [&](size_t a, size_t b) { return layout.tensors[a].size() > layout.tensors[b].size(); });
  std::vector<int> owner_of(layout.tensors.size(), -1);
  std::vector<size_t> load(world, 0);  // matrix elements given to each rank so far
  for (size_t i : mats) {
    const int owner = (int)(std::min_element(load.begin(), load.end()) - load.begin());
    owner_of[i] = owner;
    load[owner] += layout.tensors[i].size();
  }
  std::vector<size_t> place(world, 0);  // staging positions so far, in layout order (64-element aligned)
  p.staged = world > 1 && sync != Sync::kOverlap;
  for (size_t i = 0; i < layout.tensors.size(); i++) {
    const model::Tensor& t = layout.tensors[i];
    const int point = sync_point(t, layers, sync);
    std::vector<Piece>& out = p.points[point];
    const size_t n = t.size();
    if (model::group_of(t) == model::ParamGroup::kMatrix) {
      const int owner = owner_of[i];
      Piece m{Piece::kMatrix, (int)i, t.offset, n, t.offset, owner == rank ? n : 0, owner};
      if (m.count) m.state = p.muon_state, p.muon_state += n;
      m.stage = place[owner];  // (the owner's region's start is added below)
      place[owner] += (n + 63) / 64 * 64;
      out.push_back(m);
      continue;
    }
    const size_t q = model::group_of(t) == model::ParamGroup::kScalar ? 0 : n / N, rem = n - q * N;
    if (q) {
      Piece s{Piece::kSlice, (int)i, t.offset, q * N, t.offset + q * (size_t)rank, q, -1};
      s.state = p.adam_state, p.adam_state += q;
      out.push_back(s);
    }
    if (rem) {
      Piece r{Piece::kReplicated, (int)i, t.offset + q * N, rem, t.offset + q * N, rem, -1};
      r.state = p.adam_state, p.adam_state += rem;
      out.push_back(r);
    }
  }
  p.stage_rank = *std::max_element(place.begin(), place.end());
  for (auto& kv : p.points)
    for (Piece& x : kv.second) {
      p.updated += x.count;
      if (x.kind == Piece::kMatrix) x.stage += (size_t)x.owner * p.stage_rank;
    }
  return p;
}

// A rank's bytes on the wire in a step, on average over the ranks: the gradients' exchange at
// grad_bytes each (4: fp32, 2: bf16) and the weights' (bf16).
struct WireBytes {
  double grads = 0, weights = 0;
  double total() const { return grads + weights; }
};
inline WireBytes wire_bytes(const ShardPlan& p, double grad_bytes) {
  WireBytes w;
  if (p.world < 2) return w;
  const double f = (double)(p.world - 1) / p.world;
  for (const auto& kv : p.points)
    for (const Piece& x : kv.second) {
      if (x.kind == Piece::kMatrix && p.staged) continue;  // the staging buffers' collectives, below
      const double s = (double)x.span;
      w.grads += (x.kind == Piece::kReplicated ? 2 * f : f) * s * grad_bytes;
      if (x.kind != Piece::kReplicated) w.weights += f * s * 2;
    }
  if (p.staged) {
    const double s = (double)p.stage_rank * p.world;
    w.grads += f * s * grad_bytes, w.weights += f * s * 2;
  }
  return w;
}
// The same for an exchange that all-reduces every gradient in fp32 and broadcasts each matrix's
// bf16 Muon update from the rank that orthogonalised it (no sharding): the comparison the log
// and the scaling model make.
inline WireBytes unsharded_wire_bytes(const model::Layout& layout, int world) {
  WireBytes w;
  if (world < 2) return w;
  const double f = (double)(world - 1) / world;
  for (const model::Tensor& t : layout.tensors) {
    w.grads += 2 * f * (double)t.size() * 4;
    if (model::group_of(t) == model::ParamGroup::kMatrix) w.weights += f * (double)t.size() * 2;
  }
  return w;
}

}  // namespace train
