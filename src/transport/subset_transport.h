#pragma once

// A view of some ranks of a transport as a transport of their own: rank i of
// the subset is members[i] of the parent. The hierarchical collectives use
// it to run the TCP algorithms among the ranks that share a local index on
// different hosts. Tags pass through unchanged: only one collective call
// (one sequence number) uses the parent at a time.

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tdist/errors.h"
#include "transport/transport.h"

namespace tdist::transport {

class SubsetTransport final : public Transport {
 public:
  SubsetTransport(Transport& parent, std::vector<int> members)
      : parent_(parent), members_(std::move(members)) {
    auto it = std::find(members_.begin(), members_.end(), parent_.rank());
    if (it == members_.end()) {
      throw DistBackendError("subset transport: rank " + std::to_string(parent_.rank()) + " is not a member");
    }
    rank_ = static_cast<int>(it - members_.begin());
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const char* name() const override { return parent_.name(); }

  using Transport::irecv;
  using Transport::isend;
  RequestPtr isend(int dst, uint64_t tag, const void* data, size_t nbytes,
                   const tdist::detail::CallSignature& sig) override {
    return parent_.isend(member(dst), tag, data, nbytes, sig);
  }
  RequestPtr irecv(int src, uint64_t tag, void* data, size_t nbytes,
                   const tdist::detail::CallSignature& sig) override {
    return parent_.irecv(member(src), tag, data, nbytes, sig);
  }
  /// The parent's: a conflicting message may come from any rank of the
  /// whole group (a peer outside this subset in another op), so its sender
  /// keeps the parent's number.
  std::optional<std::pair<int, tdist::detail::CallSignature>> conflicting_message(
      const tdist::detail::CallSignature& mine) const override {
    return parent_.conflicting_message(mine);
  }
  RequestPtr irecv_bytes(int src, uint64_t tag, std::shared_ptr<std::vector<uint8_t>> out) override {
    return parent_.irecv_bytes(member(src), tag, std::move(out));
  }
  bool wait(const RequestPtr& request, Clock::time_point deadline) override {
    return parent_.wait(request, deadline);
  }
  void begin_call() override { parent_.begin_call(); }
  void end_call() override { parent_.end_call(); }
  void abort(std::exception_ptr error) override { parent_.abort(std::move(error)); }
  bool peer_failed(int peer) const override { return parent_.peer_failed(member(peer)); }
  bool peer_crashed(int peer) const override { return parent_.peer_crashed(member(peer)); }
  std::exception_ptr abort_reason() const override { return parent_.abort_reason(); }
  bool aborted_by_peer() const override { return parent_.aborted_by_peer(); }
  void set_crash_breaks_group(bool breaks) override { parent_.set_crash_breaks_group(breaks); }
  std::exception_ptr take_rejection() override { return parent_.take_rejection(); }
  std::optional<tdist::detail::CallSignature> last_call_from(int peer) const override {
    return parent_.last_call_from(member(peer));
  }
  // A rank that waits long in a crossing or in its host's shared memory
  // tells every rank of the group, not only this subset's: a rank of
  // another subset may be the one blocked behind it (issue 49).
  void announce_waiting(const tdist::detail::CallSignature& sig) override { parent_.announce_waiting(sig); }
  bool tells_waiting() const override { return parent_.tells_waiting(); }
  void take_in() override { parent_.take_in(); }
  std::optional<uint64_t> waiting_in(int peer) const override { return parent_.waiting_in(member(peer)); }
  Transport& whole() override { return parent_.whole(); }

 private:
  int member(int r) const {
    if (r < 0 || r >= size()) {
      throw DistBackendError("subset transport: rank " + std::to_string(r) + " is not in [0, " +
                             std::to_string(size()) + ") (any-source receives are not supported here)");
    }
    return members_[static_cast<size_t>(r)];
  }

  Transport& parent_;
  std::vector<int> members_;
  int rank_ = 0;
};

}  // namespace tdist::transport
