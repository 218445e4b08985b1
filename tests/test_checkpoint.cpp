// Checkpoint files (train/checkpoint.h): round trip to the bit, atomic replacement, and each
// fault named: missing file, not a checkpoint, truncation, a flipped byte (checksum), trailing
// bytes, another configuration; the checkpoint folder checked, made and unmade.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "tests/check.h"
#include "train/checkpoint.h"

static std::string err_of(const std::string& path) {
  try {
    train::read_checkpoint(path);
    return "";
  } catch (const train::CheckpointError& e) {
    return e.what();
  }
}
static bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

int main() {
  char tmpl[] = "/tmp/ckpt_test_XXXXXX";
  const std::string dir = mkdtemp(tmpl), path = dir + "/run.ckpt";
  train::Checkpoint c;
  c.config = "layers=4 width=256 seed=7";
  c.step = 123;
  c.adam_steps = 123;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const char* name : {"master", "adam_m", "adam_v", "muon_buf"}) {
    std::vector<float> v(10007);
    for (auto& x : v) x = nd(rng), x = std::string(name) == "adam_v" ? x * x : x;  // second moments: squares
    c.blobs[name] = v;
  }
  c.blobs["master"][5] = -0.f;  // bits, not values: -0 must come back as -0
  train::write_checkpoint(path, c);
  CHECK(!std::fopen((path + ".tmp").c_str(), "rb"), "temporary file left behind");
  train::Checkpoint r = train::read_checkpoint(path);
  CHECK(r.config == c.config && r.step == 123 && r.adam_steps == 123 && r.blobs == c.blobs, "round trip changed the checkpoint");
  CHECK(std::signbit(r.blobs["master"][5]), "-0 lost");
  // overwrite replaces atomically
  c.step = c.adam_steps = 124;
  train::write_checkpoint(path, c);
  CHECK(train::read_checkpoint(path).step == 124, "second write not visible");
  {  // something left at the temporary name is never opened: a link there would have its target
     // overwritten, a FIFO would wait for a reader for ever (SIGALRM ends this test then)
    const std::string keep = dir + "/keep.txt", linked = dir + "/linked.ckpt";
    std::ofstream(keep) << "another file\n";
    std::filesystem::create_symlink(keep, linked + ".tmp");
    train::write_checkpoint(linked, c);
    std::ifstream k(keep);
    std::string line;
    std::getline(k, line);
    CHECK(line == "another file", "write_checkpoint wrote through a link at its temporary name: %s now holds '%.40s'", keep.c_str(),
          line.c_str());
    CHECK(train::read_checkpoint(linked).step == 124, "the checkpoint beside a link at its temporary name");
    const std::string piped = dir + "/piped.ckpt";
    mkfifo((piped + ".tmp").c_str(), 0600);
    alarm(30);
    train::write_checkpoint(piped, c);
    alarm(0);
    CHECK(train::read_checkpoint(piped).step == 124, "the checkpoint beside a FIFO at its temporary name");
  }

  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  auto write_bytes = [&](const std::string& name, const std::string& b) {
    std::ofstream(dir + "/" + name, std::ios::binary) << b;
    return dir + "/" + name;
  };
  std::string e = err_of(dir + "/missing.ckpt");
  CHECK(has(e, "missing.ckpt") && has(e, "cannot open"), "%s", e.c_str());
  e = err_of(write_bytes("text.ckpt", "hello, this is not a checkpoint at all"));
  CHECK(has(e, "text.ckpt") && has(e, "not a train_gpt checkpoint"), "%s", e.c_str());
  e = err_of(write_bytes("short.ckpt", bytes.substr(0, bytes.size() / 2)));
  CHECK(has(e, "short.ckpt") && has(e, "truncated"), "%s", e.c_str());
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;
  e = err_of(write_bytes("flip.ckpt", flipped));
  CHECK(has(e, "flip.ckpt") && has(e, "checksum"), "%s", e.c_str());
  e = err_of(write_bytes("long.ckpt", bytes + "x"));
  CHECK(has(e, "long.ckpt") && has(e, "trailing"), "%s", e.c_str());
  try {
    train::check_same_config(r, "layers=4 width=512 seed=7", path);
    CHECK(false, "another configuration accepted");
  } catch (const train::CheckpointError& ex) {
    CHECK(has(ex.what(), "another configuration") && has(ex.what(), "width=512") && has(ex.what(), "width=256"), "%s", ex.what());
  }
  try {
    train::write_checkpoint(dir + "/no/such/dir/x.ckpt", c);
    CHECK(false, "write into a missing directory accepted");
  } catch (const train::CheckpointError& ex) {
    CHECK(has(ex.what(), "x.ckpt"), "%s", ex.what());
  }
  // a header that claims a blob larger than the file is refused before anything is allocated:
  // magic, version, config "x", step, adam steps, 1 blob named "m" of 2^39 floats (2 TiB), no data
  {
    std::string b("TGPTCKPT", 8);
    auto put = [&](const void* p, size_t n) { b.append((const char*)p, n); };
    const uint32_t version = 1, nblobs = 1, nl = 1;
    const uint64_t clen = 1, count = 1ull << 39;
    const int64_t step = 1, adam = 1;
    put(&version, 4), put(&clen, 8), b += "x", put(&step, 8), put(&adam, 8), put(&nblobs, 4), put(&nl, 4), b += "m", put(&count, 8);
    e = err_of(write_bytes("huge.ckpt", b));
    CHECK(has(e, "huge.ckpt") && has(e, "blob") && has(e, "left in the file"), "%s", e.c_str());
  }
  // every number read is checked against its range, naming the file and the field, though the
  // checksum holds (the writer wrote them so): the step, the Adam step count (one a step),
  // the blob count, and the blobs' floats (finite; Adam's second moments not negative)
  {
    const auto refused = [&](const char* name, const char* field, const std::function<void(train::Checkpoint&)>& edit) {
      train::Checkpoint bad = c;
      edit(bad);
      train::write_checkpoint(dir + "/" + name, bad);
      const std::string e = err_of(dir + "/" + name);
      CHECK(has(e, name) && has(e, field) && has(e, "outside its range"), "%s: %s", name, e.c_str());
    };
    refused("adam_neg.ckpt", "field adam_steps is -5", [](train::Checkpoint& b) { b.adam_steps = -5; });
    refused("adam_more.ckpt", "field adam_steps is 125", [](train::Checkpoint& b) { b.adam_steps = 125; });
    refused("step_neg.ckpt", "field step is -1", [](train::Checkpoint& b) { b.step = b.adam_steps = -1; });
    refused("step_huge.ckpt", "field step is 1099511627776", [](train::Checkpoint& b) { b.step = b.adam_steps = 1ll << 40; });
    refused("nan_master.ckpt", "field master[7] is nan", [](train::Checkpoint& b) { b.blobs["master"][7] = std::nanf(""); });
    refused("inf_m.ckpt", "field adam_m[0] is inf", [](train::Checkpoint& b) { b.blobs["adam_m"][0] = INFINITY; });
    refused("neg_v.ckpt", "field adam_v[9] is -1", [](train::Checkpoint& b) { b.blobs["adam_v"][9] = -1.f; });
    refused("noname.ckpt", "field blob 0 name length is 0", [](train::Checkpoint& b) { b.blobs[""] = {1.f}; });
    train::Checkpoint zero = c;  // the bounds themselves: a checkpoint of step 0, and Adam's moments at 0
    zero.step = zero.adam_steps = 0;
    zero.blobs["adam_v"].assign(zero.blobs["adam_v"].size(), 0.f);
    train::write_checkpoint(dir + "/zero.ckpt", zero);
    CHECK(err_of(dir + "/zero.ckpt").empty(), "step 0 with zero moments refused: %s", err_of(dir + "/zero.ckpt").c_str());
    std::string b("TGPTCKPT", 8);  // a blob count past any train_gpt writes: refused before the blobs are read
    auto put = [&](const void* p, size_t n) { b.append((const char*)p, n); };
    const uint32_t version = 2, nblobs = 100000;
    const uint64_t clen = 1, dlen = 0;
    const int64_t step = 1, adam = 1;
    put(&version, 4), put(&clen, 8), b += "x", put(&dlen, 8), put(&step, 8), put(&adam, 8), put(&nblobs, 4);
    e = err_of(write_bytes("many.ckpt", b));
    CHECK(has(e, "many.ckpt") && has(e, "field blob count is 100000"), "%s", e.c_str());
  }
  // not a regular file: a directory, a FIFO (which would block a plain open forever)
  e = err_of(dir);
  CHECK(has(e, "is a directory"), "%s", e.c_str());
  const std::string fifo = dir + "/pipe.ckpt";
  if (mkfifo(fifo.c_str(), 0600) == 0) {
    e = err_of(fifo);
    CHECK(has(e, "pipe.ckpt") && has(e, "FIFO"), "%s", e.c_str());
  }

  // the checkpoint folder: checked without making anything, made once, unmade while empty
  {
    namespace fs = std::filesystem;
    const std::string nested = dir + "/runs/a/b/";
    CHECK(train::unwritable_checkpoint_dir(nested) == "" && !fs::exists(dir + "/runs"), "checking a new folder made something");
    const auto made = train::make_checkpoint_dir(nested);
    CHECK(made.size() == 3 && fs::is_directory(dir + "/runs/a/b") && made.front() == dir + "/runs", "made %zu folders", made.size());
    CHECK(train::make_checkpoint_dir(nested).empty(), "an existing folder reported as made");
    CHECK(train::unwritable_checkpoint_dir(nested) == "" && fs::is_empty(dir + "/runs/a/b"), "the probe file was left behind");
    std::ofstream(dir + "/runs/a/keep.txt") << "x";
    train::remove_made_dirs(made);  // b goes; a holds a file now and stays, and so does runs
    CHECK(!fs::exists(dir + "/runs/a/b") && fs::exists(dir + "/runs/a/keep.txt"), "removed too much or too little");
    std::string e = train::unwritable_checkpoint_dir(dir + "/runs/a/keep.txt/sub");
    CHECK(has(e, "keep.txt exists and is not a folder"), "%s", e.c_str());
    e = train::unwritable_checkpoint_dir(dir + "/runs/a/keep.txt");
    CHECK(has(e, "keep.txt exists and is not a folder"), "%s", e.c_str());
    try {
      train::make_checkpoint_dir(dir + "/runs/a/keep.txt/sub");
      CHECK(false, "a folder under a file was made");
    } catch (const train::CheckpointError& ce) {
      CHECK(has(ce.what(), "--checkpoint-dir"), "%s", ce.what());
    }
    const std::string ro = dir + "/ro";
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    auto can_create = [](const std::string& d) {
      std::FILE* f = std::fopen((d + "/probe").c_str(), "w");
      if (f) std::fclose(f), std::remove((d + "/probe").c_str());
      return f != nullptr;
    };
    const std::string unwritable = can_create(ro) ? "/sys/kernel" : ro;  // root writes anyway: then a read-only mount
    if (fs::is_directory(unwritable) && !can_create(unwritable)) {
      e = train::unwritable_checkpoint_dir(unwritable);
      CHECK(has(e, ("cannot write checkpoints in " + unwritable).c_str()), "%s", e.c_str());
      e = train::unwritable_checkpoint_dir(unwritable + "/new/deeper");
      CHECK(has(e, ("cannot write checkpoints under " + unwritable).c_str()), "%s", e.c_str());
    }
    fs::permissions(ro, fs::perms::owner_all);
  }
  std::filesystem::remove_all(dir);
  return test_summary("checkpoint");
}
