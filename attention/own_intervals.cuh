// The kept intervals of the rows a block owns, computed without long chains of dependent loads.
//
// A block owns the positions [p0, p0 + P) of one side (queries in the forward and dQ kernels,
// keys in dK/dV). For each owned position p, the other side's kept positions form one interval
// (mask.h row_keys / col_queries), and the block's walk is classified from the intervals of its
// first and last position (mask.h RangeEnds). With documents these need the first and last
// position of a document (and the prefix term its first): mask.h
// finds them by binary search, 16 dependent global loads each at T = 65536, several times per
// block: microseconds of latency at the start of every block. Here instead:
//   - the ids of the owned positions go to shared memory (one coalesced load);
//   - the documents that extend past the owned range (those of p0 and of the last position) are
//     found by a warp-wide 32-ary search (32 probes a step: 4 dependent loads at T = 65536);
//   - every other document starts and ends inside the range: a binary search in shared memory.
// Without documents all of it is arithmetic. With the documents' spans given (MaskDesc::doc_spans,
// attention.h doc_spans) there is no search at all: each thread reads the spans of its rows and of
// the range's two ends, independent loads in one round, and no barrier. The searches had made
// the forward's start a fifth of a block's life on the speedrun's mask (results/attention_design/README.md,
// Loads, stores and the set-up of a block). The results equal mask.h's (the tests check the
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

// For a block owning [p0, p0 + P) (queries when own_queries, else keys): the kept intervals of
// the range's first and last valid position (ends: what TileWalk classifies the other side's
// tiles with, as mask.h range_ends) and, for the nrows owned positions rows[i], their kept
// intervals lo[i]..hi[i] (as row_keys / col_queries; empty past T). s_ids: P ints of shared
// memory. Every thread of the block calls it (it holds a barrier when there are documents and no
// spans).
template <int P, int NROWS>
__device__ __forceinline__ void own_intervals(const MaskBounds& b, int p0, bool own_queries, int32_t* s_ids,
                                              const int (&rows)[NROWS], int (&lo)[NROWS], int (&hi)[NROWS],
                                              RangeEnds& ends) {
  // the interval of position p (< T) given its document [start, end]: mask.h, one place per term
  auto interval = [&](int p, int start, int end, int& l, int& h) {
    if (own_queries) row_keys_in(b, p, start, end, l, h);
    else col_queries_in(b, p, start, end, l, h);
  };
  if (p0 >= b.T) {
    ends = empty_range_ends();
#pragma unroll
    for (int i = 0; i < NROWS; i++) { lo[i] = 1; hi[i] = 0; }
    return;
  }
  const int last = (p0 + P < b.T ? p0 + P : b.T) - 1;
  ends.whole = p0 + P <= b.T;
  if (b.span) {  // (make_bounds sets it only with doc) every load first, then the arithmetic
    const DocSpan sf = b.span[p0], sl = b.span[last];
    DocSpan sr[NROWS];
#pragma unroll
    for (int i = 0; i < NROWS; i++) sr[i] = b.span[rows[i] <= last ? rows[i] : last];
    interval(p0, sf.first, sf.last, ends.first_lo, ends.first_hi);
    interval(last, sl.first, sl.last, ends.last_lo, ends.last_hi);
#pragma unroll
    for (int i = 0; i < NROWS; i++) {
      if (rows[i] > last) { lo[i] = 1; hi[i] = 0; continue; }  // past T: empty
      interval(rows[i], sr[i].first, sr[i].last, lo[i], hi[i]);
    }
    return;
  }
  if (!b.doc) {
    interval(p0, 0, b.T - 1, ends.first_lo, ends.first_hi);
    interval(last, 0, b.T - 1, ends.last_lo, ends.last_hi);
#pragma unroll
    for (int i = 0; i < NROWS; i++) {
      if (rows[i] > last) { lo[i] = 1; hi[i] = 0; continue; }
      interval(rows[i], 0, b.T - 1, lo[i], hi[i]);
    }
    return;
  }
  for (int i = threadIdx.x; i < P; i += blockDim.x) s_ids[i] = p0 + i <= last ? b.doc[p0 + i] : INT_MAX;
  const int id_first = b.doc[p0], id_last = b.doc[last];
  const int first_start = doc_lower_bound_warp(b.doc, 0, p0 + 1, id_first);
  const int last_end = doc_lower_bound_warp(b.doc, last, b.T, id_last + 1) - 1;
  __syncthreads();
  // the document of an owned position p <= last
  auto span = [&](int p, int& start, int& end) {
    const int id = s_ids[p - p0];
    start = id == id_first ? first_start : p0 + smem_lower_bound(s_ids, P, id);
    end = id == id_last ? last_end : p0 + smem_lower_bound(s_ids, P, id + 1) - 1;
  };
  int start, end;
  span(p0, start, end);
  interval(p0, start, end, ends.first_lo, ends.first_hi);
  span(last, start, end);
  interval(last, start, end, ends.last_lo, ends.last_hi);
#pragma unroll
  for (int i = 0; i < NROWS; i++) {
    const int p = rows[i];
    if (p > last) { lo[i] = 1; hi[i] = 0; continue; }  // past T: empty
    span(p, start, end);
    interval(p, start, end, lo[i], hi[i]);
  }
}

// The start of a block of two warpgroups that owns the P positions from p0 (queries when
// own_queries, else keys) and walks the other side's tiles of BN: this thread's positions are
// own0 and own0 + 8; lo, hi get their kept intervals. Returns the block's walk. Every thread of
// the block calls it.
template <int P, int BN>
__device__ __forceinline__ TileWalk own_and_walk(const MaskBounds& mb, int p0, bool own_queries, int own0, int T,
                                                 int32_t* s_ids, int (&lo)[2], int (&hi)[2]) {
  const int rows[2] = {own0, own0 + 8};
  RangeEnds ends;  // the kept intervals of the block's first and last position
  own_intervals<P, 2>(mb, p0, own_queries, s_ids, rows, lo, hi, ends);
  return TileWalk(ends, BN, T);
}

}  // namespace attn
