// The data loader (data/dataloader.h) and the run log (train/run_log.h):
//  - sequence k of the stream is the window the header comment defines, across shards, with
//    short tails skipped and cycling (or an error past the end without cycling);
//  - for world sizes 1, 2, 4, 8 a step uses the same 8 sequences, no two ranks share one;
//  - validation is split over ranks without overlap or loss;
//  - a corrupt shard is named when loaded;
//  - the log's lines are the record's format, and scripts/speedrun_logs.py reads them back.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "data/dataloader.h"
#include "tests/check.h"
#include "train/run_log.h"

int main() {
  char tmpl[] = "/tmp/loader_test_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const int sizes[] = {1000, 37, 500};
  std::vector<std::string> files;
  std::vector<std::vector<uint16_t>> all;
  for (int i = 0; i < 3; i++) {
    std::vector<uint16_t> t(sizes[i]);
    for (int j = 0; j < sizes[i]; j++) t[j] = (uint16_t)((i * 10007 + j) % 50000);
    files.push_back(dir + "/train_" + std::to_string(i) + ".bin");
    shard::write_shard(files.back(), t);
    all.push_back(t);
  }
  const int L = 64;
  data::TokenStream s(files, L, 50257, true);
  CHECK(s.sequences_per_pass() == 15 + 0 + 7, "sequences per pass %llu", (unsigned long long)s.sequences_per_pass());
  std::vector<uint16_t> buf(L + 1);
  bool ok = true;
  for (uint64_t k = 0; k < 50; k++) {
    s.sequence(k, buf.data());
    const uint64_t kk = k % 22;
    const auto& src = kk < 15 ? all[0] : all[2];
    const size_t start = (kk < 15 ? kk : kk - 15) * L;
    for (int j = 0; j <= L; j++) ok &= buf[j] == src[start + j];
  }
  CHECK(ok, "sequence contents do not match the windows");
  data::TokenStream once(files, L, 50257, false);
  try {
    once.sequence(22, buf.data());
    CHECK(false, "no error past the end of a non-cycling stream");
  } catch (const shard::ShardError& e) {
    CHECK(std::string(e.what()).find("past the end") != std::string::npos, "%s", e.what());
  }

  // every world size sees the same sequences in a step, each once
  for (uint64_t step : {0ull, 1ull, 57ull}) {
    for (int world : {1, 2, 4, 8}) {
      std::multiset<uint64_t> seen;
      for (int rank = 0; rank < world; rank++) {
        data::TrainSchedule ts{8, world, rank};
        for (int m = 0; m < ts.micro_steps(); m++) seen.insert(ts.sequence_index(step, m));
      }
      std::multiset<uint64_t> want;
      for (uint64_t k = 8 * step; k < 8 * step + 8; k++) want.insert(k);
      CHECK(seen == want, "step %llu, world %d: sequences differ from the one-GPU step", (unsigned long long)step, world);
    }
  }
  // validation split
  for (int world : {1, 2, 3, 8}) {
    std::multiset<uint64_t> seen;
    for (int r = 0; r < world; r++)
      for (uint64_t k : data::val_sequences(10 * 64 + 5, 64, world, r)) seen.insert(k);
    std::multiset<uint64_t> want;
    for (uint64_t k = 0; k < 10; k++) want.insert(k);
    CHECK(seen == want, "validation split over %d ranks", world);
  }
  // a bad token is found when its shard is loaded, and named
  {
    std::vector<uint16_t> t(300, 7);
    t[123] = 60000;
    const std::string bad = dir + "/bad.bin";
    shard::write_shard(bad, t);
    data::TokenStream sb({bad}, L, 50257, true);
    try {
      sb.sequence(0, buf.data());
      CHECK(false, "bad token not found");
    } catch (const shard::ShardError& e) {
      CHECK(std::string(e.what()).find("bad.bin") != std::string::npos && std::string(e.what()).find("60000") != std::string::npos,
            "%s", e.what());
    }
    try {
      data::TokenStream sm({dir + "/missing.bin"}, L, 50257, true);
      CHECK(false, "missing shard not found");
    } catch (const shard::ShardError& e) {
      CHECK(std::string(e.what()).find("missing.bin") != std::string::npos, "%s", e.what());
    }
  }

  // the run log
  const std::string log = dir + "/run.txt";
  {
    train::RunLog rl(log, true);
    rl.config("{\"event\": \"config\", \"seed\": 1}");
    for (int st = 0; st <= 20; st++) {
      const double t = st <= 10 ? 0.0 : (st - 10) * 150.0 + 0.4;
      rl.step(st, 20, t, st % 10 == 0 ? 5.0 - st * 0.1 : NAN, 6.0 - st * 0.05);
    }
  }
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  CHECK(lines.size() == 21, "%zu lines", lines.size());
  CHECK(lines.size() > 20 && lines[0] == "step:0/20 val_loss:5.0000 train_loss:6.0000 train_time:0ms step_avg:nanms", "%s",
        lines[0].c_str());
  CHECK(lines.size() > 20 && lines[13] == "step:13/20 train_loss:5.3500 train_time:450ms step_avg:150.13ms", "%s", lines[13].c_str());
  CHECK(lines.size() > 20 && lines[20] == "step:20/20 val_loss:3.0000 train_loss:5.0000 train_time:1500ms step_avg:150.04ms", "%s",
        lines[20].c_str());
  std::ifstream js(train::RunLog::jsonl_path(log));
  std::string first;
  std::getline(js, first);
  CHECK(first == "{\"event\": \"config\", \"seed\": 1}", "%s", first.c_str());
  const char* py = std::getenv("PYTHON");
  if (py) {  // the ablation parser reads the trainer's log
    std::string cmd = std::string(py) + " scripts/speedrun_logs.py " + log + " | grep -c ',val,'";
    FILE* p = popen(cmd.c_str(), "r");
    int vals = -1;
    if (p && std::fscanf(p, "%d", &vals) == 1) pclose(p);
    CHECK(vals == 3, "speedrun_logs.py found %d validation rows in the trainer's log, want 3", vals);
  }
  std::system(("rm -rf " + dir).c_str());
  return test_summary("loader-log");
}
