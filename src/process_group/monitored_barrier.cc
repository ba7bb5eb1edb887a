// monitored_barrier (distributed.h): a barrier through group rank 0 that
// names the ranks that did not arrive, built on point-to-point messages as
// torch's gloo builds it, with gloo's wording ("Rank 1 failed to pass
// monitoredBarrier in 2000 ms") so that tools matching it keep working.
//
// Each rank other than 0 sends rank 0 one byte and waits for rank 0's
// verdict; rank 0 waits for every byte until the deadline (a zero timeout:
// only the bytes already there count), then sends every
// rank the verdict: a pass, or who failed (so that every rank that arrived
// raises the same report at once instead of waiting out its timeout). The
// verdict is int64 [kind, timeout ms, count, rank...].

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/error_text.h"
#include "group_resolve.h"
#include "tdist/distributed.h"
#include "tdist/errors.h"
#include "validate.h"

namespace tdist {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

enum Verdict : int64_t { kPassed = 0, kTimedOut = 1, kNetwork = 2, kOther = 3 };

// Tags in [-2^30, 0), one per barrier of a group: ranks count the barriers
// of each group alike, so a late byte of a failed barrier (a rank that
// arrived after rank 0 gave up) can never pass a later one.
int next_tag(const Group& group) {
  static std::mutex mutex;
  static std::map<const ProcessGroup*, std::pair<std::weak_ptr<ProcessGroup>, uint32_t>> counts;
  std::lock_guard<std::mutex> lock(mutex);
  std::erase_if(counts, [](const auto& entry) { return entry.second.first.expired(); });
  auto& [owner, count] = counts[group.get()];
  if (owner.lock() != group) {  // a new group where a freed one lived
    owner = group;
    count = 0;
  }
  return static_cast<int>(0xC0000000u | (count++ & 0x3fffffffu));
}

// "Rank 1" / "Ranks 1, 2", with the global ranks when they differ.
std::string ranks_text(const ProcessGroup& g, const std::vector<int64_t>& ranks) {
  std::string group_list;
  std::string global_list;
  bool same = true;
  for (int64_t r : ranks) {
    const int global = g.global_ranks()[static_cast<size_t>(r)];
    same = same && global == r;
    group_list += (group_list.empty() ? "" : ", ") + std::to_string(r);
    global_list += (global_list.empty() ? "" : ", ") + std::to_string(global);
  }
  std::string text = (ranks.size() > 1 ? "Ranks " : "Rank ") + group_list;
  return same ? text : text + " (global rank" + (ranks.size() > 1 ? "s " : " ") + global_list + ")";
}

// gloo's sentence, then what tdist knows about why.
std::string failure_text(const ProcessGroup& g, const std::vector<int64_t>& failed, int64_t timeout_ms,
                         int64_t kind, bool wait_all_ranks) {
  std::string text =
      ranks_text(g, failed) + " failed to pass monitoredBarrier in " + std::to_string(timeout_ms) + " ms";
  if (kind == kTimedOut)
    text += failed.size() > 1 ? ": they did not arrive in time" : ": it did not arrive in time";
  if (!wait_all_ranks && kind == kTimedOut) text += " (the first one found; wait_all_ranks=true names all)";
  return text;
}

[[noreturn]] void raise(int64_t kind, const std::string& text) {
  if (kind == kTimedOut) throw DistTimeoutError(text);
  if (kind == kNetwork) throw DistNetworkError(text);
  throw DistBackendError(text);
}

int64_t verdict_of(const std::exception_ptr& error) {
  switch (error_kind(error)) {
    case ErrorKind::kTimeout:
      return kTimedOut;
    case ErrorKind::kNetwork:
      return kNetwork;
    default:
      return kOther;
  }
}

void as_member(const Group& g, int tag, Millis timeout) {
  const int root = g->global_ranks()[0];
  Tensor token = Tensor::zeros(DType::kUInt8, {1});
  Tensor verdict = Tensor::zeros(DType::kInt64, {g->size() + 2});
  auto sent = detail::isend_reserved_tag(token, root, g, tag);
  auto released = detail::irecv_reserved_tag(verdict, root, g, tag);
  // As gloo: rank 0 enforces `timeout`; the others wait at least the group's
  // timeout, since rank 0 may enter the barrier after them.
  const Millis wait = std::max(timeout, g->timeout());
  const std::string me = "Rank " + std::to_string(g->rank());
  try {
    sent->wait(wait);
    released->wait(wait);
  } catch (const DistTimeoutError&) {
    throw DistTimeoutError("monitored_barrier: " + me +
                           " successfully reached monitoredBarrier, but rank 0 " +
                           "did not release it within " + std::to_string(wait.count()) +
                           " ms; rank 0 reports which ranks did not arrive");
  } catch (...) {
    const auto error = std::current_exception();
    raise(verdict_of(error), "monitored_barrier: " + me +
                                 " successfully reached monitoredBarrier, but received errors while waiting "
                                 "for send/recv from rank 0: " +
                                 exception_text(error));
  }
  const auto* v = static_cast<const int64_t*>(verdict.data());
  if (v[0] == kPassed) return;
  const std::vector<int64_t> failed(v + 3, v + 3 + std::clamp<int64_t>(v[2], 0, g->size() - 1));
  // gloo's sentence for a member that rank 0 failed, then rank 0's report.
  raise(v[0],
        "monitored_barrier: " + me +
            " successfully reached monitoredBarrier, but received errors while waiting for send/recv from "
            "rank 0: rank 0 reports: " +
            failure_text(*g, failed, v[1], v[0], true));
}

// Sends `verdict` to every rank but 0 and waits for the sends. Ranks that
// have not arrived get it too: one that reaches this barrier late then
// raises rank 0's report at once (the tag is this barrier's alone).
void answer(const Group& g, int tag, const std::vector<int64_t>& verdict) {
  Tensor message = Tensor::from_vector(verdict);
  std::vector<WorkPtr> sends;
  for (int r = 1; r < g->size(); ++r) {
    sends.push_back(detail::isend_reserved_tag(message, g->global_ranks()[static_cast<size_t>(r)], g, tag));
  }
  for (auto& send : sends) send->wait(g->timeout());
}

void as_root(const Group& g, int tag, Millis timeout, bool wait_all_ranks) {
  const auto deadline = Clock::now() + timeout;
  std::vector<WorkPtr> arrivals(static_cast<size_t>(g->size()));
  for (int r = 1; r < g->size(); ++r) {
    arrivals[static_cast<size_t>(r)] = detail::irecv_reserved_tag(
        Tensor::zeros(DType::kUInt8, {1}), g->global_ranks()[static_cast<size_t>(r)], g, tag);
  }
  std::vector<int64_t> failed;
  std::exception_ptr first_error;  // of a rank whose connection failed
  bool out_of_time = false;        // the deadline passed before rank 0 waited for the first one missing
  for (int r = 1; r < g->size() && (wait_all_ranks || failed.empty()); ++r) {
    // One deadline for all: every byte that came in time has been read by
    // the time it passes (waiting drives the whole transport), so ranks
    // after a missing one are judged without waiting any longer.
    const auto left = std::max(Millis(0), std::chrono::duration_cast<Millis>(deadline - Clock::now()));
    try {
      if (!arrivals[static_cast<size_t>(r)]->get_future()->wait_for(left, "monitored_barrier")) {
        out_of_time = out_of_time || (failed.empty() && left.count() == 0);
        failed.push_back(r);
      }
    } catch (...) {
      failed.push_back(r);
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (failed.empty()) {
    std::vector<int64_t> pass(static_cast<size_t>(g->size() + 2), 0);
    pass[1] = timeout.count();
    try {
      answer(g, tag, pass);
    } catch (...) {
      const auto error = std::current_exception();
      raise(verdict_of(error),
            "monitored_barrier: every rank arrived, but rank 0 could not release them all: " +
                exception_text(error));
    }
    return;
  }
  const int64_t kind = first_error ? verdict_of(first_error) : kTimedOut;
  std::vector<int64_t> verdict = {kind, timeout.count(), static_cast<int64_t>(failed.size())};
  verdict.insert(verdict.end(), failed.begin(), failed.end());
  verdict.resize(static_cast<size_t>(g->size()) + 2, 0);
  try {
    answer(g, tag, verdict);
  } catch (...) {
    // The report below matters more than a rank that cannot be told (dead).
  }
  std::string text = "monitored_barrier: ";
  // gloo's sentence when its time was up before it could wait for anyone
  // (a zero timeout, or a rank 0 that came too late itself).
  if (out_of_time && !wait_all_ranks && !first_error)
    text += "Rank 0 timed out in monitoredBarrier after " + std::to_string(timeout.count()) + " ms: ";
  text += failure_text(*g, failed, timeout.count(), kind, wait_all_ranks);
  if (first_error) text += ": " + exception_text(first_error);
  raise(kind, text);
}

}  // namespace

void monitored_barrier(const Group& group, std::optional<Millis> timeout, bool wait_all_ranks) {
  Group g = detail::resolve_group(group, "monitored_barrier");
  if (g->rank() < 0) return;
  const Millis limit = timeout.value_or(g->timeout());
  // Zero is allowed, as gloo allows it: only the ranks already there pass.
  if (limit.count() < 0) {
    throw DistInvalidArgument("monitored_barrier: timeout must not be negative, got " +
                              std::to_string(limit.count()) + " ms");
  }
  if (g->size() == 1) return;
  const int tag = next_tag(g);
  if (g->rank() == 0) {
    as_root(g, tag, limit, wait_all_ranks);
  } else {
    as_member(g, tag, limit);
  }
}

}  // namespace tdist
