// The contract of transport/transport.h, run over every transport: TCP
// among the ranks, and a subset of a larger TCP group (SubsetTransport, as
// the hierarchical collectives use it, its ranks in another order than the
// parent's), and shared memory among the ranks of one host
// (ShmP2pTransport), with large messages read straight from the sender's
// memory and, again, streamed through the rings. Matching and order,
// sizes, unknown sizes, the call-matching hooks, a refused message's way
// back to its sender, abort and a peer's goodbye. A new transport joins by
// adding its Kind to with() and to the instantiation below.

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <optional>
#include <thread>

#include "common/call_signature.h"
#include "multirank.h"
#include "tdist/errors.h"
#include "transport/shm/shm_group.h"
#include "transport/shm/shm_p2p_transport.h"
#include "transport/subset_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "transport_harness.h"

namespace tdist::testing {
namespace {

using transport::kAnySource;

enum class Kind { kTcp, kSubset, kShm, kShmStreamed };

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kTcp:
      return "tcp";
    case Kind::kSubset:
      return "subset";
    case Kind::kShm:
      return "shm";
    case Kind::kShmStreamed:
      return "shm_streamed";
  }
  return "?";
}

// A rank's shared-memory transport and the TCP one it watches, destroyed
// in that order.
struct ShmRank {
  std::shared_ptr<Transport> tcp;
  std::unique_ptr<Transport> shm;
  ~ShmRank() { shm.reset(); }
};

// The parent rank of subset rank i: the parent has n + 1 ranks, and the
// subset takes ranks n, n - 1, ..., 1 (parent rank 0 only connects).
int parent_of(int n, int i) {
  return n - i;
}

// Runs fn on n ranks, each with a connected transport of `kind`.
std::string with(Kind kind, Mode mode, int n, const std::function<void(Transport&, int)>& fn) {
  if (kind == Kind::kTcp) return with_transport(mode, n, fn);
  if (kind == Kind::kShm || kind == Kind::kShmStreamed) {
    return run_with_store(mode, n, [&](Store& store, int rank) -> KeepAlive {
      auto ranks = std::make_shared<ShmRank>();
      transport::TcpOptions tcp;
      tcp.timeout = 30s;
      ranks->tcp = transport::connect_tcp(store, rank, n, tcp);
      // What a process group takes from its shared-memory domain: whether
      // ranks may read each other's memory (agreed), and how to wait.
      auto domain = transport::shm::ShmGroup::connect(store, rank, n, 30s);
      transport::shm::ShmP2pOptions options;
      options.peer_read = kind == Kind::kShm && domain->single_copy();
      options.policy = domain->policy();
      options.timeout = 30s;
      options.watch = ranks->tcp.get();
      ranks->shm = transport::shm::connect_shm_p2p(store, rank, n, options);
      fn(*ranks->shm, rank);
      return ranks;
    });
  }
  return run_with_store(mode, n + 1, [&](Store& store, int rank) -> KeepAlive {
    transport::TcpOptions options;
    options.timeout = 30s;
    std::shared_ptr<Transport> parent = transport::connect_tcp(store, rank, n + 1, options);
    if (rank == 0) return parent;  // not a member: it stays connected until the end
    std::vector<int> members;
    for (int i = 0; i < n; ++i) members.push_back(parent_of(n, i));
    auto subset = std::make_shared<transport::SubsetTransport>(*parent, members);
    fn(*subset, subset->rank());
    return std::make_shared<std::pair<std::shared_ptr<Transport>, std::shared_ptr<Transport>>>(subset,
                                                                                               parent);
  });
}

class Conformance : public ::testing::TestWithParam<std::tuple<Kind, Mode, int>> {
 protected:
  Kind kind() const { return std::get<0>(GetParam()); }
  Mode mode() const { return std::get<1>(GetParam()); }
  int n() const { return std::get<2>(GetParam()); }
  std::string run(const std::function<void(Transport&, int)>& fn) const {
    return with(kind(), mode(), n(), fn);
  }
};

TEST_P(Conformance, EveryPairExchangesMessagesInBothDirections) {
  EXPECT_EQ(run([&](Transport& t, int rank) {
              std::vector<int64_t> out(static_cast<size_t>(n())), in(static_cast<size_t>(n()), -1);
              std::vector<transport::RequestPtr> requests;
              for (int peer = 0; peer < n(); ++peer) {
                out[static_cast<size_t>(peer)] = rank * 100 + peer;
                requests.push_back(t.irecv(peer, 7, &in[static_cast<size_t>(peer)], 8));
                requests.push_back(t.isend(peer, 7, &out[static_cast<size_t>(peer)], 8));
              }
              for (auto& r : requests) wait_ok(r);
              for (int peer = 0; peer < n(); ++peer) {
                if (in[static_cast<size_t>(peer)] != peer * 100 + rank) {
                  throw std::runtime_error("wrong value from rank " + std::to_string(peer));
                }
              }
            }),
            "");
}

TEST_P(Conformance, SameTagMessagesArriveInOrderAndTagsDoNotMix) {
  if (n() < 2) GTEST_SKIP();
  EXPECT_EQ(run([&](Transport& t, int rank) {
              constexpr int kCount = 50;
              if (rank == 1) {
                std::vector<int> values(kCount * 2);
                std::vector<transport::RequestPtr> sends;
                for (int i = 0; i < kCount; ++i) {
                  values[static_cast<size_t>(i)] = i;
                  values[static_cast<size_t>(kCount + i)] = 1000 + i;
                  sends.push_back(t.isend(0, 1, &values[static_cast<size_t>(i)], 4));
                  sends.push_back(t.isend(0, 2, &values[static_cast<size_t>(kCount + i)], 4));
                }
                for (auto& r : sends) wait_ok(r);
              } else if (rank == 0) {
                // Receive tag 2 first: tag 1 messages wait as unexpected.
                for (int tag : {2, 1}) {
                  for (int i = 0; i < kCount; ++i) {
                    int v = -1;
                    wait_ok(t.irecv(1, static_cast<uint64_t>(tag), &v, 4));
                    int want = tag == 1 ? i : 1000 + i;
                    if (v != want) {
                      throw std::runtime_error("tag " + std::to_string(tag) + " message " +
                                               std::to_string(i) + " is " + std::to_string(v));
                    }
                  }
                }
              }
            }),
            "");
}

TEST_P(Conformance, AnySourceReceiveReportsTheSenderOrIsRefused) {
  if (kind() == Kind::kSubset) {
    // A subset refuses any-source receives, saying so, before anything is posted.
    EXPECT_EQ(
        run([&](Transport& t, int) {
          int v = 0;
          try {
            t.irecv(kAnySource, 9, &v, 4);
          } catch (const DistBackendError& e) {
            if (std::string(e.what()).find("any-source receives are not supported") != std::string::npos)
              return;
            throw;
          }
          throw std::runtime_error("an any-source receive on a subset was accepted");
        }),
        "");
    return;
  }
  EXPECT_EQ(run([&](Transport& t, int rank) {
              if (rank != 0) {
                int v = rank * 3;
                wait_ok(t.isend(0, 9, &v, 4));
                return;
              }
              std::vector<int> seen(static_cast<size_t>(n()), 0);
              for (int i = 1; i < n(); ++i) {
                int v = -1;
                auto r = t.irecv(kAnySource, 9, &v, 4);
                wait_ok(r);
                if (v != r->source() * 3) throw std::runtime_error("value does not match sender");
                seen[static_cast<size_t>(r->source())]++;
              }
              for (int peer = 1; peer < n(); ++peer) {
                if (seen[static_cast<size_t>(peer)] != 1) throw std::runtime_error("sender seen twice");
              }
            }),
            "");
}

TEST_P(Conformance, LargeMessagesArriveIntactInARing) {
  EXPECT_EQ(run([&](Transport& t, int rank) {
              const size_t count = (size_t{8} << 20) / 4 + 3;  // 8 MiB and a bit
              std::vector<uint32_t> out(count), in(count);
              for (size_t i = 0; i < count; ++i) out[i] = static_cast<uint32_t>(i * 2654435761u + rank);
              int next = (rank + 1) % n();
              int prev = (rank + n() - 1) % n();
              auto r = t.irecv(prev, 3, in.data(), count * 4);
              auto s = t.isend(next, 3, out.data(), count * 4);
              wait_ok(s);
              wait_ok(r);
              for (size_t i = 0; i < count; ++i) {
                if (in[i] != static_cast<uint32_t>(i * 2654435761u + prev)) {
                  throw std::runtime_error("byte mismatch at element " + std::to_string(i));
                }
              }
            }),
            "");
}

TEST_P(Conformance, SizesUnknownInAdvanceAndTooSmallBuffers) {
  if (n() < 2) GTEST_SKIP();
  EXPECT_EQ(run([&](Transport& t, int rank) {
              if (rank == 1) {
                std::string a = "hello, rank 0";
                std::vector<uint8_t> big(100, 7);
                wait_ok(t.isend(0, 1, a.data(), a.size()));
                wait_ok(t.isend(0, 2, big.data(), big.size()));
                wait_ok(t.isend(0, 3, nullptr, 0));
              } else if (rank == 0) {
                auto bytes = std::make_shared<std::vector<uint8_t>>();
                wait_ok(t.irecv_bytes(1, 1, bytes));
                if (std::string(bytes->begin(), bytes->end()) != "hello, rank 0") {
                  throw std::runtime_error("irecv_bytes got the wrong bytes");
                }
                uint8_t small[10];
                try {
                  wait_ok(t.irecv(1, 2, small, sizeof(small)));
                  throw std::runtime_error("a 100-byte message fit a 10-byte buffer");
                } catch (const DistBackendError& e) {
                  if (std::string(e.what()).find("100 bytes") == std::string::npos) throw;
                }
                auto r = t.irecv(1, 3, small, sizeof(small));
                wait_ok(r);
                if (r->received_bytes() != 0) throw std::runtime_error("empty message not empty");
              }
            }),
            "");
}

// Every rank sends the edge sizes to the next and receives them from the
// previous rank, waiting through Transport::wait (the thread drives the
// sockets itself), inside a CallScope or not.
void exchange_edge_sizes(Transport& t, int rank, int n, bool in_call) {
  const int next = (rank + 1) % n;
  const int prev = (rank + n - 1) % n;
  const auto sizes = edge_sizes();
  std::vector<std::vector<uint8_t>> out(sizes.size()), in(sizes.size());
  std::vector<transport::RequestPtr> recvs(sizes.size()), sends;
  std::optional<transport::CallScope> call;
  if (in_call) call.emplace(t);
  // Messages of one tag match receives in posting order. The first half of
  // the receives is posted before the sends, the rest after, so both the
  // direct path and the unexpected one are taken.
  const size_t half = sizes.size() / 2;
  for (size_t m = 0; m < sizes.size(); ++m) {
    out[m].resize(sizes[m]);
    for (size_t i = 0; i < sizes[m]; ++i) out[m][i] = pattern_byte(rank, m, i);
    in[m].assign(sizes[m] + 1, 0xEE);  // one byte of room: a size error would show
    if (m < half) recvs[m] = t.irecv(prev, 9, in[m].data(), in[m].size());
  }
  for (size_t m = 0; m < sizes.size(); ++m) sends.push_back(t.isend(next, 9, out[m].data(), out[m].size()));
  for (size_t m = half; m < sizes.size(); ++m) recvs[m] = t.irecv(prev, 9, in[m].data(), in[m].size());
  for (const auto* list : {&recvs, &sends}) {
    for (const auto& r : *list) {
      if (!t.wait(r, deadline())) throw std::runtime_error("a driven wait timed out");
    }
  }
  for (size_t m = 0; m < sizes.size(); ++m) {
    if (recvs[m]->received_bytes() != sizes[m]) {
      throw std::runtime_error("message " + std::to_string(m) + ": " +
                               std::to_string(recvs[m]->received_bytes()) + " bytes, expected " +
                               std::to_string(sizes[m]));
    }
    for (size_t i = 0; i < sizes[m]; ++i) {
      if (in[m][i] != pattern_byte(prev, m, i)) {
        throw std::runtime_error("message " + std::to_string(m) + " byte " + std::to_string(i) + " is wrong");
      }
    }
  }
}

TEST_P(Conformance, DrivenWaitsDeliverEdgeSizesIntactAndInOrder) {
  EXPECT_EQ(run([&](Transport& t, int rank) {
              exchange_edge_sizes(t, rank, n(), /*in_call=*/true);
              exchange_edge_sizes(t, rank, n(), /*in_call=*/false);
            }),
            "");
}

// A request made by the caller (isend_into, irecv_into), as a
// point-to-point work keeps its own: it completes as a transport's own
// would, and its finished() runs once, after it is done. A view of some
// ranks (SubsetTransport) refuses such requests.
class CountedRequest final : public transport::Request {
 public:
  CountedRequest(Kind kind, int peer, uint64_t tag, size_t nbytes) : Request(kind, peer, tag, nbytes, true) {}
  std::atomic<int> finishes{0};
  std::atomic<bool> done_when_finished{false};

 private:
  void finished() override {
    done_when_finished = done();
    ++finishes;
  }
};

TEST_P(Conformance, CallerMadeRequestsCompleteAndFinishOnce) {
  EXPECT_EQ(
      run([&](Transport& t, int rank) {
        const int next = (rank + 1) % n();
        const int prev = (rank + n() - 1) % n();
        auto probe = std::make_shared<CountedRequest>(transport::Request::Kind::kSend, next, 3, 8);
        uint64_t word = 0;
        if (kind() == Kind::kSubset) {
          try {
            t.isend_into(probe, &word, {});
          } catch (const DistBackendError&) {
            return;
          }
          throw std::runtime_error("the subset took a caller-made request");
        }
        try {
          t.irecv_into(probe, &word, {});
          throw std::runtime_error("irecv_into took a send's request");
        } catch (const DistInvalidArgument&) {
        }
        for (const size_t bytes : {size_t{0}, size_t{1}, size_t{8}, size_t{1001}, size_t{100003}}) {
          std::vector<uint8_t> out(bytes), in(bytes, 0);
          for (size_t i = 0; i < bytes; ++i)
            out[i] = static_cast<uint8_t>(static_cast<size_t>(rank) * 31 + i * 7);
          auto r = std::make_shared<CountedRequest>(transport::Request::Kind::kRecv, prev, 4, bytes);
          auto s = std::make_shared<CountedRequest>(transport::Request::Kind::kSend, next, 4, bytes);
          t.irecv_into(r, in.data(), {});
          t.isend_into(s, out.data(), {});
          wait_ok(r);
          wait_ok(s);
          for (size_t i = 0; i < bytes; ++i) {
            if (in[i] != static_cast<uint8_t>(static_cast<size_t>(prev) * 31 + i * 7))
              throw std::runtime_error(std::to_string(bytes) + " B: byte " + std::to_string(i) + " is wrong");
          }
          if (r->source() != prev || r->received_bytes() != bytes)
            throw std::runtime_error(std::to_string(bytes) +
                                     " B: the receive names the wrong source or size");
          // finished() runs on the completing thread after done(): wait
          // for it there, bounded.
          for (int i = 0; i < 100000 && (r->finishes == 0 || s->finishes == 0); ++i)
            std::this_thread::yield();
          if (r->finishes != 1 || s->finishes != 1 || !r->done_when_finished || !s->done_when_finished)
            throw std::runtime_error(std::to_string(bytes) + " B: finished() ran " +
                                     std::to_string(r->finishes) + " and " + std::to_string(s->finishes) +
                                     " times, not once each after completion");
        }
        // A message longer than the receive fails it; finished() still runs once.
        uint64_t big[2] = {1, 2};
        uint64_t small = 0;
        auto r = std::make_shared<CountedRequest>(transport::Request::Kind::kRecv, prev, 5, 8);
        auto s = std::make_shared<CountedRequest>(transport::Request::Kind::kSend, next, 5, 16);
        t.irecv_into(r, &small, {});
        t.isend_into(s, big, {});
        try {
          wait_ok(r);
          throw std::runtime_error("a 16 B message fit an 8 B receive");
        } catch (const DistBackendError&) {
        }
        wait_ok(s);
        for (int i = 0; i < 100000 && r->finishes == 0; ++i) std::this_thread::yield();
        if (r->finishes != 1) throw std::runtime_error("a failed receive did not finish once");
      }),
      "");
}

// A call's message whose signature differs from the receiver's, waiting
// for no receive, is found by conflicting_message (naming its sender by its
// rank in the whole group); once received, last_call_from gives the
// signature of the newest call of the sender's that arrived.
TEST_P(Conformance, TheCallMatchingHooksSeeAPeersMessages) {
  if (n() < 2) GTEST_SKIP();
  const auto all_reduce =
      tdist::detail::collective_signature(tdist::detail::CallKind::kAllReduce, DType::kFloat32, 1);
  const auto broadcast =
      tdist::detail::collective_signature(tdist::detail::CallKind::kBroadcast, DType::kFloat32, 1, 0);
  const uint64_t seq = 5;
  EXPECT_EQ(run([&](Transport& t, int rank) {
              auto theirs = all_reduce;
              theirs.seq = seq;
              const uint64_t tag = seq << 24;
              float value = 2.5F;
              const uint64_t after_tag = tag + 1;
              float after = 7.0F;
              if (rank == 1) {
                // The conflicting message, then one the receiver waits for:
                // messages of one connection keep their order, so once the
                // second has arrived the first has too.
                wait_ok(t.isend(0, tag, &value, sizeof(value), theirs));
                wait_ok(t.isend(0, after_tag, &after, sizeof(after), theirs));
                return;
              }
              if (rank != 0) return;
              auto mine = broadcast;
              mine.seq = seq;
              float got_after = 0;
              {
                transport::CallScope call(t);
                if (!t.wait(t.irecv(1, after_tag, &got_after, sizeof(got_after), theirs), deadline()))
                  throw std::runtime_error("the second message never came");
              }
              const auto found = t.conflicting_message(mine);
              if (!found) throw std::runtime_error("conflicting_message did not report the peer's message");
              const int sender = kind() == Kind::kSubset ? parent_of(n(), 1) : 1;
              if (found->first != sender || !(found->second == theirs)) {
                throw std::runtime_error("conflicting_message named rank " + std::to_string(found->first) +
                                         ", expected " + std::to_string(sender));
              }
              if (t.conflicting_message(theirs))
                throw std::runtime_error("a matching signature was reported");
              float got = 0;
              wait_ok(t.irecv(1, tag, &got, sizeof(got), theirs));
              if (got != value) throw std::runtime_error("wrong value");
              const auto last = t.last_call_from(1);
              if (!last || !(*last == theirs))
                throw std::runtime_error("last_call_from does not give the peer's call");
            }),
            "");
}

// A receive of another signature refuses a point-to-point message: the
// receiver's request fails naming both sides, and the refusal reaches the
// sender, whose take_rejection hands it out once. (It comes before the
// receiver's next message: messages of one pair keep their order.)
TEST_P(Conformance, ARefusedMessageReachesItsSenderOnce) {
  if (n() < 2) GTEST_SKIP();
  using tdist::detail::p2p_signature;
  EXPECT_EQ(run([&](Transport& t, int rank) {
              const uint64_t tag = (uint64_t{1} << 63) | 4;
              const uint64_t after_tag = tag + 1;
              int32_t sent[4] = {1, 2, 3, 4};
              uint8_t after = 0;
              if (rank == 1) {
                wait_ok(t.isend(0, tag, sent, sizeof(sent), p2p_signature(DType::kInt32, 4)));
                wait_ok(t.irecv(0, after_tag, &after, 1, p2p_signature(DType::kUInt8, 1)));
                std::exception_ptr refused = t.take_rejection();
                if (!refused) throw std::runtime_error("the sender was not told of the refusal");
                try {
                  std::rethrow_exception(refused);
                } catch (const DistError& e) {
                  const std::string what = e.what();
                  if (what.find("was refused") == std::string::npos ||
                      what.find("4 int32 elements") == std::string::npos ||
                      what.find("4 float32 elements") == std::string::npos)
                    throw std::runtime_error("the refusal does not name both sides: " + what);
                }
                if (t.take_rejection()) throw std::runtime_error("the refusal was handed out twice");
              } else if (rank == 0) {
                float got[4] = {0, 0, 0, 0};
                try {
                  wait_ok(t.irecv(1, tag, got, sizeof(got), p2p_signature(DType::kFloat32, 4)));
                  throw std::runtime_error("a receive of another dtype accepted the message");
                } catch (const DistBackendError&) {
                }
                if (got[0] != 0 || got[3] != 0) throw std::runtime_error("the refused message was written");
                wait_ok(t.isend(1, after_tag, &after, 1, p2p_signature(DType::kUInt8, 1)));
                if (t.take_rejection()) throw std::runtime_error("the receiver holds a refusal of its own");
              }
            }),
            "");
}

// A refused small message fails nothing else of its sender's: not a large
// send before it that is still waiting for its receive (which a refusal
// naming the wrong message would fail), and the refusal reaches the
// sender, once.
TEST_P(Conformance, ARefusedSmallMessageLeavesAnEarlierLargeSendAlone) {
  if (n() < 2) GTEST_SKIP();
  using tdist::detail::p2p_signature;
  EXPECT_EQ(run([&](Transport& t, int rank) {
              const uint64_t large_tag = (uint64_t{1} << 63) | 8;
              const uint64_t small_tag = large_tag + 1;
              constexpr size_t kLarge = 64 << 10;
              if (rank == 1) {
                std::vector<uint8_t> large(kLarge);
                for (size_t i = 0; i < kLarge; ++i) large[i] = static_cast<uint8_t>(i * 13);
                int32_t small[4] = {1, 2, 3, 4};
                auto large_send =
                    t.isend(0, large_tag, large.data(), kLarge, p2p_signature(DType::kUInt8, kLarge));
                wait_ok(t.isend(0, small_tag, small, sizeof(small), p2p_signature(DType::kInt32, 4)));
                wait_ok(large_send);  // raises if the refusal failed it
                // Rank 0 sends this after its refusal: the refusal is here by then.
                uint8_t after = 0;
                wait_ok(t.irecv(0, small_tag + 1, &after, 1, p2p_signature(DType::kUInt8, 1)));
                if (!t.take_rejection()) throw std::runtime_error("the small message's refusal never came");
                if (t.take_rejection()) throw std::runtime_error("the refusal was handed out twice");
              } else if (rank == 0) {
                float wrong[4] = {0, 0, 0, 0};
                try {
                  wait_ok(t.irecv(1, small_tag, wrong, sizeof(wrong), p2p_signature(DType::kFloat32, 4)));
                  throw std::runtime_error("a receive of another dtype accepted the message");
                } catch (const DistBackendError&) {
                }
                std::vector<uint8_t> got(kLarge, 0);
                wait_ok(t.irecv(1, large_tag, got.data(), kLarge, p2p_signature(DType::kUInt8, kLarge)));
                for (size_t i = 0; i < kLarge; ++i) {
                  if (got[i] != static_cast<uint8_t>(i * 13))
                    throw std::runtime_error("byte " + std::to_string(i) + " of the large message is wrong");
                }
                uint8_t after = 1;
                wait_ok(t.isend(1, small_tag + 1, &after, 1, p2p_signature(DType::kUInt8, 1)));
              }
            }),
            "");
}

// try_send_now and try_recv_now: on shared memory a small message to a
// ring with room goes out at once, and one that has come is taken at once
// unless an earlier receive is waiting for it (4 bytes beside the slot's
// header, 1000 in its payload, 20,000 in three slots); what they decline (a large message,
// another size or dtype, a message to oneself) is left whole for isend and
// irecv. TCP declines everything.
TEST_P(Conformance, MessagesThatMoveAtOnceKeepTheirOrderAndLeaveTheRestAlone) {
  if (n() < 2) GTEST_SKIP();
  using tdist::detail::p2p_signature;
  const bool shm = kind() == Kind::kShm || kind() == Kind::kShmStreamed;
  EXPECT_EQ(run([&](Transport& t, int rank) {
              const uint64_t tag = (uint64_t{1} << 63) | 21;
              const auto one = p2p_signature(DType::kInt32, 1);
              constexpr size_t kLarge = 64 << 10;
              const auto large_sig = p2p_signature(DType::kUInt8, kLarge);
              constexpr size_t kMedium = 1000;
              const auto medium_sig = p2p_signature(DType::kUInt8, kMedium);
              constexpr size_t kThreeSlots = 20000;
              const auto three_sig = p2p_signature(DType::kUInt8, kThreeSlots);
              int32_t go = 0;
              if (rank == 1) {
                wait_ok(t.irecv(0, tag + 1, &go, 4, one));  // rank 0's first receive is posted
                if (t.try_send_now(1, tag, &go, 4, one))
                  throw std::runtime_error("a message to itself went out");
                const int32_t values[3] = {10, 11, 12};
                for (const int32_t& v : values) {
                  const bool now = t.try_send_now(0, tag, &v, 4, one);
                  if (now != shm)
                    throw std::runtime_error("try_send_now of 4 bytes gave " + std::to_string(now));
                  if (!now) wait_ok(t.isend(0, tag, &v, 4, one));
                }
                // Byte i is i * mul + add; it goes out at once on shared memory.
                auto send_whole = [&](size_t bytes, const tdist::detail::CallSignature& s, int mul, int add) {
                  std::vector<uint8_t> out(bytes);
                  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * mul + add);
                  const bool now = t.try_send_now(0, tag, out.data(), bytes, s);
                  if (now != shm) {
                    throw std::runtime_error("try_send_now of " + std::to_string(bytes) + " bytes gave " +
                                             std::to_string(now));
                  }
                  if (!now) wait_ok(t.isend(0, tag, out.data(), bytes, s));
                };
                send_whole(kMedium, medium_sig, 3, 1);     // one slot, past the bytes beside the header
                send_whole(kThreeSlots, three_sig, 5, 2);  // three slots
                std::vector<uint8_t> large(kLarge);
                for (size_t i = 0; i < kLarge; ++i) large[i] = static_cast<uint8_t>(i * 7);
                if (t.try_send_now(0, tag, large.data(), kLarge, large_sig))
                  throw std::runtime_error("a 64 KiB message went out at once");
                wait_ok(t.isend(0, tag, large.data(), kLarge, large_sig));
              } else if (rank == 0) {
                int32_t first = -1;
                auto waiting = t.irecv(1, tag, &first, 4, one);
                wait_ok(t.isend(1, tag + 1, &go, 4, one));
                // Message 10 is the waiting receive's, whatever try_recv_now sees.
                int32_t second = -1;
                bool taken = false;
                while (shm && !taken) {
                  taken = t.try_recv_now(1, tag, &second, 4, one);
                  if (!taken && std::chrono::steady_clock::now() > deadline())
                    throw std::runtime_error("message 11 never came");
                }
                if (!shm && t.try_recv_now(1, tag, &second, 4, one)) throw std::runtime_error("tcp took one");
                if (!taken) wait_ok(t.irecv(1, tag, &second, 4, one));
                wait_ok(waiting);
                if (first != 10 || second != 11)
                  throw std::runtime_error("got " + std::to_string(first) + ", " + std::to_string(second));
                // Message 12, asked for with another size, then another dtype:
                // declined, and irecv still gets it whole.
                int64_t wide = -1;
                float other = -1;
                if (t.try_recv_now(1, tag, &wide, 8, p2p_signature(DType::kInt64, 1)) ||
                    t.try_recv_now(1, tag, &other, 4, p2p_signature(DType::kFloat32, 1)))
                  throw std::runtime_error("a receive of another size or dtype took message 12");
                int32_t third = -1;
                wait_ok(t.irecv(1, tag, &third, 4, one));
                if (third != 12) throw std::runtime_error("message 12 is " + std::to_string(third));
                // Taken at once on shared memory (once it has come), by irecv
                // over TCP; byte i must be i * mul + add.
                auto take_whole = [&](size_t bytes, const tdist::detail::CallSignature& s, int mul, int add) {
                  const std::string what = "the " + std::to_string(bytes) + "-byte message";
                  std::vector<uint8_t> into(bytes, 0);
                  bool taken = false;
                  while (shm && !taken) {
                    taken = t.try_recv_now(1, tag, into.data(), bytes, s);
                    if (!taken && std::chrono::steady_clock::now() > deadline())
                      throw std::runtime_error(what + " never came");
                  }
                  if (!taken) wait_ok(t.irecv(1, tag, into.data(), bytes, s));
                  for (size_t i = 0; i < bytes; ++i) {
                    if (into[i] != static_cast<uint8_t>(i * mul + add))
                      throw std::runtime_error("byte " + std::to_string(i) + " of " + what + " is wrong");
                  }
                };
                take_whole(kMedium, medium_sig, 3, 1);
                take_whole(kThreeSlots, three_sig, 5, 2);
                std::vector<uint8_t> got(kLarge, 0);
                if (t.try_recv_now(1, tag, got.data(), kLarge, large_sig))
                  throw std::runtime_error("a 64 KiB message was taken at once");
                wait_ok(t.irecv(1, tag, got.data(), kLarge, large_sig));
                for (size_t i = 0; i < kLarge; ++i) {
                  if (got[i] != static_cast<uint8_t>(i * 7))
                    throw std::runtime_error("byte " + std::to_string(i) + " of the large message is wrong");
                }
              }
            }),
            "");
}

// abort fails this rank's pending and later requests with its error, says
// so in abort_reason, and reaches the peers: their receive from this rank
// fails too instead of waiting out its deadline.
TEST_P(Conformance, AbortFailsPendingAndLaterRequestsHereAndAtThePeers) {
  if (n() < 2) GTEST_SKIP();
  EXPECT_EQ(run([&](Transport& t, int rank) {
              int slot = 0;
              auto pending = t.irecv((rank + 1) % n(), 11, &slot, sizeof(slot));
              if (rank == 0) {
                t.abort(std::make_exception_ptr(DistBackendError("the test aborted rank 0")));
                if (!t.abort_reason()) throw std::runtime_error("no abort_reason after abort");
              }
              try {
                pending->wait_until(deadline());
              } catch (const DistError& e) {
                // Rank 0 gets its own error; the others a notice naming it
                // (or, through the ring, a peer that failed because of it).
                if (rank == 0 && std::string(e.what()).find("the test aborted rank 0") == std::string::npos)
                  throw;
                if (rank == 0) {
                  try {
                    t.isend(1, 12, &slot, sizeof(slot))->wait_until(deadline());
                  } catch (const DistError&) {
                    return;
                  }
                  throw std::runtime_error("a send after the abort succeeded");
                }
                return;
              }
              throw std::runtime_error("a pending receive survived the abort");
            }),
            "");
}

INSTANTIATE_TEST_SUITE_P(
    Transports, Conformance,
    ::testing::Combine(::testing::Values(Kind::kTcp, Kind::kSubset, Kind::kShm, Kind::kShmStreamed),
                       ::testing::Values(Mode::kThreads, Mode::kProcesses), ::testing::Values(1, 2, 3, 5, 8)),
    [](const auto& p) {
      return std::string(kind_name(std::get<0>(p.param))) + "_" + mode_name(std::get<1>(p.param)) + "_" +
             std::to_string(std::get<2>(p.param));
    });

}  // namespace
}  // namespace tdist::testing
