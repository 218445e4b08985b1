// The data loader (data/dataloader.h) and the run log (train/run_log.h):
//  - sequence k of the stream is the window the header comment defines, across shards, with
//    short tails skipped and cycling (or an error past the end without cycling);
//  - for world sizes 1, 2, 4, 8 a step uses the same 8 sequences, no two ranks share one;
//  - validation is split over ranks without overlap or loss;
//  - a corrupt shard is named when loaded, and so is one replaced during the run;
//  - the reported mean losses count only sequences that keep a target, and a stream that keeps
//    none is found;
//  - the log's lines are the record's format, and scripts/speedrun_logs.py reads them back;
//  - a log is created new (never appended to), names its run, and a failed write is an error.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "common/files.h"
#include "common/sha256.h"
#include "data/dataloader.h"
#include "data/manifest.h"
#include "tests/check.h"
#include "train/loss_mean.h"
#include "train/options.h"
#include "train/run_log.h"

#include <nlohmann/json.hpp>

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
    try {  // the first shard is checked whole when the stream is built
      data::TokenStream first({bad}, L, 50257, true);
      CHECK(false, "bad token in the first shard not found when the stream was built");
    } catch (const shard::ShardError& e) {
      CHECK(std::string(e.what()).find("bad.bin") != std::string::npos, "%s", e.what());
    }
    data::TokenStream sb({files[0], bad}, L, 50257, true);  // a later one when it is loaded
    try {
      sb.sequence(sb.sequences_per_pass() - 1, buf.data());
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

  // a shard replaced during a run is checked again when it is loaded: a shorter or longer one is
  // refused, naming it (its sequences were counted from the first), never read past its end
  {
    auto shard_of = [&](const std::string& name, int n, int seed) {
      std::vector<uint16_t> t(n);
      for (int j = 0; j < n; j++) t[j] = (uint16_t)((seed * 7919 + j * 31) % 50000);
      shard::write_shard(dir + "/" + name, t);
      return t;
    };
    shard_of("swap_a.bin", 1000, 1);
    const auto b0 = shard_of("swap_b.bin", 500, 2);
    data::TokenStream sw({dir + "/swap_a.bin", dir + "/swap_b.bin"}, L, 50257, true);  // 15 + 7 sequences
    sw.sequence(0, buf.data());  // swap_a loaded
    // sequence k refused, the message naming the shard and holding word
    auto refused = [&](uint64_t k, const char* what, const char* name, const char* word = "replaced") {
      try {
        sw.sequence(k, buf.data());
        CHECK(false, "%s: sequence %llu read without an error", what, (unsigned long long)k);
      } catch (const shard::ShardError& e) {
        CHECK(std::string(e.what()).find(name) != std::string::npos && std::string(e.what()).find(word) != std::string::npos,
              "%s: %s", what, e.what());
      }
    };
    shard_of("swap_b.bin", 100, 3);
    refused(21, "a shorter shard", "swap_b.bin");
    refused(21, "a shorter shard, asked again", "swap_b.bin");
    shard_of("swap_b.bin", 5000, 4);
    refused(15, "a longer shard", "swap_b.bin");
    shard_of("swap_b.bin", 500, 5);  // the same size, other tokens: known by its SHA-256, not its size
    refused(21, "a same-size replacement", "swap_b.bin", "SHA-256");
    shard::write_shard(dir + "/swap_b.bin", b0);  // the original contents back: read again
    sw.sequence(21, buf.data());
    CHECK(std::equal(buf.begin(), buf.end(), b0.begin() + 6 * L), "the restored shard is read");
    shard_of("swap_a.bin", 200, 6);  // the first shard, replaced while the second is loaded
    refused(22 + 3, "the first shard, shorter, on the next pass", "swap_a.bin");
    std::vector<uint16_t> bad(1000, 7);
    bad[999] = 60000;
    shard::write_shard(dir + "/swap_a.bin", bad);
    refused(0, "a replaced shard's bad token id", "swap_a.bin", "60000");
    std::filesystem::remove(dir + "/swap_a.bin");
    try {
      sw.sequence(0, buf.data());
      CHECK(false, "a removed shard not found");
    } catch (const shard::ShardError& e) {
      CHECK(std::string(e.what()).find("swap_a.bin") != std::string::npos, "%s", e.what());
    }
  }

  // a shard whose contents differ from its folder's manifest (data/manifest.h) is refused when
  // the loader is built, naming the file, even at the same size; the stream's digest is of the
  // shards' contents in order, whatever their names
  {
    const std::string md = dir + "/manifested";
    std::filesystem::create_directories(md);
    std::vector<uint16_t> t(700);
    for (int j = 0; j < 700; j++) t[j] = (uint16_t)(j * 13 % 50000);
    shard::write_shard(md + "/m_000.bin", t);
    const std::string bytes = files::read_regular(md + "/m_000.bin", 1 << 20, "shard");
    manifest::write(md, {{"m_000.bin", t.size(), 0, sha256::hex(bytes)}});
    data::TokenStream fine({md + "/m_000.bin"}, L, 50257, false);  // as written: accepted
    CHECK(fine.shard_digests().size() == 1 && fine.shard_digests()[0] == sha256::hex(bytes), "the shard's digest is its file's SHA-256");
    std::filesystem::copy_file(md + "/m_000.bin", dir + "/renamed.bin");
    CHECK(data::TokenStream({dir + "/renamed.bin"}, L, 50257, false).digest() == fine.digest() && fine.digest().size() == 64,
          "the same contents under another name: the same data digest");
    t[100] ^= 1;  // one token changed in place: same size, every id still valid
    shard::write_shard(md + "/m_000.bin", t);
    try {
      data::TokenStream changed({md + "/m_000.bin"}, L, 50257, false);
      CHECK(false, "a shard changed in place after its manifest was written was accepted");
    } catch (const shard::ShardError& e) {
      CHECK(std::string(e.what()).find("m_000.bin") != std::string::npos && std::string(e.what()).find("SHA-256") != std::string::npos &&
                std::string(e.what()).find("manifest.tsv") != std::string::npos,
            "%s", e.what());
    }
    std::filesystem::remove(md + "/manifest.tsv");  // without a manifest: read, and known as other data
    CHECK(data::TokenStream({md + "/m_000.bin"}, L, 50257, false).digest() != fine.digest(), "one token changed: another data digest");
  }

  // the reported means (train/loss_mean.h): over the sequences that keep a target; with every
  // sequence keeping one, the plain mean to the bit; none keeping one: empty, never 0
  {
    std::mt19937 r(3);
    std::vector<double> losses(37);
    for (double& l : losses) l = 2.0 + (r() % 100000) * 1e-5;
    train::LossMean all;
    all.add(losses, std::vector<int>(losses.size(), 64));
    double old_sum = 0;  // the plain mean as it was always computed: the sum in order, over the count
    for (double l : losses) old_sum += l;
    CHECK(all.mean() == old_sum / (double)losses.size() && all.parts[1] == 37, "every sequence kept: not the plain mean");
    train::LossMean some;
    some.add(std::vector<double>{3.0, 0.0, 5.0, 0.0}, std::vector<int>{10, 0, 1, 0});
    CHECK(some.mean() == 4.0 && some.parts[1] == 2, "sequences without a target pulled the mean: %g", some.mean());
    train::LossMean none;
    none.add(std::vector<double>{0.0, 0.0}, std::vector<int>{0, 0});
    CHECK(none.empty() && std::isnan(none.mean()), "no sequence kept a target, yet a mean of %g", none.mean());
    try {
      none.add(std::vector<double>{1.0}, std::vector<int>{});
      CHECK(false, "losses and sequences of different counts accepted");
    } catch (const std::logic_error&) {
    }
    // a stream whose documents all fit inside the prefix keeps no target; one longer document does
    std::vector<uint16_t> shortdocs(64 * 6 + 1);
    for (size_t j = 0; j < shortdocs.size(); j++) shortdocs[j] = j % 4 == 0 ? 50256 : 100 + j % 4;  // documents of 4 tokens
    shard::write_shard(dir + "/short_docs.bin", shortdocs);
    data::TokenStream sd({dir + "/short_docs.bin"}, L, 50257, false);
    model::MaskConfig m;
    m.documents = true;
    m.prefix = 8;
    CHECK(train::first_sequence_keeping_targets(sd, 0, sd.sequences_per_pass(), m) == sd.sequences_per_pass(),
          "documents of 4 tokens inside a prefix of 8 keep a target");
    m.prefix = 3;
    CHECK(train::first_sequence_keeping_targets(sd, 0, sd.sequences_per_pass(), m) == 0, "a prefix of 3: each document's third target is kept");
    m.prefix = 8;
    for (int j = 3 * L + 1; j < 3 * L + 20; j++) shortdocs[j] = 7;  // sequence 3 holds a document of 20 tokens
    shard::write_shard(dir + "/short_docs.bin", shortdocs);
    data::TokenStream sd2({dir + "/short_docs.bin"}, L, 50257, false);
    CHECK(train::first_sequence_keeping_targets(sd2, 0, sd2.sequences_per_pass(), m) == 3, "the sequence with a long document not found");
    CHECK(train::first_sequence_keeping_targets(sd2, 4, sd2.sequences_per_pass(), m) == sd2.sequences_per_pass(),
          "the search looked before its start");
    m.documents = false;  // one document a sequence: prefix < T always leaves targets
    CHECK(train::first_sequence_keeping_targets(sd, 0, sd.sequences_per_pass(), m) == 0, "without the document mask");
  }

  // the run log
  const std::string log = dir + "/run.txt";
  {
    train::RunLog rl(log, true);
    rl.config("{\"event\": \"config\", \"seed\": 1}");
    for (int st = 0; st <= 20; st++) {
      const double t = st <= 10 ? 0.0 : (st - 10) * 150.0 + 0.4;
      rl.step(st, 20, t, st % 10 == 0 ? std::optional<double>(5.0 - st * 0.1) : std::nullopt, 6.0 - st * 0.05);
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
  if (py) {  // the ablation parser reads the trainer's log (run without a shell: argv, output to a file)
    const std::string csv = dir + "/steps.csv";
    std::vector<std::string> args = {py, "scripts/speedrun_logs.py", log};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(&a[0]);
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, csv.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int status = -1;
    if (posix_spawnp(&pid, py, &fa, nullptr, argv.data(), environ) == 0) waitpid(pid, &status, 0);
    posix_spawn_file_actions_destroy(&fa);
    std::ifstream in(csv);
    int vals = 0;
    for (std::string l; std::getline(in, l);) vals += l.find(",val,") != std::string::npos;
    CHECK(status == 0 && vals == 3, "speedrun_logs.py found %d validation rows in the trainer's log, want 3 (status %d)", vals, status);
  }

  // a diverged loss (NaN, +-inf) is written as diverged in the text and the JSON lines alike,
  // never as a missing value (a second bare step line, or null)
  {
    const std::string dl = dir + "/diverged.txt";
    {
      train::RunLog rl(dl, true);
      rl.config("{\"event\": \"config\"}");
      rl.step(5, 20, 0, NAN);
      rl.step(6, 20, 0, std::nullopt, INFINITY);
      rl.step(7, 20, 0, -INFINITY, 1.5);
    }
    std::ifstream in(dl);
    std::vector<std::string> got;
    for (std::string l; std::getline(in, l);) got.push_back(l);
    CHECK(got.size() == 3 && got[0] == "step:5/20 val_loss:diverged(nan) train_time:0ms step_avg:nanms" &&
              got[1] == "step:6/20 train_loss:diverged(inf) train_time:0ms step_avg:nanms" &&
              got[2] == "step:7/20 val_loss:diverged(-inf) train_loss:1.5000 train_time:0ms step_avg:nanms",
          "diverged text lines: %s", got.empty() ? "" : got[0].c_str());
    std::ifstream js(train::RunLog::jsonl_path(dl));
    std::vector<nlohmann::json> ev;
    for (std::string l; std::getline(js, l);) ev.push_back(nlohmann::json::parse(l));
    CHECK(ev.size() == 4 && ev[1]["event"] == "val" && ev[1]["val_loss"] == "diverged(nan)" && ev[2]["event"] == "step" &&
              ev[2]["train_loss"] == "diverged(inf)" && ev[3]["val_loss"] == "diverged(-inf)" && ev[3]["train_loss"] == 1.5,
          "diverged JSON lines");
  }

  // one log, one run: the files are created new, named by the run's id
  {
    const std::string named = dir + "/named.txt";
    train::Options opt;
    opt.train_data = "a\"b\\c\nd '$(x)' \xff";  // quotes, a backslash, a newline and a byte that is not UTF-8
    {
      train::RunLog rl(named, true, "00ff00ff00ff00ff", "abc123");
      rl.config(train::config_json(opt, "00ff00ff00ff00ff", 1, "GPU \"x\"", "abc123"));
      rl.step(0, 5, 0, 4.0);
    }
    std::ifstream in(named);
    std::string first;
    std::getline(in, first);
    CHECK(first == "run_id:00ff00ff00ff00ff train_gpt abc123", "%s", first.c_str());
    std::ifstream js(train::RunLog::jsonl_path(named));
    std::getline(js, first);
    try {
      const auto cfg = nlohmann::json::parse(first);
      CHECK(cfg.at("train_data") == "a\"b\\c\nd '$(x)' \xef\xbf\xbd" && cfg.at("gpu") == "GPU \"x\"" && cfg.at("seed") == 1337 &&
                cfg.at("run_id") == "00ff00ff00ff00ff" && cfg.at("window_mask") == "uni" && !cfg.contains("fault"),
            "configuration read back: %s", first.c_str());
    } catch (const std::exception& e) {
      CHECK(false, "the configuration line is not JSON (%s): %s", e.what(), first.c_str());
    }
    CHECK(train::fingerprint(opt) ==
              "layers=4 width=256 heads=2 hidden=1024 vocab=50304 seq_len=8192 seqs_per_step=8 steps=300 window_blocks=0 "
              "window_mask=uni window_granularity=block causal=1 doc_mask=1 seed=1337",
          "fingerprint: %s", train::fingerprint(opt).c_str());
    CHECK(!train::RunLog::refuse_existing(named).empty(), "an existing log must be refused");
    CHECK(train::RunLog::refuse_existing(dir + "/fresh.txt").empty(), "a new log must be allowed");
    try {
      train::RunLog again(named, true, "1111111111111111", "abc123");
      CHECK(false, "a second run into the same log was accepted");
    } catch (const std::runtime_error& ex) {
      CHECK(std::string(ex.what()).find("exists") != std::string::npos, "%s", ex.what());
    }
    std::ifstream in2(named);
    std::getline(in2, first);
    CHECK(first == "run_id:00ff00ff00ff00ff train_gpt abc123", "the refused run changed the first run's log: %s", first.c_str());
    CHECK(train::RunLog::new_run_id() != train::RunLog::new_run_id() && train::RunLog::new_run_id().size() == 16, "run ids");
  }
  // with the build's source digest, the first line names it after the commit
  {
    const std::string named = dir + "/sourced.txt", digest(64, 'e');
    { train::RunLog rl(named, true, "00ff00ff00ff00ff", "abc123", digest); }
    std::ifstream in(named);
    std::string first;
    std::getline(in, first);
    CHECK(first == "run_id:00ff00ff00ff00ff train_gpt abc123 source:" + digest, "%s", first.c_str());
  }
  // a full disk while logging is an error, not a silent loss (the file size limit fails writes alike)
  {
    struct rlimit old, small;
    getrlimit(RLIMIT_FSIZE, &old);
    small = {2048, old.rlim_max};
    signal(SIGXFSZ, SIG_IGN);
    bool threw = false;
    try {
      train::RunLog rl(dir + "/full.txt", true, "2222222222222222", "abc");
      setrlimit(RLIMIT_FSIZE, &small);
      for (int st = 0; st < 1000; st++) rl.step(st, 1000, st * 10.0, std::nullopt, 3.0);
    } catch (const std::runtime_error& ex) {
      threw = std::string(ex.what()).find("full.txt") != std::string::npos || std::string(ex.what()).find("full.jsonl") != std::string::npos;
    }
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(threw, "a log write past the size limit must throw, naming the file");
  }
  std::filesystem::remove_all(dir);
  return test_summary("loader-log");
}
