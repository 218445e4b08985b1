// The run's logs, written by rank 0: one line per step in the record's form, on stdout and in
// LOG (so tools written for modded-nanogpt logs keep working),
//     step:125/1480 val_loss:4.1234 train_time:19625ms step_avg:157.00ms
//     step:126/1480 train_time:19782ms step_avg:157.00ms
//     step:127/1480 train_loss:diverged(nan) ...   (a loss that is not finite: nan, inf, -inf)
// and a machine-readable copy beside it (LOG with .jsonl for .txt), one JSON object per event,
// the first being the configuration. train_time counts from the end of step 10 and excludes
// validation (as the record does); step_avg = train_time / (step - 10), nan before. Each line
// is flushed as it is written, so a crash loses at most the line being written; a write that
// fails (full disk) is an error, never ignored.
//
// One log is one run: the files are created new (an existing LOG or its .jsonl is refused, so
// two runs are never appended into one), and the text log's first line names the run and its code,
//     run_id:<16 hex digits> train_gpt <commit> source:<64 hex digits>
// (the source tree's SHA-256 as the build computed it, Makefile SOURCE_DIGEST; logs written before
// it was stamped end at the commit)
// with the same id in the configuration event, so that a log put together from two runs by hand
// is recognised as such by scripts/speedrun_logs.py.
#pragma once
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace train {

class RunLog {
 public:
  // path empty: stdout only. enabled false (ranks other than 0): writes nothing.
  // Throws when LOG or its .jsonl exists already, or cannot be created.
  RunLog(const std::string& path, bool enabled, const std::string& run_id = "", const std::string& commit = "",
         const std::string& source_digest = "");
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  void config(const std::string& json_object);  // the first JSON line
  // One step line; val_loss / train_loss absent when not measured at this step. A loss that is
  // not finite is written as diverged(nan), diverged(inf) or diverged(-inf), the same word in the
  // text and (as a string) in the JSON lines: a diverged run is never read as a missing value.
  void step(int step, int total, double train_time_ms, std::optional<double> val_loss = std::nullopt,
            std::optional<double> train_loss = std::nullopt);
  static std::string diverged(double loss);  // "diverged(nan)", ...
  void event(const std::string& json_object);  // any other event, as a JSON object
  // An event of numbers: {"event": name, key: value, ...} (non-finite values as null).
  void event(const std::string& name, const std::vector<std::pair<std::string, double>>& fields);
  void note(const std::string& line);          // free text: stdout and the text log
  static std::string jsonl_path(const std::string& path);
  // Empty when a run may write this log; otherwise why not (an existing file, or one that cannot
  // be created: each is tried, and removed at once).
  static std::string refuse_existing(const std::string& path);
  static std::string new_run_id();  // 16 hex digits, random


 private:
  void write(FILE* f, const std::string& path, const std::string& line);
  bool enabled_;
  std::string txt_path_, jsonl_path_;
  FILE* txt_ = nullptr;
  FILE* jsonl_ = nullptr;
};

}  // namespace train
