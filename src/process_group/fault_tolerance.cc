// revoke, shrink and agree (distributed.h) and the store round under shrink
// and agree (fault_tolerance.h).

#include "fault_tolerance.h"

#include <signal.h>

#include <algorithm>
#include <charconv>
#include <utility>

#include "common/env.h"
#include "common/owned_by_process.h"
#include "group_resolve.h"
#include "tdist/distributed.h"
#include "tdist/errors.h"
#include "tdist/logging.h"
#include "tdist_backend.h"
#include "validate.h"

namespace tdist {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long a survivor waits for the decision between two looks at who has
// come: short at first (the last to come usually decides at once), then
// longer, so that a wait of minutes does not flood the store.
constexpr milliseconds kFirstPoll{1};
constexpr milliseconds kLongestPoll{20};

std::string in_key(const std::string& prefix, int r) {
  return prefix + "in/" + std::to_string(r);
}
std::string dead_key(const std::string& prefix, int r) {
  return prefix + "dead/" + std::to_string(r);
}

int64_t parse_int64(std::string_view text, std::string_view what) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw DistStoreError("fault tolerance: " + std::string(what) + " \"" + std::string(text) +
                         "\" in the store is not a number (another program wrote the key?)");
  }
  return value;
}

// Test hook: TDIST_TESTONLY_FT_KILL_AFTER_JOIN lists "R" or "R@K" items
// (comma-separated): rank R dies by SIGKILL right after it joined any
// round, or only the group's K-th shrink or agree of its current
// generation (counted from 0), so
// tests can kill a rank in the middle of these calls at a known point.
void maybe_die_after_join(int rank, const std::string& prefix) {
  const std::string items = env_string("TDIST_TESTONLY_FT_KILL_AFTER_JOIN").value_or("");
  std::string_view rest = items;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t at = item.find('@');
    if (item.substr(0, at) != std::to_string(rank)) continue;
    if (at == std::string_view::npos || prefix.ends_with("ft/" + std::string(item.substr(at + 1)) + "/")) {
      raise(SIGKILL);
    }
  }
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out.empty() ? "none" : out;
}

std::string encode_decision(const Decision& decision) {
  std::string out = std::to_string(decision.value) + "|";
  for (size_t i = 0; i < decision.members.size(); ++i) {
    out += (i == 0 ? "" : ",") + std::to_string(decision.members[i]);
  }
  return out;
}

Decision decode_decision(std::string_view text) {
  const size_t bar = text.find('|');
  if (bar == std::string_view::npos) {
    throw DistStoreError("fault tolerance: the decision \"" + std::string(text) +
                         "\" in the store has no '|' (another program wrote the key?)");
  }
  Decision out;
  out.value = parse_int64(text.substr(0, bar), "the decision's value");
  std::string_view rest = text.substr(bar + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    out.members.push_back(static_cast<int>(parse_int64(rest.substr(0, comma), "a member's rank")));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return out;
}

Decision run_round(Store& store, const std::string& prefix, int rank, int size, int64_t flag,
                   const KnownDead& known_dead, milliseconds timeout, std::string_view op) {
  const std::string decision_key = prefix + "decision";
  const auto deadline = Clock::now() + timeout;
  // The deaths this rank knows of go to the store before it joins: a
  // survivor that sees it joined sees them too, and does not take a dead
  // rank that joined earlier for a member.
  std::vector<bool> reported(static_cast<size_t>(size), false);
  auto report_deaths = [&] {
    for (int r = 0; r < size; ++r) {
      const auto i = static_cast<size_t>(r);
      if (r != rank && !reported[i] && known_dead(r)) {
        store.set(dead_key(prefix, r), std::to_string(rank));
        reported[i] = true;
      }
    }
  };
  report_deaths();
  store.set(in_key(prefix, rank), std::to_string(flag));
  maybe_die_after_join(rank, prefix);
  milliseconds poll = kFirstPoll;
  for (;;) {
    if (store.check({decision_key})) {
      Decision decision = decode_decision(to_string(store.get(decision_key)));
      if (!std::binary_search(decision.members.begin(), decision.members.end(), rank)) {
        throw DistBackendError(std::string(op) + ": rank " + std::to_string(rank) +
                               " of the group came after the survivors had decided without it (members: " +
                               rank_list(decision.members) +
                               "); it counts as failed and must leave the group's work to them");
      }
      return decision;
    }
    // What this rank knows goes to the store, so that a survivor whose
    // transport has not seen a death yet (or cannot: an aborted one) does
    // not wait out its timeout for the dead.
    report_deaths();
    std::vector<bool> dead(static_cast<size_t>(size), false);
    std::vector<bool> in(static_cast<size_t>(size), false);
    bool everyone = true;
    for (int r = 0; r < size; ++r) {
      const auto i = static_cast<size_t>(r);
      dead[i] = r != rank && (reported[i] || store.check({dead_key(prefix, r)}));
      in[i] = r == rank || store.check({in_key(prefix, r)});
      everyone = everyone && (in[i] || dead[i]);
    }
    const auto now = Clock::now();
    if (everyone || now >= deadline) {
      // A rank that joined and died since is left out: a group with a dead
      // member would fail at its first call.
      Decision proposal{{}, -1};
      for (int r = 0; r < size; ++r) {
        const auto i = static_cast<size_t>(r);
        if (!in[i] || dead[i]) continue;
        proposal.members.push_back(r);
        const int64_t theirs = r == rank ? flag
                                         : parse_int64(to_string(store.get(in_key(prefix, r))),
                                                       "rank " + std::to_string(r) + "'s flag");
        proposal.value &= theirs;
      }
      if (!everyone) {
        std::vector<int> missing;
        for (int r = 0; r < size; ++r) {
          if (!in[static_cast<size_t>(r)] && !dead[static_cast<size_t>(r)]) missing.push_back(r);
        }
        TDIST_LOG(WARNING) << op << ": rank " << rank << " proposes to go on without rank(s) "
                           << rank_list(missing) << ", which did not come within " << timeout.count()
                           << " ms";
      }
      // The first proposal stays; the loop adopts whatever the key holds.
      store.compare_set(decision_key, {}, to_bytes(encode_decision(proposal)));
      continue;
    }
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - now) + milliseconds(1);
    try {
      store.wait({decision_key}, std::min(poll, left));
    } catch (const DistStoreTimeoutError&) {
      // Nobody decided yet: look at who has come again.
    }
    poll = std::min(poll * 2, kLongestPoll);
  }
}

}  // namespace detail

namespace {

using std::chrono::milliseconds;

// The group `op` runs on, which must be one of tdist's own of which this
// process is a member.
std::pair<Group, ProcessGroupTdist*> member_group(const Group& group, const char* op) {
  Group g = detail::resolve_group(group, op);
  if (g->rank() < 0) {
    std::string members;
    for (int r : g->global_ranks()) members += (members.empty() ? "" : ", ") + std::to_string(r);
    throw DistInvalidArgument(std::string(op) + ": this process is not a member of the group (global ranks " +
                              members + "); only members may call it");
  }
  auto* tdist_group = dynamic_cast<ProcessGroupTdist*>(g.get());
  if (tdist_group == nullptr) {
    throw DistBackendError(std::string(op) + ": backend " + g->backend_name() + " does not support " + op +
                           " (only tdist's own groups do)");
  }
  return {std::move(g), tdist_group};
}

// One round of shrink or agree on `group`; also returns its key prefix.
std::pair<detail::Decision, std::string> round_on(ProcessGroupTdist& group, int64_t flag,
                                                  std::optional<milliseconds> timeout, const char* op) {
  if (timeout) validate::positive_timeout(op, *timeout);
  if (group.forked_copy()) {
    // Its round would go through the parent's store connection, as the
    // parent's rank (revoked groups still take part: not check_usable).
    throw DistBackendError(std::string(op) + ": " + detail::forked_copy_text("group", group.owner_pid()));
  }
  // Under the group's generation, counted from 0 in each: the survivors
  // make these calls in the same order, and a replacement that created the
  // group anew counts as they do once they rebuilt it.
  std::string prefix = group.next_round_prefix();
  detail::Decision decision = detail::run_round(
      *group.store(), prefix, group.rank(), group.size(), flag,
      [&group](int r) { return group.peer_crashed(r); }, timeout.value_or(group.timeout()), op);
  return {std::move(decision), std::move(prefix)};
}

}  // namespace

void revoke(const Group& group) {
  auto [g, tdist_group] = member_group(group, "revoke");
  tdist_group->abort("the group was revoked (revoke()); shrink() and agree() still work on it");
}

Group shrink(const Group& group, std::optional<milliseconds> timeout) {
  auto [g, tdist_group] = member_group(group, "shrink");
  const auto [decision, prefix] = round_on(*tdist_group, -1, timeout, "shrink");
  ProcessGroupOptions options = g->options();
  options.global_ranks.clear();
  for (int r : decision.members) options.global_ranks.push_back(g->global_ranks()[static_cast<size_t>(r)]);
  const auto me = std::find(decision.members.begin(), decision.members.end(), g->rank());
  const int new_rank = static_cast<int>(me - decision.members.begin());
  TDIST_LOG(INFO) << "shrink: rank " << g->rank() << " of " << g->size() << " goes on as rank " << new_rank
                  << " of " << decision.members.size() << " (old ranks "
                  << detail::rank_list(decision.members) << ")";
  Group shrunk = create_process_group(g->backend_name(),
                                      std::make_shared<PrefixStore>(prefix + "group", tdist_group->store()),
                                      new_rank, static_cast<int>(decision.members.size()), options);
  detail::remember_group(shrunk);
  return shrunk;
}

int64_t agree(int64_t flag, const Group& group, std::optional<milliseconds> timeout) {
  auto [g, tdist_group] = member_group(group, "agree");
  return round_on(*tdist_group, flag, timeout, "agree").first.value;
}

}  // namespace tdist
