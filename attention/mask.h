// The attention mask as a small description, and everything the kernels derive from it.
//
// docs/masks.md. For query q and key k of one packed sequence of T tokens, (q, k) is kept when
// every term that is on holds:
//   causal:            k <= q
//   prefix-LM (P > 0): relaxes causal to  k <= q  or  k - start(q) < P   (start(q): the first
//                      position of q's document; 0 without documents)
//   window (tokens):   q - k < W           (uni)   or  |q - k| < W           (bi)
//   window (blocks):   q/128 - k/128 < N   (uni)   or  |q/128 - k/128| < N   (bi)
//   documents:         doc[q] == doc[k]    (doc[] nondecreasing: a count of BOS tokens)
//
// Everything below rests on two facts, true of every combination of terms:
//   1. the keys one query keeps are one interval [lo(q), hi(q)] (each term keeps an interval of
//      k for fixed q, and intervals intersect to an interval), and lo(q), hi(q) never decrease
//      as q grows (each term's ends never decrease; the prefix's end max(q, start(q) + P - 1)
//      neither, since start(q) only moves forward). The same holds by columns: the queries that
//      keep key k are an interval [qlo(k), qhi(k)], nondecreasing in k.
//   2. every query keeps itself (the diagonal d = q - k = 0 passes every term).
// From them, for a tile [q0, q1) x [k0, k1) with valid ends qa = q0, qb = min(q1, T) - 1 (and
// likewise ka, kb):
//   no pair is kept  exactly when  hi(qb) < ka  or  lo(qa) > kb      (kSkip: never loaded)
//   every pair kept  exactly when  lo(qb) <= ka  and  hi(qa) >= kb   (kFull: no per-element test)
//   otherwise kPartial (each element tested against its row's interval: two compares).
// ("Exactly", for skipping, by fact 2: a key tile between lo(qa) and hi(qb) either meets the
// diagonal of the query tile or lies wholly left or right of it, where row qa or qb keeps it.)
// So a kernel that owns a range of positions needs only the intervals of its first and last
// position (RangeEnds) to classify every tile of the other side, with no memory access; the
// tiles it must visit are the contiguous run from lo(qa) to hi(qb) (key_range), or the column
// version (query_range).
//
// Each term lives in one place: row_keys_in / col_queries_in, which take the first and last
// position of the row's document (found by binary search here; the kernels find them in shared
// memory, own_intervals.cuh). Adding a term that keeps an interval per row, with nondecreasing
// ends that contain the diagonal, is a change to those two functions and make_bounds.
//
// The prefix term. Under the AND with the document term, start(q) equals start(k) for every pair
// that survives, so the row form uses q's document (hi(q) = min(..., max(q, start(q) + P - 1)))
// and the column form k's (a key with k - start(k) < P is kept by every query of its document
// the other terms allow; any other key only by q >= k). A tile that straddles the prefix edge is
// simply partial: its rows' intervals end at different places. Without causal, every pair the
// prefix would add is kept already: the term is off. With causal and no prefix the causal term
// folds into the interval on d (dlo = 0), and uni and bi windows normalise to the same bounds,
// which is why the kernels give bit-identical results for the two. With a prefix they differ: a
// prefix key ahead of q is kept by a uni window (q - k < 0 < W) but only within W by a bi one.
//
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

// The first and last position of a document (attention.h doc_spans gives one per position).
struct alignas(8) DocSpan {
  int32_t first, last;
};

struct MaskDesc {
  bool causal = true;
  int window = 0;                 // 0: no window; else W tokens or N blocks
  bool window_bidir = false;      // false: q - k < W; true: |q - k| < W
  bool window_blocks = false;     // window counted in blocks of 128 tokens
  int prefix = 0;                 // prefix-LM: P tokens at the start of each document see each other both ways; 0: off
  const int32_t* doc_ids = nullptr;  // [T], nondecreasing; nullptr: no document mask
  const DocSpan* doc_spans = nullptr;  // optional, with doc_ids: [T] (first, last) position of each
                                        // one's document, attention.h doc_spans(); read by the
                                        // kernels at each block's start instead of searching doc_ids
};

// Normalised form that the kernels use.
struct MaskBounds {
  int T;
  int dlo, dhi;  // kept only if dlo <= q - k <= dhi (windows; causal too when prefix == 0)
  int blo, bhi;  // kept only if blo <= q/128 - k/128 <= bhi
  int prefix;    // > 0: causal with a prefix: kept only if k <= q or k - start(q) < prefix
  const int32_t* doc;
  const DocSpan* span;  // doc's spans (MaskDesc::doc_spans) or nullptr; only with doc
};

ATTN_HD int imax(int a, int b) { return a > b ? a : b; }
ATTN_HD int imin(int a, int b) { return a < b ? a : b; }

ATTN_HD MaskBounds make_bounds(const MaskDesc& m, int T) {
  MaskBounds b{T, -kUnbounded, kUnbounded, -kUnbounded, kUnbounded, 0, m.doc_ids, m.doc_ids ? m.doc_spans : nullptr};
  // prefix >= T covers every document whole: the same as T (and no overflow in start + prefix)
  if (m.causal && m.prefix > 0) b.prefix = imin(m.prefix, imax(T, 1));
  const bool strict_causal = m.causal && b.prefix == 0;
  if (strict_causal) b.dlo = 0;
  if (m.window > 0) {
    if (m.window_blocks) {
      b.bhi = m.window - 1;
      if (m.window_bidir) b.blo = -(m.window - 1);
    } else {
      b.dhi = m.window - 1;
      if (m.window_bidir) b.dlo = imax(b.dlo, -(m.window - 1));
    }
  }
  if (strict_causal) b.blo = imax(b.blo, 0);  // k <= q implies k/128 <= q/128
  return b;
}

// The keys query q (< T) keeps, [lo, hi], given [start, end]: the first and last position of
// q's document ([0, T - 1] without documents). Every term is one line.
ATTN_HD void row_keys_in(const MaskBounds& b, int q, int start, int end, int& lo, int& hi) {
  lo = start;
  hi = end;
  if (b.dhi < kUnbounded) lo = imax(lo, q - b.dhi);
  if (b.dlo > -kUnbounded) hi = imin(hi, q - b.dlo);
  if (b.bhi < kUnbounded) lo = imax(lo, (q / kMaskBlock - b.bhi) * kMaskBlock);
  if (b.blo > -kUnbounded) hi = imin(hi, (q / kMaskBlock - b.blo) * kMaskBlock + kMaskBlock - 1);
  if (b.prefix > 0) hi = imin(hi, imax(q, start + b.prefix - 1));
}

// The queries that keep key k (< T), [lo, hi], given k's document [start, end].
ATTN_HD void col_queries_in(const MaskBounds& b, int k, int start, int end, int& lo, int& hi) {
  lo = start;
  hi = end;
  if (b.dlo > -kUnbounded) lo = imax(lo, k + b.dlo);
  if (b.dhi < kUnbounded) hi = imin(hi, k + b.dhi);
  if (b.blo > -kUnbounded) lo = imax(lo, (k / kMaskBlock + b.blo) * kMaskBlock);
  if (b.bhi < kUnbounded) hi = imin(hi, (k / kMaskBlock + b.bhi) * kMaskBlock + kMaskBlock - 1);
  if (b.prefix > 0 && k - start >= b.prefix) lo = imax(lo, k);
}

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

// The document of position p (< T) as [start, end]; the whole sequence without documents.
ATTN_HD void doc_span(const MaskBounds& b, int p, int& start, int& end) {
  start = 0;
  end = b.T - 1;
  if (b.doc) {
    start = doc_first(b.doc, b.T, b.doc[p]);
    end = doc_last(b.doc, b.T, b.doc[p]);
  }
}

// Exactly the keys query q keeps, [lo, hi] (empty, lo > hi, for q outside [0, T)); and the
// queries that keep key k.
ATTN_HD void row_keys(const MaskBounds& b, int q, int& lo, int& hi) {
  if (q < 0 || q >= b.T) { lo = 1; hi = 0; return; }
  int start, end;
  doc_span(b, q, start, end);
  row_keys_in(b, q, start, end, lo, hi);
}
ATTN_HD void col_queries(const MaskBounds& b, int k, int& lo, int& hi) {
  if (k < 0 || k >= b.T) { lo = 1; hi = 0; return; }
  int start, end;
  doc_span(b, k, start, end);
  col_queries_in(b, k, start, end, lo, hi);
}

// Per-element test. q and k may lie past T (tile padding): those are never kept.
ATTN_HD bool keep(const MaskBounds& b, int q, int k) {
  int lo, hi;
  row_keys(b, q, lo, hi);
  return k >= lo && k <= hi;
}

enum TileKind { kSkip = 0, kPartial = 1, kFull = 2 };

// The kept intervals of the first and last valid position of a range [f0, f1) of one side
// (rows when it holds queries, columns when keys): all a tile of the other side needs to be
// classified. whole: the range lies inside [0, T) (a range cut by T is never full).
struct RangeEnds {
  int first_lo, first_hi, last_lo, last_hi;
  bool whole;
  // the other side's positions some position of the range keeps: [lo(first), hi(last)]
  ATTN_HD int lo() const { return first_lo; }
  ATTN_HD int hi() const { return last_hi; }
};

ATTN_HD RangeEnds empty_range_ends() { return RangeEnds{kUnbounded, -kUnbounded, kUnbounded, -kUnbounded, false}; }

// RangeEnds of [f0, f1), by binary search (the kernels compute them in own_intervals.cuh).
ATTN_HD RangeEnds range_ends(const MaskBounds& b, int f0, int f1, bool queries) {
  if (f0 >= b.T || f1 <= f0) return empty_range_ends();
  RangeEnds e;
  const int fb = imin(f1, b.T) - 1;
  e.whole = f1 <= b.T;
  if (queries) {
    row_keys(b, f0, e.first_lo, e.first_hi);
    row_keys(b, fb, e.last_lo, e.last_hi);
  } else {
    col_queries(b, f0, e.first_lo, e.first_hi);
    col_queries(b, fb, e.last_lo, e.last_hi);
  }
  return e;
}

// A tile [p0, p1) of the other side against a fixed range with ends e (the rules at the top).
ATTN_HD TileKind classify_against(const RangeEnds& e, int p0, int p1, int T) {
  if (p0 >= T) return kSkip;
  const int pb = imin(p1, T) - 1;
  if (e.last_hi < p0 || e.first_lo > pb) return kSkip;
  return e.whole && p1 <= T && e.last_lo <= p0 && e.first_hi >= pb ? kFull : kPartial;
}

ATTN_HD TileKind classify_tile(const MaskBounds& b, int q0, int q1, int k0, int k1) {
  return classify_against(range_ends(b, q0, q1, true), k0, k1, b.T);
}

// Keys [k_lo, k_hi] (inclusive) that some query of [q0, q1) keeps; empty when k_lo > k_hi. By
// fact 2 every key tile that meets it holds a kept pair with the query tile.
ATTN_HD void key_range(const MaskBounds& b, int q0, int q1, int& k_lo, int& k_hi) {
  const RangeEnds e = range_ends(b, q0, q1, true);
  k_lo = e.lo();
  k_hi = e.hi();
}

// Queries [q_lo, q_hi] (inclusive) that keep some key of [k0, k1).
ATTN_HD void query_range(const MaskBounds& b, int k0, int k1, int& q_lo, int& q_hi) {
  const RangeEnds e = range_ends(b, k0, k1, false);
  q_lo = e.lo();
  q_hi = e.hi();
}

// The tiles of the other side, in steps of `step`, that a fixed range with ends e meets: the run
// [begin, end) of tile indices, each classified by next() with no memory access. A walk goes
// through the positions begin, begin + 1, .., end - 1: position p is tile p, or with `down` set
// tile begin + end - 1 - p (the same tiles from the last one down; tile() maps). Only the fused
// sm90 backward walks down (tile_scheduler.cuh key_block_at).
struct TileWalk {
  RangeEnds e;
  int step, T, begin, end;
  bool down = false;

  ATTN_HD TileWalk(const RangeEnds& e_, int step_, int T_) : e(e_), step(step_), T(T_) {
    const bool any = e.last_hi >= e.first_lo;
    begin = any ? e.first_lo / step : 0;
    end = any ? e.last_hi / step + 1 : 0;
  }
  ATTN_HD int tile(int p) const { return down ? begin + end - 1 - p : p; }
  // The first position >= p whose tile is not skipped (or end), and that tile's kind.
  ATTN_HD int next(int p, TileKind& kind) const {
    for (; p < end; p++) {
      const int i = tile(p);
      kind = classify_against(e, i * step, i * step + step, T);
      if (kind != kSkip) return p;
    }
    kind = kSkip;
    return end;
  }
};

// The next AHEAD + 1 tiles of a walk with their kinds: tile[0] is computed now, tile[1..AHEAD]
// are loaded or loading. A kernel asks for the following tile (next()) while its matmuls run and
// pushes it at the end of the step. These are walk positions (TileWalk::tile() gives the tile
// index; the same unless the walk goes down).
template <int AHEAD>
struct WalkAhead {
  int tile[AHEAD + 1];
  TileKind kind[AHEAD + 1];

  ATTN_HD void start(const TileWalk& w) {
    tile[0] = w.next(w.begin, kind[0]);
    for (int a = 1; a <= AHEAD; a++) tile[a] = w.next(tile[a - 1] + 1, kind[a]);
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

// Kept (q, k) pairs of the whole mask: the sum of the rows' interval lengths, with each row's
// document found by one forward scan (O(T)). Host side: the trainer's FLOP count (MFU), 65536
// tokens in well under a millisecond.
inline long long kept_pairs(const MaskBounds& b) {
  long long n = 0;
  int first = 0, last = b.T - 1;  // the document of q: [first, last]
  if (b.doc) last = -1;
  for (int q = 0; q < b.T; q++) {
    if (q > last) {  // ids are nondecreasing: q starts the next document
      first = last = q;
      while (last + 1 < b.T && b.doc[last + 1] == b.doc[q]) last++;
    }
    int lo, hi;
    row_keys_in(b, q, first, last, lo, hi);
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
