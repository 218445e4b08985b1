// Which tile each block of the attention kernels works on, and in which order blocks take them.
//
// The kernels own one side of the score matrix and walk the other (mask.h TileWalk):
//   forward and dQ (sm80, sm90): a block owns a query tile and walks key tiles;
//   dK/dV and the fused backward (sm80, sm90): a block owns a key block and walks query tiles.
// Orders:
//   - Query-owning blocks take their tile longest walk first, query_tile_longest_first(): under
//     the causal mask the last query tiles see the most keys, and starting them first leaves
//     the short walks to fill the SMs at the end. A scheduling choice for speed only.
//   - The fused sm90 backward's blocks take their key block from a ticket, key_block_by_ticket():
//     key blocks are handed out in decreasing order as blocks start. This is a correctness
//     contract, not a choice for speed: dq_order.cuh adds each query tile's dQ shares in
//     decreasing key block order, and a block waits for the shares of larger key blocks. Since
//     those were handed out earlier, to blocks already running on an SM, every wait ends, in
//     whatever order the hardware happens to launch blocks. (Mapping blockIdx to key blocks
//     would rely on blocks being launched in index order, which CUDA does not promise.)
#pragma once

namespace attn {

// The sm90 backward's tiles: a block owns kB90Own keys (64 a warpgroup) and walks query tiles of
// kB90Walk rows.
constexpr int kB90Own = 128, kB90Walk = 64;

__device__ __forceinline__ unsigned query_tile_longest_first(int n_tiles) { return n_tiles - 1 - blockIdx.x; }

// This block's key block, n_kb - 1 for the first block of head h to start, then n_kb - 2, ...
// ticket points at head h's counter, zero before the launch; slot is an int of the block's
// dynamic shared memory (a static one would cost the kernel 1 KB of its shared memory to
// alignment); one block barrier.
__device__ __forceinline__ int key_block_by_ticket(unsigned* ticket, int n_kb, int* slot) {
  if (threadIdx.x == 0) *slot = n_kb - 1 - (int)atomicAdd(ticket, 1u);
  __syncthreads();
  return *slot;
}

}  // namespace attn
