// train/dist.h on the CPU: run under `mpirun -np 3` (tests/run_cpu_tests.sh does when OpenMPI is
// there) and alone. Checks rank and size against OpenMPI's own variables, the node-local rank,
// broadcast from a non-zero root, sums, max and all-gather; rank 0 prints the counts summed
// over every rank.
#include <cstdlib>
#include <string>

#include "tests/check.h"
#include "train/dist.h"

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
  dist::barrier(c);
  double counts[2] = {(double)g_passed, (double)g_failed};
  dist::sum(c, counts, 2);
  if (c.rank == 0) std::printf("%d process(es)\ndist: %d passed, %d failed\n", c.world, (int)counts[0], (int)counts[1]);
  dist::finalize(c);
  return counts[1] ? 1 : 0;
}
