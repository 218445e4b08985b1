// The processes of a data-parallel run: one process per GPU, started by mpirun.
// MPI gives each process its rank, the world size and its rank on its own node (which picks its
// GPU), carries NCCL's unique id from rank 0 to the others, and reduces the few host-side
// numbers (losses, checksums, peak memory). A process not started by mpirun (none of OpenMPI's,
// PMI's or PMIx's variables set) is rank 0 of 1 and never touches MPI, so the trainer runs on
// one GPU without it; a build without MPI (USE_MPI=0) refuses to run under an mpirun of several
// processes rather than train N copies side by side.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dist {

struct Context {
  int rank = 0, world = 1, local_rank = 0, local_size = 1;
  bool mpi = false;  // MPI_Init was called
  std::string who() const;  // "rank R of N" (or "" for a single process)
};

// Starts MPI when launched by mpirun; throws std::runtime_error with the reason on failure.
Context init(int* argc, char*** argv);
void finalize(const Context& c);
// Ends every process of the job now (MPI_Abort), or this one when there is no MPI.
[[noreturn]] void abort_all(const Context& c, int code);

void broadcast(const Context& c, void* data, size_t bytes, int root);
void sum(const Context& c, double* x, int n);           // in place, over all ranks
double max(const Context& c, double x);
std::vector<uint64_t> gather_all(const Context& c, uint64_t x);  // every rank's value, by rank
std::vector<std::string> gather_text(const Context& c, const std::string& text);  // every rank's text, by rank, at rank 0 (elsewhere: none)
void barrier(const Context& c);

}  // namespace dist
