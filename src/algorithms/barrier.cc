// The dissemination barrier (Hensgen, Finkel & Manber 1988): ceil(log2 p)
// rounds of empty messages, no root, any p.

#include "algorithms/algorithms.h"
#include "algorithms/patterns/dissemination.h"
#include "algorithms/tuning/tcp_model.h"

namespace tdist::algorithms {

void barrier(const CallContext& ctx, BarrierAlgo algo) {
  const int p = ctx.size();
  resolve_algo(algo, p);  // only one algorithm, but a bad TDIST_ALGO_BARRIER is still an error
  if (p == 1) return;
  detail::guarded(ctx, [&] {
    for (int k = 0; k < patterns::dissemination_num_steps(p); ++k) {
      const patterns::Step step = patterns::dissemination_step(ctx.rank(), p, k);
      // A rank must hear round k before it signals round k + 1, or the
      // signal would not vouch for everyone heard so far. Rounds can pair
      // the same ranks (p = 3), hence a tag per round.
      const uint64_t tag = ctx.tag(static_cast<uint32_t>(k));
      wait_all(ctx, {ctx.irecv(step.recv_from, tag, nullptr, 0), ctx.isend(step.send_to, tag, nullptr, 0)});
    }
  });
}

}  // namespace tdist::algorithms
