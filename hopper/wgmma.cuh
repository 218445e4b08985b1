// sm90 (Hopper) warpgroup MMA (wgmma) on tiles in shared memory laid out as the 128-byte swizzle
// that wgmma and the TMA (hopper/tma.cuh) read: the attention kernels and the GEMM (gemm/) use it.
//
// Tile layout ("SW128"): ROWS x D bf16 stored as D/64 column panels, each ROWS x 64 (128 bytes a
// row); the 16-byte chunk c of row r sits at chunk c ^ (r % 8) of its row. Every tile starts on
// a 1024-byte boundary (8 rows x 128 bytes: one swizzle atom).
//
// wgmma.m64nNk16 (one warpgroup = 4 warps, 128 threads): D[64 x N] (+)= A[64 x 16] B[16 x N].
//   wgmma_ss: A and B from shared memory, "K-major" (rows of A / rows of B^T contiguous in k:
//             S = Q K^T with Q and K as stored) or, with TA / TB, "MN-major" (dV += P^T dO with dO
//             as stored; dQ = dS K with dS^T and K as stored).
//   wgmma_rs: A from registers, B "MN-major" (rows of B contiguous in n): O += P V with V as
//             stored ([key][d]: k = key, n = d).
// Register fragments are those of mma.m16n8k16 (common/tensor_core.cuh), warp w of the warpgroup holding rows
// 16w..16w+15: accumulator d[j][0..3] = (row g, cols 8j+2t, +1), (row g+8, same); A fragment as
// mma's A. So c_to_a turns two accumulator blocks into the A fragment of the next wgmma.
//
// Shared-memory descriptors (PTX ISA, "matrix descriptor"): start address, LBO, SBO (all >> 4),
// swizzle mode 1 = 128B in bits 62-63. With 128B swizzle:
//   K-major : 8 rows at 128 B, 8-row groups at SBO = 1024 B; LBO unused. The k16 step j inside a
//             64-wide panel advances the start by 32 j bytes (the swizzle is applied on address
//             bits, so this lands on the right chunks).
//   MN-major: 64 n-elements contiguous (one 128 B row), the next 64 (next panel) at LBO, 8 k-rows
//             at 128 B, 8-row groups at SBO = 1024 B.
// Ordering: shared memory written by cp.async (generic proxy) needs fence.proxy.async before a
// wgmma (async proxy) reads it; wgmma_fence before the first wgmma that reads registers written
// by ordinary instructions; commit / wait to consume the results.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "common/tensor_core.cuh"

namespace hopper {

using namespace tc;
typedef __nv_bfloat16 bf16;

// Element offset of (row, 8-element chunk c) in an SW128 tile of ROWS rows.
template <int ROWS>
__device__ __forceinline__ int sw128(int row, int c) {
  return (c >> 3) * ROWS * 64 + row * 64 + (((c & 7) ^ (row & 7)) << 3);
}

__device__ __forceinline__ uint64_t desc(const bf16* p, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return (uint64_t)((smem_addr(p) & 0x3FFFF) >> 4) | ((uint64_t)(lbo_bytes >> 4) << 16) |
         ((uint64_t)(sbo_bytes >> 4) << 32) | (1ull << 62);
}
// A descriptor moved on by a byte offset: the start address (bits 0-13, 16-byte units) of a
// shared address, which is below 2^18, so the sum stays inside its field and only the low word
// changes. The gemm loops below make each operand's descriptor once and step it this way: one
// add a wgmma, where building each from its pointer took about ten instructions (results/attention_design/README.md,
// Loads, stores and the set-up of a block).
__device__ __forceinline__ uint64_t desc_plus(uint64_t d, uint32_t bytes) {
  return (d & 0xFFFFFFFF00000000ull) | (uint32_t)((uint32_t)d + (bytes >> 4));
}
// The byte offset of k16 step kk in a K-major SW128 tile of ROWS rows, and in an MN-major one.
template <int ROWS>
__host__ __device__ constexpr uint32_t k_step_bytes(int kk) {
  return (uint32_t)(((kk >> 2) * ROWS * 64 + (kk & 3) * 16) * 2);
}
__host__ __device__ constexpr uint32_t mn_step_bytes(int kk) { return (uint32_t)(kk * 16 * 64 * 2); }
// K-major operand: rows r0.. (a multiple of 8) of an SW128 tile of ROWS rows, k16 step kk.
template <int ROWS>
__device__ __forceinline__ uint64_t desc_k(const bf16* tile, int r0, int kk) {
  return desc_plus(desc(tile + r0 * 64, 16, 1024), k_step_bytes<ROWS>(kk));
}
// MN-major operand: k rows 16 kk..16 kk+15 of an SW128 tile of ROWS rows, all of its columns.
template <int ROWS>
__device__ __forceinline__ uint64_t desc_mn(const bf16* tile, int kk) {
  return desc_plus(desc(tile, ROWS * 128, 1024), mn_step_bytes(kk));
}

// Four 8 x 8 bf16 matrices from registers into shared memory (stmatrix): lanes 8m..8m+7 give the
// addresses of matrix m's rows (16 bytes each), r[m] holds this thread's pair of matrix m (row
// lane / 4, columns 2 (lane % 4) and + 1), which is an accumulator tile's layout: c_to_a's
// fragment of two n8 blocks stores with one instruction.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}
// A warp's 16 rows of a C-layout accumulator with NB n8 blocks (its rows row16.. of the tile,
// lane / 4 and + 8 this thread's) as bf16 into an SW128 tile of ROWS rows, two blocks a stmatrix.
template <int ROWS, int NB>
__device__ __forceinline__ void stage_acc_sw128(bf16* tile, const float (&acc)[NB][4], int row16, int lane) {
  const int mrow = row16 + (lane & 7) + (lane & 8);  // lanes 8m..8m+7 address matrix m's rows
#pragma unroll
  for (int nb = 0; nb < NB; nb += 2) {
    uint32_t f[4];
    c_to_a(f, acc[nb], acc[nb + 1]);
    stmatrix_x4(smem_addr(tile + sw128<ROWS>(mrow, nb + (lane >> 4))), f);
  }
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator across a wgmma issue or wait.
template <int NB>
__device__ __forceinline__ void reg_fence(float (&d)[NB][4]) {
#pragma unroll
  for (int i = 0; i < NB; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[i][e])::"memory");
}

// D[64 x N] = (scale_d ? D : 0) + A B, A and B descriptors, K-major unless TA / TB is 1 (then
// MN-major: A's m, or B's n, contiguous).
template <int N, int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t a, uint64_t b, int scale_d);
// D[64 x N] = (scale_d ? D : 0) + A B, A in registers, B an MN-major descriptor.
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t b, int scale_d);

#define WGMMA_F4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define WGMMA_D16 WGMMA_F4(0), WGMMA_F4(1), WGMMA_F4(2), WGMMA_F4(3)
#define WGMMA_D32 WGMMA_F4(0), WGMMA_F4(1), WGMMA_F4(2), WGMMA_F4(3), WGMMA_F4(4), WGMMA_F4(5), WGMMA_F4(6), WGMMA_F4(7)
#define WGMMA_D64 WGMMA_D32, WGMMA_F4(8), WGMMA_F4(9), WGMMA_F4(10), WGMMA_F4(11), WGMMA_F4(12), WGMMA_F4(13), WGMMA_F4(14), WGMMA_F4(15)
#define WGMMA_D128                                                                                           \
  WGMMA_D64, WGMMA_F4(16), WGMMA_F4(17), WGMMA_F4(18), WGMMA_F4(19), WGMMA_F4(20), WGMMA_F4(21), WGMMA_F4(22), WGMMA_F4(23),         \
      WGMMA_F4(24), WGMMA_F4(25), WGMMA_F4(26), WGMMA_F4(27), WGMMA_F4(28), WGMMA_F4(29), WGMMA_F4(30), WGMMA_F4(31)
#define WGMMA_R16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define WGMMA_R32                                                                                                    \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30," \
  "%31}"
#define WGMMA_R64                                                                                                    \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30," \
  "%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,"   \
  "%59,%60,%61,%62,%63}"

#define WGMMA_R128 \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29," \
  "%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57," \
  "%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85," \
  "%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110," \
  "%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"

template <int N, int TA, int TB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t a, uint64_t b, int scale_d) {
  static_assert(N == 32 || N == 64 || N == 128 || N == 256, "wgmma_ss: N is 32, 64, 128 or 256");
  if constexpr (N == 32)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " WGMMA_R16 ", %16, %17, p, 1, 1, %19, %20;\n}\n"
        : WGMMA_D16
        : "l"(a), "l"(b), "r"(scale_d), "n"(TA), "n"(TB));
  else if constexpr (N == 64)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_R32 ", %32, %33, p, 1, 1, %35, %36;\n}\n"
        : WGMMA_D32
        : "l"(a), "l"(b), "r"(scale_d), "n"(TA), "n"(TB));
  else if constexpr (N == 128)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_R64 ", %64, %65, p, 1, 1, %67, %68;\n}\n"
        : WGMMA_D64
        : "l"(a), "l"(b), "r"(scale_d), "n"(TA), "n"(TB));
  else
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " WGMMA_R128 ", %128, %129, p, 1, 1, %131, %132;\n}\n"
        : WGMMA_D128
        : "l"(a), "l"(b), "r"(scale_d), "n"(TA), "n"(TB));
}
template <>
__device__ __forceinline__ void wgmma_rs<64>(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_R32 ", {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
      : WGMMA_D32
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d));
}
template <>
__device__ __forceinline__ void wgmma_rs<128>(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_R64 ", {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
      : WGMMA_D64
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d));
}
#undef WGMMA_F4
#undef WGMMA_D16
#undef WGMMA_D32
#undef WGMMA_D64
#undef WGMMA_D128
#undef WGMMA_R128
#undef WGMMA_R16
#undef WGMMA_R32
#undef WGMMA_R64

// Acc[64 x N] (+)= A B^T over K = KSTEPS * 16, A rows r0.. of an SW128 tile of AROWS rows, B an
// SW128 tile of N rows (both K-major). Issues the wgmmas; the caller commits and waits.
template <int N, int KSTEPS, int AROWS>
__device__ __forceinline__ void gemm_ss(float (&acc)[N / 8][4], const bf16* a, int r0, const bf16* b, bool accumulate) {
  const uint64_t da = desc_k<AROWS>(a, r0, 0), db = desc_k<N>(b, 0, 0);
#pragma unroll
  for (int kk = 0; kk < KSTEPS; kk++)
    wgmma_ss<N>(acc, desc_plus(da, k_step_bytes<AROWS>(kk)), desc_plus(db, k_step_bytes<N>(kk)), accumulate || kk > 0);
}

// Acc[64 x N] (+)= A B over K = KSTEPS * 16 with A rows r0.. of an SW128 tile of AROWS rows
// (K-major) and B an SW128 tile of BROWS >= 16 KSTEPS rows and N columns (MN-major): dV += P^T dO
// with P^T in shared memory.
template <int N, int KSTEPS, int AROWS, int BROWS>
__device__ __forceinline__ void gemm_ss_kmn(float (&acc)[N / 8][4], const bf16* a, int r0, const bf16* b, bool accumulate) {
  const uint64_t da = desc_k<AROWS>(a, r0, 0), db = desc_mn<BROWS>(b, 0);
#pragma unroll
  for (int kk = 0; kk < KSTEPS; kk++)
    wgmma_ss<N, 0, 1>(acc, desc_plus(da, k_step_bytes<AROWS>(kk)), desc_plus(db, mn_step_bytes(kk)), accumulate || kk > 0);
}

// Acc[64 x N] = A B over K = KSTEPS * 16 with A and B both MN-major SW128 tiles: A's 64 columns
// (one panel) of AROWS >= 16 KSTEPS k-rows, B's N columns of BROWS k-rows: dQ = dS K with dS^T
// and K as stored (keys as rows).
template <int N, int KSTEPS, int AROWS, int BROWS>
__device__ __forceinline__ void gemm_ss_mnmn(float (&acc)[N / 8][4], const bf16* a, const bf16* b) {
  const uint64_t da = desc_mn<AROWS>(a, 0), db = desc_mn<BROWS>(b, 0);
#pragma unroll
  for (int kk = 0; kk < KSTEPS; kk++)
    wgmma_ss<N, 1, 1>(acc, desc_plus(da, mn_step_bytes(kk)), desc_plus(db, mn_step_bytes(kk)), kk > 0);
}

// Acc[64 x N] += P[64 x 16 KB] B, P as accumulator-layout scores in registers (converted to bf16
// A fragments), B an SW128 tile of BROWS >= 16 KB rows and N columns (MN-major).
template <int N, int KB, int BROWS>
__device__ __forceinline__ void gemm_rs(float (&acc)[N / 8][4], const uint32_t (&pa)[KB][4], const bf16* b) {
  const uint64_t db = desc_mn<BROWS>(b, 0);
#pragma unroll
  for (int j = 0; j < KB; j++) wgmma_rs<N>(acc, pa[j], desc_plus(db, mn_step_bytes(j)), 1);
}


}  // namespace hopper
