// The ranks' agreement to start (train/start_gate.h).
#include "train/start_gate.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace train {

int StartGate::pass(int rc, const std::string& message) {
  passed_ = true;
  // the verdicts, as rc + 1 (0: go on, 1: end well, 2 and up: a refusal's code + 1)
  const std::vector<uint64_t> verdicts = dist::gather_all(ctx_, (uint64_t)(std::max(rc, -1) + 1));
  const std::vector<std::string> messages = dist::gather_text(ctx_, rc > 0 ? message : std::string());
  const uint64_t job = *std::max_element(verdicts.begin(), verdicts.end());
  if (job >= 2 && ctx_.rank == 0) {
    for (int r = 0; r < ctx_.world; r++) {
      if (verdicts[r] < 2) continue;
      std::string text = messages[r];
      while (!text.empty() && text.back() == '\n') text.pop_back();
      if (ctx_.world == 1) {
        std::fprintf(stderr, "%s\n", text.c_str());
        continue;
      }
      const std::string who = "train_gpt: rank " + std::to_string(r) + " of " + std::to_string(ctx_.world) + ": ";
      for (size_t at = 0; at <= text.size();) {  // every line led by its rank
        const size_t end = std::min(text.find('\n', at), text.size());
        std::fprintf(stderr, "%s%s\n", who.c_str(), text.substr(at, end - at).c_str());
        at = end + 1;
      }
    }
    std::fflush(stderr);
  }
  return (int)job - 1;
}

}  // namespace train
