#pragma once

// The agreement under shrink and agree (distributed.h): the survivors of a
// group decide, through the group's store, who takes part and what the
// bitwise AND of their flags is. The store is linearizable, so the first
// decision written (compare_set) is the one every survivor adopts, however
// many ranks die meanwhile; the group's own connections may be broken.
//
// One round, under a key prefix of its own ("tdist/gen/<k>/ft/<n>/", k the
// group's generation and n counting its shrink and agree calls since it
// connected; ProcessGroupTdist::next_round_prefix):
//   1. each survivor writes "in/<rank>" = its flag, then keeps writing
//      "dead/<r>" for every rank r it knows to have died;
//   2. once every rank is in or dead (or this survivor's timeout passed),
//      it proposes the ranks that are in and not dead, and the AND of their
//      flags, with compare_set("decision", "", proposal);
//   3. everyone adopts what "decision" holds; a survivor that is not in it
//      (it came too late) raises.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tdist/store.h"

namespace tdist::detail {

/// What one round decided: the ranks that take part, ascending, and the
/// bitwise AND of their flags.
struct Decision {
  std::vector<int> members;
  int64_t value = -1;
  bool operator==(const Decision&) const = default;
};

/// "<value>|<r0>,<r1>,..." and back; decode raises DistStoreError on a
/// value that is not one.
std::string encode_decision(const Decision& decision);
Decision decode_decision(std::string_view text);

/// "0, 2, 3" ("none" for no ranks), for messages.
std::string rank_list(const std::vector<int>& ranks);

/// How a round learns that rank r died (the group's peer_crashed).
using KnownDead = std::function<bool(int rank)>;

/// Runs one round for `rank` of `size` over `store` under `prefix`; `op`
/// names the call in errors. Returns the decision, which holds `rank`;
/// raises DistBackendError if the others decided without it, DistStoreError
/// if the store fails. Waits at most `timeout` for the ranks that are
/// neither in nor known dead.
Decision run_round(Store& store, const std::string& prefix, int rank, int size, int64_t flag,
                   const KnownDead& known_dead, std::chrono::milliseconds timeout, std::string_view op);

}  // namespace tdist::detail
