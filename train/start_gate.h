// The ranks' agreement to start, before any opens its GPU. Each rank checks what it was given
// (its flags, its data, the checkpoint it resumes: under mpirun each rank may be given its
// own), then every rank passes the gate at the same point, with its verdict. When one refused,
// rank 0 prints every refusing rank's message, naming the rank, and every rank leaves with the
// same exit code (the largest: 2 for a flag, 1 for a file): no rank goes on to the GPU, or
// waits there for a peer that has left, and no refusal is lost because rank 1 made it.
#pragma once
#include <stdexcept>
#include <string>

#include "train/dist.h"

namespace train {

class StartGate {
 public:
  explicit StartGate(const dist::Context& ctx) : ctx_(ctx) {}
  // This rank's verdict: rc -1 to go on, 0 to end well (--help), else its exit code with its
  // message. Every rank calls it once, at the same point of the start. Returns -1 when every
  // rank goes on; else the job's exit code (a refusal's over an end), its messages printed on
  // stderr by rank 0 (alone: as they are; with several ranks: each line led by the rank).
  int pass(int rc, const std::string& message);
  bool passed() const { return passed_; }

 private:
  const dist::Context& ctx_;
  bool passed_ = false;
};

// Thrown on a rank that went on, when another rank refused at the gate: its exit code, the
// refusal already printed.
struct Refused : std::runtime_error {
  explicit Refused(int code) : std::runtime_error("another rank refused to start"), code(code) {}
  int code;
};

}  // namespace train
