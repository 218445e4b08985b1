// Test-only fault injection (train/fault_injection.h).
#include "train/fault_injection.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

namespace train {

void inject_fault(const Options& o, const dist::Context& ctx, int step) {
  int rank = -1, at = -1;
  char kind[16] = {0};
  if (o.fault.empty() || std::sscanf(o.fault.c_str(), "%d:%d:%15s", &rank, &at, kind) != 3 || rank != ctx.rank || at != step) return;
  if (std::string(kind) == "crash") throw std::runtime_error("injected fault at step " + std::to_string(step) + " (--fault)");
  std::fprintf(stderr, "train_gpt: %s: injected fault '%s' at step %d (--fault)\n", ctx.who().c_str(), kind, step);
  if (std::string(kind) == "exit") std::_Exit(3);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // hang
}

}  // namespace train
