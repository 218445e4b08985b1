// Test-only fault injection (--fault): a rank that crashes, hangs or exits at a given step.
#pragma once
#include "train/dist.h"
#include "train/options.h"

namespace train {

// Test-only fault injection (--fault RANK:STEP:KIND, checked when parsed): crash throws an
// error, hang stops the rank without exiting, exit ends the process at once (as a kill would).
void inject_fault(const Options& o, const dist::Context& ctx, int step);

}  // namespace train
