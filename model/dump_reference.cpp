// model_dump: writes the fp64 reference model's inputs and results on a tiny configuration, for
// an independent implementation to compare against (tests/torch_model_check.py):
//   DIR/manifest.json  configuration, tensor names, offsets and shapes, tokens, targets, doc ids,
//                      loss
//   DIR/params.f64, DIR/grad.f64, DIR/logits.f64   raw little-endian float64
// DIR must not exist yet, or be an empty folder: the files are written into a hidden folder
// beside it that is renamed into place whole at the end, so files already there are never changed
// and a failed dump (a full disk) leaves nothing.
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>

#include "attention/mask.h"
#include "model/optimizer_reference.h"
#include "model/reference_model.h"

namespace fs = std::filesystem;

static void write_raw(const std::string& path, const std::vector<double>& x) {
  FILE* f = std::fopen(path.c_str(), "wb");
  const bool ok = f && std::fwrite(x.data(), sizeof(double), x.size(), f) == x.size();
  if (!(f && std::fclose(f) == 0 && ok))  // a full disk shows at the write or at the close
    throw std::runtime_error("cannot write " + path + " (disk full?)");
}

// Why the dump may not go to out, or "" when it may: out must be new or an empty folder (not a
// link), in a folder that exists.
static std::string refuse_out(const fs::path& out, const std::string& given) {
  if (out.empty() || out == "." || out == ".." || out == out.root_path())
    return "'" + given + "' cannot be replaced: name a new folder for the dump";
  struct stat st;
  if (lstat(out.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return given + " exists and is not a folder: name a new folder for the dump";
    std::error_code ec;
    if (!fs::is_empty(out, ec) || ec)
      return given + " is not empty: model_dump writes a new folder, so that files already there are never changed; name a new one";
  }
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  if (stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return parent.string() + ": no such folder to hold " + given;
  return "";
}

static std::string dump(const std::string& dir);

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: model_dump DIR (a new folder, or an empty one)\n");
    return 2;
  }
  const std::string given = argv[1];
  fs::path out = fs::path(given).lexically_normal();
  if (!out.has_filename() && out.has_parent_path() && out != out.root_path()) out = out.parent_path();  // "dir/" -> "dir"
  const std::string why = refuse_out(out, given);
  if (!why.empty()) {
    std::fprintf(stderr, "model_dump: error: %s\n", why.c_str());
    return 2;
  }
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::string staging = (parent / ("." + out.filename().string() + ".partial-XXXXXX")).string();
  if (!mkdtemp(&staging[0])) {
    std::fprintf(stderr, "model_dump: error: cannot write in %s (%s)\n", parent.c_str(), std::strerror(errno));
    return 1;
  }
  try {
    const std::string summary = dump(staging);
    // into place: rename() replaces only a missing or empty folder, so one filled meanwhile is not touched
    if (std::rename(staging.c_str(), out.c_str()) != 0)
      throw std::runtime_error("cannot move the dump into " + given + " (" + std::strerror(errno) + ")");
    std::printf("model_dump: %s -> %s\n", summary.c_str(), given.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove_all(staging, ec);  // our own staging folder
    std::fprintf(stderr, "model_dump: error: %s\n", e.what());
    return 1;
  }
}

// Writes the dump's files into dir; returns the line to report (the loss, the parameter count).
static std::string dump(const std::string& dir) {
  model_ref::Config cfg;
  cfg.vocab = 64;
  cfg.width = 32;
  cfg.heads = 2;
  cfg.layers = 4;
  cfg.hidden = 128;
  const int T = 300, kBos = 0;
  std::mt19937 rng(21);
  std::vector<int> tokens(T), targets(T);
  for (int t = 0; t < T; t++) tokens[t] = 1 + rng() % 63;
  for (int t : {0, 50, 51, 170, 260}) tokens[t] = kBos;
  for (int t = 0; t < T; t++) targets[t] = rng() % 64;
  std::vector<int32_t> doc(T);  // written out for the outside check; the reference computes its own
  attn::doc_ids_from_tokens(tokens.data(), T, doc.data(), kBos);
  cfg.mask.causal = true;
  cfg.mask.window = 2;  // blocks of 128: this block and the one before
  cfg.mask.blocks = true;
  cfg.mask.documents = true;
  cfg.mask.bos = kBos;
  model_ref::Params p(cfg);
  p.init(7, /*zero_init_outputs=*/false);
  std::uniform_real_distribution<double> u(-0.8, 1.2);
  for (auto& t : p.tensors)
    if (t.name.find("lambda") != std::string::npos || t.name == "skip")
      for (size_t i = 0; i < t.size(); i++) p.data[t.offset + i] = u(rng);
  std::vector<double> grad, logits;
  const double loss = model_ref::forward_backward(p, tokens, targets, &grad, &logits);
  write_raw(dir + "/params.f64", p.data);
  // three optimiser steps on the same batch, on a short schedule where the learning-rate
  // multiplier and the Muon momentum both change: multipliers 1, 1, 2/3; momenta 0.85, 0.9, 0.95
  model_ref::Params stepped = p;
  model_ref::OptimizerState state;
  model_ref::Schedule sched;
  sched.steps = 4;
  sched.cooldown = 3;
  sched.momentum_warmup = 2;
  std::vector<double> losses;
  for (int step = 0; step < 3; step++) {
    std::vector<double> g;
    losses.push_back(model_ref::forward_backward(stepped, tokens, targets, &g));
    model_ref::optimizer_step(stepped, g, state, step, sched);
  }
  write_raw(dir + "/params_after3.f64", stepped.data);
  write_raw(dir + "/grad.f64", grad);
  write_raw(dir + "/logits.f64", logits);
  const std::string manifest = dir + "/manifest.json";
  FILE* f = std::fopen(manifest.c_str(), "w");
  if (!f) throw std::runtime_error("cannot write " + manifest);
  std::fprintf(f, "{\"vocab\": %d, \"width\": %d, \"heads\": %d, \"layers\": %d, \"hidden\": %d, \"eps\": %.17g,\n",
               cfg.vocab, cfg.width, cfg.heads, cfg.layers, cfg.hidden, cfg.eps);
  std::fprintf(f, " \"mask\": {\"causal\": %d, \"window\": %d, \"bidir\": %d, \"blocks\": %d},\n", cfg.mask.causal,
               cfg.mask.window, cfg.mask.bidir, cfg.mask.blocks);
  std::fprintf(f, " \"loss\": %.17g, \"step_losses\": [%.17g, %.17g, %.17g],\n", loss, losses[0], losses[1], losses[2]);
  std::fprintf(f, " \"schedule\": {\"steps\": %d, \"cooldown\": %d, \"momentum_warmup\": %d},\n \"tensors\": [", sched.steps,
               sched.cooldown, sched.momentum_warmup);
  for (size_t i = 0; i < p.tensors.size(); i++)
    std::fprintf(f, "%s{\"name\": \"%s\", \"offset\": %zu, \"rows\": %zu, \"cols\": %zu}", i ? ", " : "",
                 p.tensors[i].name.c_str(), p.tensors[i].offset, p.tensors[i].rows, p.tensors[i].cols);
  auto ints = [&](const char* name, const auto& v, bool last) {
    std::fprintf(f, "],\n \"%s\": [", name);
    for (size_t i = 0; i < v.size(); i++) std::fprintf(f, "%s%d", i ? ", " : "", (int)v[i]);
    if (last) std::fprintf(f, "]}\n");
  };
  ints("tokens", tokens, false);
  ints("targets", targets, false);
  ints("doc_ids", doc, true);
  const bool failed = std::ferror(f);
  if (std::fclose(f) != 0 || failed) throw std::runtime_error("cannot write " + manifest + " (disk full?)");
  char b[96];
  std::snprintf(b, sizeof(b), "loss %.12f, %zu parameters", loss, p.data.size());
  return b;
}
