// Plain CPU reference of masked attention, forward and backward, in fp64. It implements the
// table of docs/masks.md literally, term by term, and shares no code with the kernels' mask logic
// (mask.h), so the two can check each other.
//
// Layout as the kernels: q, k, v, o, dout, dq, dk, dv are [T, H, D] (row stride H*D);
// lse is [H, T]. Inputs are float arrays (holding bf16-representable values in the tests).
// bf16_steps = true is a plain bf16 attention, as PyTorch's math path computes it on bf16
// tensors: every matmul result and stored tensor (scores, probabilities, O, dP, dS and the
// gradients) is rounded to bf16 before its next use, rowsum(dO * O) is formed from that bf16 O,
// and sums run in high precision: the tests use it to measure how much error
// bf16 alone brings, and allow the kernel twice that.
#pragma once
#include <cstdint>
#include <vector>

namespace ref {

struct Mask {
  bool causal = true;
  int window = 0;  // 0: none
  bool bidir = false;
  bool blocks = false;  // window in blocks of 128
  int prefix = 0;       // prefix-LM (with causal): k <= q or k - start(q) < prefix; 0: off
  const int32_t* doc = nullptr;
};

bool keep(const Mask& m, int q, int k);

// The first position of q's document (0 without documents): the first position whose id
// equals doc[q], found by walking back.
int doc_start(const Mask& m, int q);

// One query row: o_row[D] and its log-sum-exp (natural log of sum exp(scale * q.k)).
void forward_row(const float* q, const float* k, const float* v, int T, int H, int D, const Mask& m, int h, int row,
                 double* o_row, double* lse, bool bf16_steps = false);

void forward(const float* q, const float* k, const float* v, int T, int H, int D, const Mask& m, std::vector<double>& o,
             std::vector<double>& lse, bool bf16_steps = false);

void backward(const float* q, const float* k, const float* v, const float* dout, int T, int H, int D, const Mask& m,
              std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv, bool bf16_steps = false);

// dQ of one query row (fp64), for checks on long sequences where the full backward is too slow.
void backward_dq_row(const float* q, const float* k, const float* v, const float* dout, int T, int H, int D,
                     const Mask& m, int h, int row, double* dq_row);

float round_bf16(float x);

}  // namespace ref
