// Checkpoint files (train/checkpoint.h): round trip to the bit, atomic replacement, and each
// fault named: missing file, not a checkpoint, truncation, a flipped byte (checksum), trailing
// bytes, another configuration.
#include <cmath>
#include <cstdio>
#include <fstream>
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
    for (auto& x : v) x = nd(rng);
    c.blobs[name] = v;
  }
  c.blobs["master"][5] = -0.f;  // bits, not values: -0 must come back as -0
  train::write_checkpoint(path, c);
  CHECK(!std::fopen((path + ".tmp").c_str(), "rb"), "temporary file left behind");
  train::Checkpoint r = train::read_checkpoint(path);
  CHECK(r.config == c.config && r.step == 123 && r.adam_steps == 123 && r.blobs == c.blobs, "round trip changed the checkpoint");
  CHECK(std::signbit(r.blobs["master"][5]), "-0 lost");
  // overwrite replaces atomically
  c.step = 124;
  train::write_checkpoint(path, c);
  CHECK(train::read_checkpoint(path).step == 124, "second write not visible");

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
  std::system(("rm -rf " + dir).c_str());
  return test_summary("checkpoint");
}
