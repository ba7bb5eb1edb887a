#pragma once

// The messages a transport received before any receive asked for them, in
// arrival order, with an index of their calls' sequence numbers.
//
// Why the index: before and after every call, each rank asks its transport
// whether a peer sent it a message of an earlier call, or of this call with
// other arguments (Transport::conflicting_message). A root that broadcasts
// in a loop returns from each call at once and runs ahead; its peers then
// hold thousands of its messages here. A pass over all of them per call made
// the peers quadratic: 100 ms of 8-byte broadcasts from a root (tdist-bench's
// settle) took a peer over a minute on two test hosts. With the index the
// question costs a lookup, and the pass happens only when a conflict is
// there to be named.

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <utility>

#include "common/call_signature.h"

namespace tdist::transport {

/// Counts messages by call number (collective calls only: point-to-point
/// messages and unsigned ones are never of an earlier call) and keeps the
/// signature they carry, so that `may_conflict` answers without a pass.
/// Pure bookkeeping: tested alone in tests/transport/test_unexpected_messages.cc.
class CallSeqIndex {
 public:
  static bool indexed(const tdist::detail::CallSignature& sig) {
    return !sig.empty() && sig.kind != tdist::detail::CallKind::kPointToPoint;
  }

  void add(const tdist::detail::CallSignature& sig) {
    if (!indexed(sig)) return;
    auto [it, inserted] = by_seq_.try_emplace(sig.seq, Entry{0, sig, false});
    ++it->second.count;
    if (!inserted && !(it->second.sig == sig)) it->second.mixed = true;
  }

  void remove(const tdist::detail::CallSignature& sig) {
    if (!indexed(sig)) return;
    auto it = by_seq_.find(sig.seq);
    if (it != by_seq_.end() && --it->second.count == 0) by_seq_.erase(it);
  }

  void clear() { by_seq_.clear(); }

  /// False only if no indexed message is of a call before `mine` or of
  /// `mine`'s call with another signature. True if one is, and also when
  /// messages of `mine`'s call came with two signatures (then a pass over
  /// the messages decides).
  bool may_conflict(const tdist::detail::CallSignature& mine) const {
    if (by_seq_.empty()) return false;
    if (by_seq_.begin()->first < mine.seq) return true;
    auto it = by_seq_.find(mine.seq);
    return it != by_seq_.end() && (it->second.mixed || !(it->second.sig == mine));
  }

 private:
  struct Entry {
    size_t count;
    tdist::detail::CallSignature sig;  // of the first message of this number
    bool mixed;                        // a message of this number carried another
  };
  std::map<uint64_t, Entry> by_seq_;
};

/// A std::list of received messages (each with a `sig` member set before it
/// is added and never changed) whose every insertion and removal goes
/// through here, so that the index cannot drift from the list.
template <typename Message>
class UnexpectedMessages {
 public:
  using iterator = typename std::list<Message>::iterator;
  using const_iterator = typename std::list<Message>::const_iterator;

  Message& push_back(Message message) {
    messages_.push_back(std::move(message));  // first: if it throws, nothing was indexed
    index_.add(messages_.back().sig);
    return messages_.back();
  }

  iterator erase(iterator it) {
    index_.remove(it->sig);
    return messages_.erase(it);
  }

  void clear() {
    messages_.clear();
    index_.clear();
  }

  /// The first message, in arrival order, of an earlier call than `mine` or
  /// of `mine`'s call with another signature; end() if there is none.
  const_iterator first_conflict(const tdist::detail::CallSignature& mine) const {
    if (!index_.may_conflict(mine)) return messages_.end();
    for (auto it = messages_.begin(); it != messages_.end(); ++it) {
      const auto& sig = it->sig;
      if (CallSeqIndex::indexed(sig) && (sig.seq < mine.seq || (sig.seq == mine.seq && !(sig == mine))))
        return it;
    }
    return messages_.end();
  }

  bool empty() const { return messages_.empty(); }
  iterator begin() { return messages_.begin(); }
  iterator end() { return messages_.end(); }
  const_iterator begin() const { return messages_.begin(); }
  const_iterator end() const { return messages_.end(); }

 private:
  std::list<Message> messages_;
  CallSeqIndex index_;
};

}  // namespace tdist::transport
