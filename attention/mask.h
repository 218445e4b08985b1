// The attention mask as a small description, and everything the kernels derive from it.
//
// docs/masks.md. For query q and key k of one packed sequence of T tokens, (q, k) is kept when
//   causal:            k <= q
//   window (tokens):   q - k < W           (uni)   or  |q - k| < W           (bi)
//   window (blocks):   q/128 - k/128 < N   (uni)   or  |q/128 - k/128| < N   (bi)
//   documents:         doc[q] == doc[k]    (doc[] nondecreasing: a count of BOS tokens)
// Every term except documents bounds d = q - k (or its block version) to an interval, so the
// description is normalised into [dlo, dhi] on d and [blo, bhi] on the block difference. With
// causal on, d >= 0 makes the lower window bound irrelevant: uni and bi normalise to the same
// intervals, which is why the kernels give bit-identical results for the two.
//
// From the intervals and the document ids, for a tile [q0, q1) x [k0, k1):
//   classify_tile  -> kSkip (no kept pair: never loaded), kFull (all kept: no per-element test)
//                     or kPartial (per-element test);
//   key_range / query_range -> the keys a query tile can see, the queries a key tile can see;
//   row_keys / col_queries  -> exactly the keys one query keeps (an interval), and the reverse.
// Host and device code share this header; the CPU reference (reference.h) does not use it.
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define ATTN_HD __host__ __device__ __forceinline__
#else
#define ATTN_HD inline
#endif

namespace attn {

constexpr int kMaskBlock = 128;     // the speedrun's block size for windows counted in blocks
constexpr int kUnbounded = 1 << 30;  // an interval end that bounds nothing

struct MaskDesc {
  bool causal = true;
  int window = 0;                 // 0: no window; else W tokens or N blocks
  bool window_bidir = false;      // false: q - k < W; true: |q - k| < W
  bool window_blocks = false;     // window counted in blocks of 128 tokens
  const int32_t* doc_ids = nullptr;  // [T], nondecreasing; nullptr: no document mask
};

// Normalised form that the kernels use.
struct MaskBounds {
  int T;
  int dlo, dhi;  // kept: dlo <= q - k <= dhi
  int blo, bhi;  // kept: blo <= q/128 - k/128 <= bhi
  const int32_t* doc;
};

ATTN_HD int imax(int a, int b) { return a > b ? a : b; }
ATTN_HD int imin(int a, int b) { return a < b ? a : b; }

ATTN_HD MaskBounds make_bounds(const MaskDesc& m, int T) {
  MaskBounds b{T, -kUnbounded, kUnbounded, -kUnbounded, kUnbounded, m.doc_ids};
  if (m.causal) b.dlo = 0;
  if (m.window > 0) {
    if (m.window_blocks) {
      b.bhi = m.window - 1;
      if (m.window_bidir) b.blo = -(m.window - 1);
    } else {
      b.dhi = m.window - 1;
      if (m.window_bidir) b.dlo = imax(b.dlo, -(m.window - 1));
    }
  }
  if (m.causal) b.blo = imax(b.blo, 0);  // k <= q implies k/128 <= q/128
  return b;
}

// Per-element test. q and k may lie past T (tile padding): those are never kept.
ATTN_HD bool keep(const MaskBounds& b, int q, int k) {
  if (q >= b.T || k >= b.T) return false;
  int d = q - k, db = q / kMaskBlock - k / kMaskBlock;
  if (d < b.dlo || d > b.dhi || db < b.blo || db > b.bhi) return false;
  return b.doc == nullptr || b.doc[q] == b.doc[k];
}

enum TileKind { kSkip = 0, kPartial = 1, kFull = 2 };

// classify_tile with the document ids of the tile's first and last valid query (dq0, dq1) and
// key (dk0, dk1) already at hand (ignored without documents): a kernel that walks tiles loads
// only the ids of the side that moves.
ATTN_HD TileKind classify_tile_ids(const MaskBounds& b, int q0, int q1, int k0, int k1, int dq0, int dq1, int dk0, int dk1) {
  if (q0 >= b.T || k0 >= b.T) return kSkip;
  int qa = q0, qb = imin(q1, b.T) - 1, ka = k0, kb = imin(k1, b.T) - 1;
  int dmin = qa - kb, dmax = qb - ka;
  if (dmax < b.dlo || dmin > b.dhi) return kSkip;
  int bmin = qa / kMaskBlock - kb / kMaskBlock, bmax = qb / kMaskBlock - ka / kMaskBlock;
  if (bmax < b.blo || bmin > b.bhi) return kSkip;
  bool full = dmin >= b.dlo && dmax <= b.dhi && bmin >= b.blo && bmax <= b.bhi && q1 <= b.T && k1 <= b.T;
  if (b.doc) {
    if (dq1 < dk0 || dk1 < dq0) return kSkip;
    full = full && dq0 == dq1 && dk0 == dk1 && dq0 == dk0;
  }
  return full ? kFull : kPartial;
}

// Document ids of the first and last valid position of [p0, p1) (0, 0 without documents or
// when the range lies past T).
ATTN_HD void tile_doc_ids(const MaskBounds& b, int p0, int p1, int& d0, int& d1) {
  d0 = d1 = 0;
  if (b.doc && p0 < b.T) {
    d0 = b.doc[p0];
    d1 = b.doc[imin(p1, b.T) - 1];
  }
}

ATTN_HD TileKind classify_tile(const MaskBounds& b, int q0, int q1, int k0, int k1) {
  int dq0, dq1, dk0, dk1;
  tile_doc_ids(b, q0, q1, dq0, dq1);
  tile_doc_ids(b, k0, k1, dk0, dk1);
  return classify_tile_ids(b, q0, q1, k0, k1, dq0, dq1, dk0, dk1);
}

// The tiles of one side (keys, for a fixed query range; or queries, for a fixed key range), in
// steps of `step` from a start, skipping those with no kept pair. next(b, i, kind) returns the
// first tile index >= i that is not skipped (or end) and its kind; the fixed side's document
// ids are loaded once.
struct TileWalk {
  int f0, f1, fd0, fd1;  // the fixed range and its document ids
  int step, end;
  bool fixed_queries;

  ATTN_HD TileWalk(const MaskBounds& b, int f0_, int f1_, int step_, int end_, bool fixed_queries_)
      : f0(f0_), f1(f1_), step(step_), end(end_), fixed_queries(fixed_queries_) {
    tile_doc_ids(b, f0, f1, fd0, fd1);
  }
  // b: the bounds it was made with (not kept inside: in a kernel it stays in the parameters).
  ATTN_HD int next(const MaskBounds& b, int i, TileKind& kind) const {
    for (; i < end; i++) {
      const int p0 = i * step, p1 = p0 + step;
      int d0, d1;
      tile_doc_ids(b, p0, p1, d0, d1);
      kind = fixed_queries ? classify_tile_ids(b, f0, f1, p0, p1, fd0, fd1, d0, d1)
                           : classify_tile_ids(b, p0, p1, f0, f1, d0, d1, fd0, fd1);
      if (kind != kSkip) return i;
    }
    kind = kSkip;
    return end;
  }
};

// The next AHEAD + 1 tiles of a walk with their kinds: tile[0] is computed now, tile[1..AHEAD]
// are loaded or loading. A kernel asks for the following tile (next()) while its matmuls run and
// pushes it at the end of the step.
template <int AHEAD>
struct WalkAhead {
  int tile[AHEAD + 1];
  TileKind kind[AHEAD + 1];

  ATTN_HD void start(const TileWalk& w, const MaskBounds& b, int first) {
    tile[0] = w.next(b, first, kind[0]);
    for (int a = 1; a <= AHEAD; a++) tile[a] = w.next(b, tile[a - 1] + 1, kind[a]);
  }
  ATTN_HD void push(int t, TileKind k) {
    for (int a = 0; a < AHEAD; a++) {
      tile[a] = tile[a + 1];
      kind[a] = kind[a + 1];
    }
    tile[AHEAD] = t;
    kind[AHEAD] = k;
  }
};

// First position whose document id is >= id, and last position whose id is <= id.
ATTN_HD int doc_first(const int32_t* doc, int T, int id) {
  int lo = 0, hi = T;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (doc[mid] < id) lo = mid + 1; else hi = mid;
  }
  return lo;
}
ATTN_HD int doc_last(const int32_t* doc, int T, int id) {
  int lo = 0, hi = T;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (doc[mid] <= id) lo = mid + 1; else hi = mid;
  }
  return lo - 1;
}

// Keys [k_lo, k_hi] (inclusive) that some query of [q0, q1) may keep; empty when k_lo > k_hi.
ATTN_HD void key_range(const MaskBounds& b, int q0, int q1, int& k_lo, int& k_hi) {
  int qb = imin(q1, b.T) - 1;
  k_lo = 0;
  k_hi = b.T - 1;
  if (b.dhi < kUnbounded) k_lo = imax(k_lo, q0 - b.dhi);
  if (b.dlo > -kUnbounded) k_hi = imin(k_hi, qb - b.dlo);
  if (b.bhi < kUnbounded) k_lo = imax(k_lo, (q0 / kMaskBlock - b.bhi) * kMaskBlock);
  if (b.blo > -kUnbounded) k_hi = imin(k_hi, (qb / kMaskBlock - b.blo) * kMaskBlock + kMaskBlock - 1);
  if (b.doc && q0 <= qb) {
    k_lo = imax(k_lo, doc_first(b.doc, b.T, b.doc[q0]));
    k_hi = imin(k_hi, doc_last(b.doc, b.T, b.doc[qb]));
  }
}

// Queries [q_lo, q_hi] (inclusive) that may keep some key of [k0, k1).
ATTN_HD void query_range(const MaskBounds& b, int k0, int k1, int& q_lo, int& q_hi) {
  int kb = imin(k1, b.T) - 1;
  q_lo = 0;
  q_hi = b.T - 1;
  if (b.dlo > -kUnbounded) q_lo = imax(q_lo, k0 + b.dlo);
  if (b.dhi < kUnbounded) q_hi = imin(q_hi, kb + b.dhi);
  if (b.blo > -kUnbounded) q_lo = imax(q_lo, (k0 / kMaskBlock + b.blo) * kMaskBlock);
  if (b.bhi < kUnbounded) q_hi = imin(q_hi, (kb / kMaskBlock + b.bhi) * kMaskBlock + kMaskBlock - 1);
  if (b.doc && k0 <= kb) {
    q_lo = imax(q_lo, doc_first(b.doc, b.T, b.doc[k0]));
    q_hi = imin(q_hi, doc_last(b.doc, b.T, b.doc[kb]));
  }
}

// For one query every term bounds the key to an interval (window, block window, causal, the
// query's document, [0, T)), so the keys it keeps are exactly [lo, hi] (empty: lo > hi); and
// likewise the queries one key is kept by. Kernels compute these once for the rows they own and
// test a partial tile's elements with two compares instead of keep().
ATTN_HD void row_keys(const MaskBounds& b, int q, int& lo, int& hi) {
  if (q >= b.T) { lo = 1; hi = 0; return; }
  key_range(b, q, q + 1, lo, hi);
}
ATTN_HD void col_queries(const MaskBounds& b, int k, int& lo, int& hi) {
  if (k >= b.T) { lo = 1; hi = 0; return; }
  query_range(b, k, k + 1, lo, hi);
}

// Kept (q, k) pairs of the whole mask. For one query every term bounds k to an interval: the
// window and causal terms from key_range of a one-query tile, the document from the run of equal
// ids around q (found by one forward scan, so the whole count is O(T)). Host side: the trainer's
// FLOP count (MFU), 65536 tokens in well under a millisecond.
inline long long kept_pairs(const MaskBounds& b) {
  MaskBounds no_doc = b;
  no_doc.doc = nullptr;
  long long n = 0;
  int first = 0, last = -1;  // the document of q: [first, last]
  for (int q = 0; q < b.T; q++) {
    int lo, hi;
    key_range(no_doc, q, q + 1, lo, hi);
    if (b.doc) {
      if (q > last) {  // ids are nondecreasing: q starts the next document
        first = last = q;
        while (last + 1 < b.T && b.doc[last + 1] == b.doc[q]) last++;
      }
      lo = imax(lo, first);
      hi = imin(hi, last);
    }
    if (hi >= lo) n += hi - lo + 1;
  }
  return n;
}

// Document ids from token ids: doc[i] = number of BOS (50256) tokens at positions <= i.
template <typename Token, typename Id>
inline void doc_ids_from_tokens(const Token* tokens, int T, Id* doc, int bos = 50256) {
  int c = 0;
  for (int i = 0; i < T; i++) {
    c += tokens[i] == bos;
    doc[i] = c;
  }
}

}  // namespace attn
