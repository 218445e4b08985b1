// Where a training step's GPU time goes, by category and by operation, from CUDA events recorded
// at section boundaries on the compute stream (train_gpt --profile). The time between one mark
// and the next belongs to the first mark's category and operation (a fixed label such as
// "ReLU^2"); a kHost mark where the GPU may wait for the host (after a sequence's forward and
// backward are enqueued, at the step's end) counts the GPU's idle time there as host time. Marks are no-ops when the
// profiler is off, so the normal run pays nothing.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpt {

class Profiler {
 public:
  enum Cat { kEmbed, kNormMix, kMatmul, kAttnFwd, kAttnBwd, kHead, kOptimizer, kHost, kCount };
  static const char* name(int c) {
    static const char* n[kCount] = {"embeddings (fwd+bwd)",         "norms, rotary, ReLU^2, mixes", "block matmuls (fwd+bwd)",
                                    "attention forward",            "attention backward",           "lm head + softcapped CE",
                                    "optimizer and exchange (exposed)", "GPU idle: host work"};
    return n[c];
  }
  static constexpr size_t kNameWidth = 34;  // the tables' name columns
  bool on = false;
  ~Profiler() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  // op: a string literal naming the operation (its address is kept), at most kNameWidth
  // characters; nullptr: the category's name
  void mark(int cat, const char* op = nullptr) {
    if (!on) return;
    if (op && std::strlen(op) > kNameWidth)  // the tables' columns (and the tests that read them) need it
      throw std::logic_error(std::string("profile: operation name longer than 34 characters: ") + op);
    if (used_ == events_.size()) {
      cudaEvent_t e;
      if (cudaEventCreate(&e) != cudaSuccess) return;
      events_.push_back(e);
      marks_.push_back({});
    }
    cudaEventRecord(events_[used_], 0);
    marks_[used_++] = {cat, op ? op : name(cat)};
  }
  // After the stream is synchronised: adds the marks' intervals to the totals.
  void collect() {
    if (!on) return;
    for (size_t i = 1; i < used_; i++) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, events_[i - 1], events_[i]) != cudaSuccess) continue;
      const Mark& m = marks_[i - 1];
      ms_[m.cat] += ms;
      auto it = std::find_if(ops_.begin(), ops_.end(), [&](const Op& o) { return o.cat == m.cat && !std::strcmp(o.name, m.op); });
      if (it == ops_.end()) it = ops_.insert(ops_.end(), Op{m.cat, m.op, 0, 0});
      it->ms += ms;
      it->calls++;
    }
    used_ = 0;
    steps_++;
  }
  // The table: milliseconds per step and share, by category; then each category's operations,
  // largest first, with their calls per step.
  std::string table() const {
    double total = 0;
    for (double m : ms_) total += m;
    std::string s = "profile: GPU time per step by category, over " + std::to_string(steps_) + " steps\n";
    char b[160];
    for (int c = 0; c < kCount; c++) {
      std::snprintf(b, sizeof(b), "  %-34s %9.2f ms  %5.1f%%\n", name(c), steps_ ? ms_[c] / steps_ : 0.0, total ? 100 * ms_[c] / total : 0.0);
      s += b;
    }
    std::snprintf(b, sizeof(b), "  %-34s %9.2f ms\n", "total", steps_ ? total / steps_ : 0.0);
    s += b;
    s += "profile: GPU time per step by operation (calls a step)\n";
    std::vector<Op> ops = ops_;
    std::stable_sort(ops.begin(), ops.end(), [](const Op& a, const Op& b) { return a.cat != b.cat ? a.cat < b.cat : a.ms > b.ms; });
    for (const Op& o : ops) {
      std::snprintf(b, sizeof(b), "  %-34s %-34s %9.2f ms %7.1f\n", name(o.cat), o.name, steps_ ? o.ms / steps_ : 0.0,
                    steps_ ? (double)o.calls / steps_ : 0.0);
      s += b;
    }
    return s;
  }

 private:
  struct Mark {
    int cat;
    const char* op;
  };
  struct Op {
    int cat;
    const char* name;
    double ms;
    long long calls;
  };
  std::vector<cudaEvent_t> events_;
  std::vector<Mark> marks_;
  std::vector<Op> ops_;
  size_t used_ = 0;
  int steps_ = 0;
  double ms_[kCount] = {};
};

}  // namespace gpt
