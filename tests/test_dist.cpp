// train/dist.h on the CPU: run under `mpirun -np 3` (tests/run_cpu_tests.sh does when OpenMPI is
// there) and alone. Checks rank and size against OpenMPI's own variables, the node-local rank,
// broadcast from a non-zero root, sums, max and all-gather; then the start gate
// (train/start_gate.h): ranks that agree go on, a rank whose fields differ from rank 0's is named
// with each differing field and both values and every rank leaves with exit code 2, and a
// refusal comes before the comparison. Rank 0 prints the counts summed over every rank.
#include <cstdlib>
#include <string>
#include <tuple>

#include "tests/check.h"
#include "train/dist.h"
#include "train/start_gate.h"

// What rank 0 of a gate printed (every other rank prints nothing), and the gate's result.
static std::pair<int, std::string> gate_pass(const dist::Context& c, int rc, const std::string& message, const train::Agreed& agreed) {
  FILE* out = std::tmpfile();
  const int job = train::StartGate(c, out).pass(rc, message, agreed);
  std::string text(1 << 16, '\0');
  std::rewind(out);
  text.resize(std::fread(&text[0], 1, text.size(), out));
  std::fclose(out);
  return {job, text};
}
static bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int main(int argc, char** argv) {
  dist::Context c;
  try {
    c = dist::init(&argc, &argv);
  } catch (const std::exception& e) {
    std::printf("FAIL dist::init: %s\ndist: 0 passed, 1 failed\n", e.what());
    return 1;
  }
  const char* env_size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const int want_world = env_size ? std::atoi(env_size) : 1;
  CHECK(c.world == want_world, "world %d, launcher says %d", c.world, want_world);
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  CHECK(c.rank == (env_rank ? std::atoi(env_rank) : 0), "rank %d", c.rank);
  CHECK(c.local_rank >= 0 && c.local_rank < c.local_size && c.local_size <= c.world, "local rank %d of %d", c.local_rank,
        c.local_size);
  CHECK(c.mpi == (c.world > 1), "MPI started only under a launcher of several processes");
  CHECK(c.who() == (c.world > 1 ? "rank " + std::to_string(c.rank) + " of " + std::to_string(c.world) : std::string()),
        "who() = '%s'", c.who().c_str());
  // broadcast from the last rank
  char msg[32] = "unset";
  if (c.rank == c.world - 1) std::snprintf(msg, sizeof(msg), "from %d", c.rank);
  dist::broadcast(c, msg, sizeof(msg), c.world - 1);
  CHECK(std::string(msg) == "from " + std::to_string(c.world - 1), "broadcast gave '%s'", msg);
  // sums and max
  double x[2] = {1.0 + c.rank, 0.5};
  dist::sum(c, x, 2);
  CHECK(x[0] == c.world * (c.world + 1) / 2.0 && x[1] == 0.5 * c.world, "sum %g %g", x[0], x[1]);
  CHECK(dist::max(c, 10.0 * c.rank) == 10.0 * (c.world - 1), "max");
  const auto all = dist::gather_all(c, 1000 + (uint64_t)c.rank * c.rank);
  bool ok = (int)all.size() == c.world;
  for (int r = 0; ok && r < c.world; r++) ok = all[r] == 1000 + (uint64_t)r * r;
  CHECK(ok, "gather_all: %zu values", all.size());
  // the start gate: the same fields everywhere go on; the last rank given another --seed (and
  // alone, with one rank, nothing can differ)
  const train::Agreed same = {{"--seed", "1337"}, {"--steps", "300"}, {"--resume", ""}};
  auto [job, text] = gate_pass(c, -1, "", same);
  CHECK(job == -1 && text.empty(), "ranks of one configuration: %d, '%s'", job, text.c_str());
  train::Agreed other = same;
  if (c.rank == c.world - 1 && c.world > 1) other[0].second = "7", other[2].second = "ck.bin";
  std::tie(job, text) = gate_pass(c, -1, "", other);
  const std::string last = "train_gpt: rank " + std::to_string(c.world - 1) + " of " + std::to_string(c.world) + ": ";
  CHECK(job == (c.world > 1 ? 2 : -1), "a rank of another --seed: the job's code %d on rank %d", job, c.rank);
  if (c.rank == 0 && c.world > 1)
    CHECK(has(text, last + "error: its configuration differs from rank 0's: --seed '7' where rank 0 has '1337', --resume 'ck.bin' where "
                           "rank 0 has ''") && !has(text, "--steps") && (c.world < 3 || !has(text, "rank 1 of 3")),
          "rank 0 printed '%s'", text.c_str());
  if (c.rank != 0) CHECK(text.empty(), "rank %d printed '%s'", c.rank, text.c_str());
  // a refusal on any rank comes first (its configuration may be half parsed): its code, its
  // message, no comparison
  std::tie(job, text) = gate_pass(c, c.rank == c.world - 1 ? 1 : -1, "error: no such shard", other);
  CHECK(job == 1, "a refusal and a difference: the refusal's code, got %d", job);
  if (c.rank == 0) CHECK(has(text, "error: no such shard") && !has(text, "differs"), "rank 0 printed '%s'", text.c_str());
  dist::barrier(c);
  double counts[2] = {(double)g_passed, (double)g_failed};
  dist::sum(c, counts, 2);
  if (c.rank == 0) std::printf("%d process(es)\ndist: %d passed, %d failed\n", c.world, (int)counts[0], (int)counts[1]);
  dist::finalize(c);
  return counts[1] ? 1 : 0;
}
