// The ranks' agreement to start, before any opens its GPU. Each rank checks what it was given
// (its flags, its data, the checkpoint it resumes: under mpirun each rank may be given its
// own), then every rank passes the gate at the same point, with its verdict. When one refused,
// rank 0 prints every refusing rank's message, naming the rank, and every rank leaves with the
// same exit code (the largest: 2 for a flag, 1 for a file): no rank goes on to the GPU, or
// waits there for a peer that has left, and no refusal is lost because rank 1 made it.
// When none refused, the ranks also compare what they must share (the resolved configuration,
// the data's and the checkpoint's digests: the caller names the fields), by a digest of the
// fields; a rank whose fields differ from rank 0's is named by rank 0 with each differing field
// and both values, and every rank leaves with exit code 2: ranks of other configurations would
// train side by side as one run, each its own computation.
#pragma once
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "train/dist.h"

namespace train {

// Named values that every rank of a job must hold alike: (field, value), in the same order on
// every rank.
using Agreed = std::vector<std::pair<std::string, std::string>>;

class StartGate {
 public:
  // out: where rank 0 prints the refusals (stderr; a file in tests)
  explicit StartGate(const dist::Context& ctx, FILE* out = stderr) : ctx_(ctx), out_(out) {}
  // This rank's verdict: rc -1 to go on, 0 to end well (--help), else its exit code with its
  // message; agreed: the fields every rank must hold alike, compared when every rank goes on.
  // Every rank calls it once, at the same point of the start. Returns -1 when every rank goes
  // on and agrees; else the job's exit code (a refusal's over an end, 2 for a disagreement),
  // its messages printed by rank 0 (alone: as they are; with several ranks: each line led by
  // the rank).
  int pass(int rc, const std::string& message, const Agreed& agreed = {});
  bool passed() const { return passed_; }

 private:
  int disagreement(const Agreed& agreed);  // -1, or 2 with the differing ranks' fields printed
  void print(int rank, const std::string& text);
  const dist::Context& ctx_;
  FILE* out_;
  bool passed_ = false;
};

// Thrown on a rank that went on, when another rank refused at the gate: its exit code, the
// refusal already printed.
struct Refused : std::runtime_error {
  explicit Refused(int code) : std::runtime_error("another rank refused to start"), code(code) {}
  int code;
};

}  // namespace train
