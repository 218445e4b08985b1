// When each point's exchange starts (train/exchange_windows.h), walked through the backward's
// calls as gpt::Model::backward makes them: ready(L) after the forward, then for each layer
// i = L-1 .. 0 at_attention(i) before its attention backward and ready(i) after it, and ready(-1)
// at the end. Under --grad-sync embeddings (the plan's points: the head, value_embed.1 .. L/2-1,
// the end) every point starts once, after its gradients are final, in the first attention
// window that no other point took, or at the end; with the windows off each starts at itself.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/check.h"
#include "train/exchange_windows.h"
#include "train/shard_plan.h"

// Where each point started: the layer whose attention window it took, or -1 at the end (and,
// windows off, the point itself). Two steps, so that a step leaves nothing behind.
static std::map<int, int> walk(train::ExchangeWindows& w, int L, int* starts, int* crowded, int* early) {
  std::map<int, int> at;
  *starts = *crowded = *early = 0;
  for (int step = 0; step < 2; step++) {
    auto take = [&](const std::vector<int>& pts, int where, int final_from) {
      for (int p : pts) {
        (*starts)++;
        if (step == 0) at[p] = where;
        // a point's gradients are final at the point itself: it must not start at a window before
        if (where != -1 && where != final_from && where >= p) (*early)++;
      }
    };
    take(w.ready(L), L, L);
    for (int i = L - 1; i >= 0; i--) {
      const std::vector<int> now = w.at_attention();
      if (now.size() > 1) (*crowded)++;
      take(now, i, L + 1);
      take(w.ready(i), i, i);
    }
    take(w.ready(-1), -1, -1);
    CHECK(w.idle(), "L=%d: points still waiting after the end of the backward", L);
  }
  *starts /= 2;
  return at;
}

int main() {
  for (int L : {12, 4, 2}) {
    model::Config cfg;
    cfg.vocab = 50304, cfg.width = 768, cfg.heads = 6, cfg.layers = L, cfg.hidden = 3072;
    const model::Layout layout(cfg);
    const train::ShardPlan plan = train::shard_plan(layout, L, 4, 1, train::Sync::kEmbeddings);
    std::set<int> points;
    for (const auto& kv : plan.points) points.insert(kv.first);

    train::ExchangeWindows on(true, points);
    int starts = 0, crowded = 0, early = 0;
    const std::map<int, int> at = walk(on, L, &starts, &crowded, &early);
    CHECK(starts == (int)points.size(), "L=%d: %d starts, want one for each of the %zu points", L, starts, points.size());
    int missing = 0;
    for (int p : points) missing += !at.count(p);
    CHECK(missing == 0 && at.size() == points.size(), "L=%d: %d points never started; %zu started", L, missing, at.size());
    CHECK(crowded == 0, "L=%d: %d windows took more than one point", L, crowded);
    CHECK(early == 0, "L=%d: %d points started before their gradients were final", L, early);
    CHECK(at.count(-1) && at.at(-1) == -1, "L=%d: the end's point does not start at the end", L);
    // the first free window after each point: the head at layer L-1's attention, value_embed.j
    // (point j) at layer j-1's; j = 1 .. L/2-1, so none is left for the end
    std::map<int, int> want{{L, L - 1}, {-1, -1}};
    for (int j = 1; j < L / 2; j++) want[j] = j - 1;
    CHECK(at == want, "L=%d: the points did not start in the first free windows", L);
    for (const auto& [p, where] : at)
      if (where == -1) std::printf("  L=%d: point %d starts at the end of the backward\n", L, p);
      else std::printf("  L=%d: point %d starts with the attention backward of layer %d\n", L, p, where);

    // windows off (--grad-sync end, overlap): every point starts at itself, those without an
    // exchange too (the optimiser has nothing to do at them)
    train::ExchangeWindows off(false, points);
    int self = 0, total = 0;
    for (int p = L; p >= -1; p--) {
      const std::vector<int> now = off.ready(p);
      total += (int)now.size();
      self += now.size() == 1 && now[0] == p;
      CHECK(off.at_attention().empty(), "L=%d: windows off, yet a point waited for one", L);
    }
    CHECK(self == L + 2 && total == L + 2, "L=%d: windows off: %d of %d points started at themselves", L, self, L + 2);
  }
  // a point queued behind another waits for the next window; the end takes whatever still waits,
  // in order, before its own point
  train::ExchangeWindows w(true, {9, 8, 7, -1});
  CHECK(w.ready(9).empty() && w.ready(8).empty() && w.ready(7).empty(), "points started before a window");
  const std::vector<int> first = w.at_attention();
  CHECK(first == std::vector<int>{9}, "the first window took %zu points, want point 9", first.size());
  CHECK(w.ready(5).empty() && !w.idle(), "a point without an exchange was queued, or the queue emptied");
  const std::vector<int> end = w.ready(-1);
  CHECK((end == std::vector<int>{8, 7, -1}) && w.idle(), "the end started %zu points, want 8, 7, then -1", end.size());
  return test_summary("exchange-windows");
}
