// The kept intervals of the rows a block owns, computed without long chains of dependent loads.
//
// A block owns the positions [p0, p0 + P) of one side (queries in the forward and dQ kernels,
// keys in dK/dV). For each owned position p, the other side's kept positions form one interval
// (mask.h row_keys / col_queries), and the block's whole walk is bounded by key_range /
// query_range. With documents these need the first and last position of a document: mask.h
// finds them by binary search, 16 dependent global loads each at T = 65536, several times per
// block: microseconds of latency at the start of every block. Here instead:
//   - the ids of the owned positions go to shared memory (one coalesced load);
//   - the documents that extend past the owned range (those of p0 and of the last position) are
//     found by a warp-wide 32-ary search (32 probes a step: 4 dependent loads at T = 65536);
//   - every other document starts and ends inside the range: a binary search in shared memory.
// Without documents all of it is arithmetic. The results equal mask.h's (the tests check the
// kernels against the fp64 reference; mask.h's functions are checked against it on the CPU).
#pragma once
#include <climits>

#include "attention/mask.h"

namespace attn {

// First position in [lo, hi) whose document id is >= id (hi if none); all 32 lanes of the
// warp call it with the same arguments.
__device__ __forceinline__ int doc_lower_bound_warp(const int32_t* doc, int lo, int hi, int id) {
  const int lane = threadIdx.x & 31;
  while (hi - lo > 32) {
    const int step = (hi - lo + 31) / 32;
    const int pos = lo + lane * step;
    const unsigned m = __ballot_sync(0xffffffffu, pos >= hi || doc[pos] >= id);
    if (m == 0) {
      lo += 31 * step + 1;
    } else {
      const int f = __ffs(m) - 1;
      if (f == 0) return lo;
      const int hi_new = lo + f * step;
      lo += (f - 1) * step + 1;
      hi = hi_new < hi ? hi_new : hi;
    }
  }
  const int pos = lo + lane;
  const unsigned m = __ballot_sync(0xffffffffu, pos >= hi || doc[pos] >= id);
  return m == 0 ? hi : lo + __ffs(m) - 1;
}

// First index in s[0, n) with s[i] >= id (n if none); s nondecreasing.
__device__ __forceinline__ int smem_lower_bound(const int32_t* s, int n, int id) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (s[mid] < id) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// For a block owning [p0, p0 + P) (queries when own_queries, else keys): the range of the
// other side that the block may need (range_lo..range_hi, inclusive, as key_range /
// query_range) and, for the nrows owned positions rows[i], their kept intervals lo[i]..hi[i]
// (as row_keys / col_queries). s_ids: P ints of shared memory. Every thread of the block calls
// it (it holds a barrier).
template <int P, int NROWS>
__device__ __forceinline__ void own_intervals(const MaskBounds& b, int p0, bool own_queries, int32_t* s_ids,
                                              const int (&rows)[NROWS], int (&lo)[NROWS], int (&hi)[NROWS],
                                              int& range_lo, int& range_hi) {
  MaskBounds nd = b;
  nd.doc = nullptr;
  if (own_queries) key_range(nd, p0, p0 + P, range_lo, range_hi);
  else query_range(nd, p0, p0 + P, range_lo, range_hi);
#pragma unroll
  for (int i = 0; i < NROWS; i++) {
    if (own_queries) row_keys(nd, rows[i], lo[i], hi[i]);
    else col_queries(nd, rows[i], lo[i], hi[i]);
  }
  if (!b.doc || p0 >= b.T) return;
  const int last = (p0 + P < b.T ? p0 + P : b.T) - 1;
  for (int i = threadIdx.x; i < P; i += blockDim.x) s_ids[i] = p0 + i <= last ? b.doc[p0 + i] : INT_MAX;
  const int id_first = b.doc[p0], id_last = b.doc[last];
  const int first_start = doc_lower_bound_warp(b.doc, 0, p0 + 1, id_first);
  const int last_end = doc_lower_bound_warp(b.doc, last, b.T, id_last + 1) - 1;
  range_lo = imax(range_lo, first_start);
  range_hi = imin(range_hi, last_end);
  __syncthreads();
#pragma unroll
  for (int i = 0; i < NROWS; i++) {
    const int p = rows[i];
    if (p > last) continue;  // past T: already empty
    const int id = s_ids[p - p0];
    const int start = id == id_first ? first_start : p0 + smem_lower_bound(s_ids, P, id);
    const int end = id == id_last ? last_end : p0 + smem_lower_bound(s_ids, P, id + 1) - 1;
    lo[i] = imax(lo[i], start);
    hi[i] = imin(hi[i], end);
  }
}

}  // namespace attn
