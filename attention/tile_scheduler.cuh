// Which tile each block of the attention kernels works on, and in which order blocks take them.
//
// The kernels own one side of the score matrix and walk the other (mask.h TileWalk):
//   forward and dQ (sm80, sm90): a block owns a query tile and walks key tiles;
//   dK/dV and the fused backward (sm80, sm90): a block owns a key block and walks query tiles.
// Orders:
//   - Query-owning blocks take their tile longest walk first, query_tile_longest_first(): under
//     the causal mask the last query tiles see the most keys, and starting them first leaves
//     the short walks to fill the SMs at the end. A scheduling choice for speed only.
//   - The fused sm90 backward's blocks take their key blocks in the order that dq_order.cuh's
//     dQ additions need (key_block_at()). This is a correctness contract, not a choice for speed:
//     each query tile's dQ shares are added in a fixed order of key blocks, and a block only
//     waits for shares that come before its own in that order, which must belong to blocks of
//     smaller index. In most heads the order is decreasing key block: a head's blocks take its
//     key blocks from the last one down and walk their query tiles up. In the last head of a
//     grid whose blocks go head by head it is increasing key block: that head's blocks take its
//     key blocks from the first one up and walk their query tiles down (dq_rank). The waits end
//     because the GPU starts the blocks of a grid in increasing index order, so a block only
//     waits for blocks already started and holding an SM. CUDA does not promise that order in
//     writing; every NVIDIA GPU so far launches that way, the GPU tests run this kernel on every
//     mask, and should it ever not hold, the wait in dq_order.cuh traps after 20 s with an error
//     rather than hanging. (A ticket taken from a counter at the start of each block removes
//     the assumption, but costs every block one barrier and one atomic round trip, which show
//     on short walks, so it is not used.) tests/test_attention_cpu.cpp checks the contract on
//     random masks.
#pragma once
#include "attention/mask.h"

namespace attn {

// The sm90 forward's tiles: a block owns kF90Own queries and walks key tiles of kF90Walk, one
// block an SM. At head dim 64 on a mask with a window or documents, where walks are short, a
// block of one warpgroup owns kF90SmallOwn queries and walks key tiles of kF90SmallWalk, three
// blocks an SM, so that one block's start and end (loads before its first tile, the output
// after its last) overlap the others' loops. Those small blocks are faster at head dim 64 with
// a window or documents and slower on dense causal and at head dim 128, which keep 128 x 128;
// key tiles of 128 beat 64 for them (results/attention_design/README.md).
// At head dim 64 without a window or documents, a block of three warpgroups owns kF90WideOwn
// queries (key tiles of kF90Walk; 158 registers a thread fit 384 threads), so that each K and V
// tile serves 192 queries: faster there than 128 or 64 queries a block, and slower than 64 on
// the masks with a window or documents (results/attention_design/README.md).
constexpr int kF90Own = 128, kF90Walk = 128, kF90SmallOwn = 64, kF90SmallWalk = 128, kF90WideOwn = 192;
inline bool fwd_small_tiles(int D, const MaskDesc& m) { return D == 64 && (m.window > 0 || m.doc_ids != nullptr); }
// The forward block's shape: the queries it owns and the key tiles it walks.
struct FwdShape {
  int own, walk;
};
inline FwdShape fwd_shape(int D, const MaskDesc& m) {
  if (D != 64) return {kF90Own, kF90Walk};
  return fwd_small_tiles(D, m) ? FwdShape{kF90SmallOwn, kF90SmallWalk} : FwdShape{kF90WideOwn, kF90Walk};
}
// The sm90 backward's tiles: a block owns kB90Own keys (64 a warpgroup) and walks query tiles of
// kB90Walk rows. The two-kernel backward (the default at head dim 64) takes blocks of
// kB90SmallOwn keys (dK/dV) or queries (dQ) there on masks with a window or documents (the
// forward's rule): one warpgroup, three blocks an SM (three tile buffers, bwd_common_sm90.cuh
// bwd_stages; 168 registers for dK/dV as below). Against blocks of 128 they are faster with
// documents or a short window, as fast on window 1024 and slower on dense causal; and three
// such blocks an SM are faster than two (results/attention_design/README.md).
// Without a window or documents, at head dim 64 both kernels' blocks own kB90Own keys or queries
// (two warpgroups, up to 255 registers a thread) and walk tiles of kB90WideWalk: the dQ kernel
// key tiles of 128 (S, dP 64 registers each), the dK/dV kernel query tiles of 128, waiting for
// each tile's dV, dK updates in its own step (bwd_key_owner_sm90.cuh SERIAL). Each 64-row step's
// chain bounds these kernels, and tiles of 128 halve the steps: faster than the blocks before
// them, three warpgroups owning 192 and walking tiles of 64 at 168 registers (results/attention_design/README.md).
constexpr int kB90Own = 128, kB90Walk = 64, kB90SmallOwn = 64, kB90WideWalk = 128;
inline bool bwd_small_tiles(int D, const MaskDesc& m) { return fwd_small_tiles(D, m); }
// The keys a block of the default backward owns (the dK/dV kernel's and the fused kernel's blocks).
inline int bwd_own(int D, const MaskDesc& m) { return D == 64 && bwd_small_tiles(D, m) ? kB90SmallOwn : kB90Own; }
// The query tiles those blocks walk.
inline int bwd_walk(int D, const MaskDesc& m) { return D == 64 && !bwd_small_tiles(D, m) ? kB90WideWalk : kB90Walk; }

#ifdef __CUDACC__
__device__ __forceinline__ unsigned query_tile_longest_first(int n_tiles) { return n_tiles - 1 - blockIdx.x; }
#endif

// The key-owning sm90 kernels' blocks: a grid of n_kb * H blocks in x. Block b owns key block
// i of head h, where (i, h) = (b / H, b % H) heads fastest, else (b % n_kb, b / n_kb): the key
// block is i for the dK/dV kernel (under the causal mask the first key blocks have the longest
// walks). For the fused backward (dq_order) it is n_kb - 1 - i, except in the last head when the
// grid goes head by head (and has more than one head), where it is i and `rising` is set: that
// head adds its dQ shares by increasing key block and its blocks walk their query tiles down.
// Why the last head: under the causal mask a head's longest walks come last in the decreasing
// order, and with every head so the grid's last blocks would be its longest, which leaves SMs
// idle at the end (bench/bwd_schedule_model.py models the grid). The last head's blocks start
// while the one before runs, spread out as its blocks end one by one, so taken longest first
// with the increasing order their walks do not wait for each other, and the grid ends on short
// walks. Giving more heads that order would start their blocks together on the same tiles, one
// waiting for the next, so only the last head takes it. Measured against the decreasing
// order, the backward of dense causal at D = 128 gains less than the model predicts, since the
// model leaves out the clock, which rises as SMs fall idle at the end (results/attention_design/README.md,
// The order blocks take their work).
// Heads fastest, the H blocks of one key block run side by side, so what they read per key
// rather than per head (the rotary angles of k's norm backward in dK's store) comes from DRAM
// once and from L2 for the others; that is the order on masks with a window or documents, whose
// walks are short (bwd_heads_fastest). Without, the blocks of one head side by side share its Q
// and dO in L2, which heads fastest loses on dense causal (results/attention_design/README.md,
// The order blocks take their work).
inline bool bwd_heads_fastest(const MaskDesc& m) { return m.window > 0 || m.doc_ids != nullptr; }
struct KeyBlock {
  int kb, h;
  bool rising;  // the fused backward: this head's dQ shares go by increasing key block, its walks down
};
ATTN_HD KeyBlock key_block_at(int b, int n_kb, int H, bool heads_fastest, bool dq_order) {
  const int i = heads_fastest ? b / H : b % n_kb, h = heads_fastest ? b % H : b / n_kb;
  if (!dq_order) return {i, h, false};
  const bool rising = !heads_fastest && H > 1 && h == H - 1;
  return {rising ? i : n_kb - 1 - i, h, rising};
}
// The place of key block kb's share among a query tile's shares, which come from the key blocks
// lo .. hi (dq_order.cuh dq_range_of).
ATTN_HD unsigned dq_rank(int kb, int lo, int hi, bool rising) { return rising ? kb - lo : hi - kb; }
#ifdef __CUDACC__
template <bool DQ_ORDER>
__device__ __forceinline__ KeyBlock key_block_of(int n_kb, int H, bool heads_fastest) {
  return key_block_at(blockIdx.x, n_kb, H, heads_fastest, DQ_ORDER);
}
#endif

}  // namespace attn
