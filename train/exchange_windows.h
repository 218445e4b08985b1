// When each point's exchange starts under --grad-sync embeddings: not at the point itself but
// just before the next layer's attention backward; host-only, so that it is tested without a GPU.
//
// A point's exchange is a collective on the communication stream, whose kernel holds some SMs for
// as long as it runs. Started at its point (train/ready_point.h), it runs beside the next layer's
// matmuls, whose persistent grids (one block an SM, tiles dealt out at launch) then wait for the
// SMs it holds: the backward stalls for about as long as the collective runs. The attention
// backward's blocks are scheduled by the GPU one by one as SMs free up, so a collective started
// with it takes a few SMs from it instead. Each point waits for the next such window and takes
// it alone, so that one collective at a time starts beside an attention backward (the points
// are slices of 50304 x 768 tables: their reduce-scatter, Adam on the slice, the all-gather);
// what is still waiting at the end of the backward starts there, in order, before the point at
// the end. Nothing changes what is summed or in which order: only when
// (results/scaling/, "The ranks' spread, and the embeddings' exchange in attention windows").
#pragma once
#include <deque>
#include <set>
#include <utility>
#include <vector>

namespace train {

class ExchangeWindows {
 public:
  // on: wait for windows (else every point starts at itself, whether it has an exchange or not);
  // points: those with an exchange (with the windows on, the others start nothing and take no
  // window).
  ExchangeWindows(bool on, std::set<int> points) : on_(on), points_(std::move(points)) {}
  // The gradients of a point are final (-1: the end of the backward): the points whose exchange
  // starts now, in order.
  std::vector<int> ready(int point) {
    if (!on_) return {point};
    if (point != -1) {
      if (!points_.count(point)) return {};
      waiting_.push_back(point);
      return {};
    }
    std::vector<int> now(waiting_.begin(), waiting_.end());
    waiting_.clear();
    now.push_back(-1);
    return now;
  }
  // A layer's attention backward is next: the point whose exchange starts beside it, if any.
  std::vector<int> at_attention() {
    if (!on_ || waiting_.empty()) return {};
    const int p = waiting_.front();
    waiting_.pop_front();
    return {p};
  }
  bool idle() const { return waiting_.empty(); }

 private:
  bool on_;
  std::set<int> points_;
  std::deque<int> waiting_;
};

}  // namespace train
