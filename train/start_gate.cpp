// The ranks' agreement to start (train/start_gate.h).
#include "train/start_gate.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/sha256.h"

namespace train {

int StartGate::pass(int rc, const std::string& message, const Agreed& agreed) {
  passed_ = true;
  // the verdicts, as rc + 1 (0: go on, 1: end well, 2 and up: a refusal's code + 1)
  const std::vector<uint64_t> verdicts = dist::gather_all(ctx_, (uint64_t)(std::max(rc, -1) + 1));
  const std::vector<std::string> messages = dist::gather_text(ctx_, rc > 0 ? message : std::string());
  const uint64_t job = *std::max_element(verdicts.begin(), verdicts.end());
  if (job >= 2 && ctx_.rank == 0) {
    for (int r = 0; r < ctx_.world; r++)
      if (verdicts[r] >= 2) print(r, messages[r]);
    std::fflush(out_);
  }
  // the fields are compared only when every rank goes on: a rank that refused may hold a
  // configuration half parsed, and its refusal says what is wrong
  if (job == 0) return disagreement(agreed);
  return (int)job - 1;
}

int StartGate::disagreement(const Agreed& agreed) {
  const std::string mine = nlohmann::json(agreed).dump();  // [[field, value], ...]: any bytes kept apart
  const uint64_t digest = std::stoull(sha256::hex(mine).substr(0, 16), nullptr, 16);
  const std::vector<uint64_t> digests = dist::gather_all(ctx_, digest);
  if (std::all_of(digests.begin(), digests.end(), [&](uint64_t d) { return d == digests[0]; })) return -1;
  // every rank knows that some differ (the digests went to all): the fields go to rank 0, which names them
  const std::vector<std::string> all = dist::gather_text(ctx_, mine);
  if (ctx_.rank == 0) {
    for (int r = 1; r < ctx_.world; r++) {
      if (digests[r] == digests[0]) continue;
      Agreed theirs;
      try {
        theirs = nlohmann::json::parse(all[r]).get<Agreed>();
      } catch (const nlohmann::json::exception&) {
      }
      std::string diff;
      for (size_t i = 0; i < std::max(agreed.size(), theirs.size()); i++) {
        const std::string field = i < agreed.size() ? agreed[i].first : theirs[i].first;
        const std::string here = i < agreed.size() ? agreed[i].second : "(none)";
        const std::string there = i < theirs.size() && theirs[i].first == field ? theirs[i].second : "(none)";
        if (here != there) diff += (diff.empty() ? "" : ", ") + field + " '" + there + "' where rank 0 has '" + here + "'";
      }
      print(r, "error: its configuration differs from rank 0's: " + (diff.empty() ? std::string("(fields of another order)") : diff) +
                   "; every rank of a job must be given the same flags, data and checkpoint");
    }
    std::fflush(out_);
  }
  return 2;
}

void StartGate::print(int rank, const std::string& message) {
  std::string text = message;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  if (ctx_.world == 1) {
    std::fprintf(out_, "%s\n", text.c_str());
    return;
  }
  const std::string who = "train_gpt: rank " + std::to_string(rank) + " of " + std::to_string(ctx_.world) + ": ";
  for (size_t at = 0; at <= text.size();) {  // every line led by its rank
    const size_t end = std::min(text.find('\n', at), text.size());
    std::fprintf(out_, "%s%s\n", who.c_str(), text.substr(at, end - at).c_str());
    at = end + 1;
  }
}

}  // namespace train
