// Plain CPU reference of the speedrun's optimisation (docs/model.md, optimisation), in fp64, over the
// reference model's parameter layout (reference_model.h).
//
//   Adam (beta1 0.8, beta2 0.95, eps 1e-8, bias-corrected): embed and value_embed at lr 0.6,
//   head at 0.008, the scalars (lambda, attn_lambda, skip) at 0.04.
//   Muon for the block matrices (wq, wk, wv, wo, wfc, wproj) at lr 0.05:
//     buf = m buf + (1 - m) g;  u = (1 - m) g + m buf  (Nesterov)
//     X = u / (||u||_F + 1e-7), transposed if rows > cols; five times:
//       A = X X^T;  X = 3.4445 X + (-4.7750 A + 2.0315 A A) X
//     transposed back;  W -= lr * max(1, fan_out/fan_in)^0.5 * X  (the record's max(1, rows/cols)^0.5
//     of PyTorch's [out][in] weight; with W stored [in][out] here: cols/rows; 2 for the MLP's Wfc)
//   Every learning rate is scaled by the schedule's multiplier.
// Schedules, for the update made at step s (0-based) of `steps`:
//   lr multiplier 1, then (steps - s) / cooldown over the last `cooldown` steps;
//   Muon momentum 0.85 -> 0.95 linearly over the first 300 steps;
//   window (blocks of 128) N(s) = floor(((1 - f) 64 + f 1792 + 64) / 128), f = s / steps.
#pragma once
#include <vector>

#include "model/reference_model.h"

namespace model_ref {

using model::group_of;
using model::OptimizerHyper;
using model::ParamGroup;
using model::Schedule;

struct OptimizerState {
  std::vector<double> m, v, buf;  // Adam moments and Muon momentum, in the parameter layout
  int adam_steps = 0;
};

// The Newton-Schulz orthogonalisation of one rows x cols matrix, in place (fp64).
void newton_schulz5(std::vector<double>& x, int rows, int cols);

// One update at schedule step `step` with gradient `grad` (same layout as p.data).
void optimizer_step(Params& p, const std::vector<double>& grad, OptimizerState& s, int step, const Schedule& sched,
                    const OptimizerHyper& hp = {});

}  // namespace model_ref
