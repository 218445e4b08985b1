// MPI behind train/dist.h; without USE_MPI every call is the one-process answer.
#include "train/dist.h"

#include <cstdlib>
#include <stdexcept>

#ifdef USE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only (OpenMPI's C++ bindings warn under -Wextra)
#include <mpi.h>
#endif

namespace dist {

// Launched by mpirun (OpenMPI), or a PMI/PMIx launcher (srun, mpiexec.hydra)?
static int launcher_world_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return std::getenv("PMIX_RANK") ? 2 : 0;  // PMIx without a size variable: ask MPI
}

std::string Context::who() const { return world > 1 ? "rank " + std::to_string(rank) + " of " + std::to_string(world) : ""; }

#ifdef USE_MPI
static void mpi_ok(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw std::runtime_error(std::string("MPI: ") + what + ": " + std::string(msg, len));
  }
}

Context init(int* argc, char*** argv) {
  Context c;
  if (launcher_world_size() <= 1) return c;
  mpi_ok(MPI_Init(argc, argv), "MPI_Init");
  c.mpi = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  mpi_ok(MPI_Comm_rank(MPI_COMM_WORLD, &c.rank), "MPI_Comm_rank");
  mpi_ok(MPI_Comm_size(MPI_COMM_WORLD, &c.world), "MPI_Comm_size");
  MPI_Comm node;
  mpi_ok(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c.rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  mpi_ok(MPI_Comm_rank(node, &c.local_rank), "MPI_Comm_rank (node)");
  mpi_ok(MPI_Comm_size(node, &c.local_size), "MPI_Comm_size (node)");
  MPI_Comm_free(&node);
  return c;
}

void finalize(const Context& c) {
  if (c.mpi) MPI_Finalize();
}

void abort_all(const Context& c, int code) {
  if (c.mpi) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

void broadcast(const Context& c, void* data, size_t bytes, int root) {
  if (c.mpi) mpi_ok(MPI_Bcast(data, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

void sum(const Context& c, double* x, int n) {
  if (c.mpi) mpi_ok(MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
}

double max(const Context& c, double x) {
  if (c.mpi) mpi_ok(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return x;
}

std::vector<uint64_t> gather_all(const Context& c, uint64_t x) {
  std::vector<uint64_t> all(c.world, x);
  if (c.mpi) mpi_ok(MPI_Allgather(&x, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), "MPI_Allgather");
  return all;
}

std::vector<std::string> gather_text(const Context& c, const std::string& text) {
  if (!c.mpi) return {text};
  const int len = (int)text.size();
  std::vector<int> lens(c.rank == 0 ? c.world : 0), offsets(lens.size());
  mpi_ok(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  size_t total = 0;
  for (size_t r = 0; r < lens.size(); r++) offsets[r] = (int)total, total += lens[r];
  std::string all(total, '\0');
  mpi_ok(MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Gatherv");
  std::vector<std::string> out;
  for (size_t r = 0; r < lens.size(); r++) out.push_back(all.substr(offsets[r], lens[r]));
  return out;
}

void barrier(const Context& c) {
  if (c.mpi) mpi_ok(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

#else  // built without MPI

Context init(int*, char***) {
  const int n = launcher_world_size();
  if (n > 1)
    throw std::runtime_error("started by mpirun with " + std::to_string(n) +
                             " processes, but this train_gpt was built without MPI (USE_MPI=0); rebuild with OpenMPI installed");
  return Context{};
}
void finalize(const Context&) {}
void abort_all(const Context&, int code) { std::exit(code); }
void broadcast(const Context&, void*, size_t, int) {}
void sum(const Context&, double*, int) {}
double max(const Context&, double x) { return x; }
std::vector<uint64_t> gather_all(const Context&, uint64_t x) { return {x}; }
std::vector<std::string> gather_text(const Context&, const std::string& text) { return {text}; }
void barrier(const Context&) {}

#endif

}  // namespace dist
