// all_to_all with every algorithm forced in turn: equal, uneven and empty
// blocks, scattered offsets, and a split that the ranks disagree on.

#include "algorithms/tuning/tcp_model.h"
#include "tdist/errors.h"
#include "test_harness.h"

namespace tdist::testing {
namespace {

using algorithms::AllToAllAlgo;

constexpr AllToAllAlgo kAlgos[] = {AllToAllAlgo::kPairwise, AllToAllAlgo::kLinear};

// Bytes rank `src` sends rank `dst` under layout `kind`.
size_t block_bytes(int kind, int src, int dst, int p) {
  switch (kind) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return 7;
    case 3:
      return static_cast<size_t>((src * 3 + dst * 5) % 4) * 11;  // some empty
    default:
      return (src + dst) % p == 0 ? 300'000 : 5;  // a few multi-segment blocks
  }
}

uint8_t block_byte(int src, int dst, size_t i) {
  return static_cast<uint8_t>(src * 37 + dst * 11 + i * 3);
}

void check_all_to_all(Group& g, AllToAllAlgo algo, int kind) {
  const int p = g.size();
  const int me = g.rank();
  std::vector<size_t> send_bytes, send_offsets, recv_bytes, recv_offsets;
  // Blocks in reverse rank order with a gap after each, so offsets matter.
  size_t send_total = 0, recv_total = 0;
  send_bytes.resize(static_cast<size_t>(p));
  send_offsets.resize(static_cast<size_t>(p));
  recv_bytes.resize(static_cast<size_t>(p));
  recv_offsets.resize(static_cast<size_t>(p));
  for (int r = p - 1; r >= 0; --r) {
    const auto i = static_cast<size_t>(r);
    send_bytes[i] = block_bytes(kind, me, r, p);
    send_offsets[i] = send_total;
    send_total += send_bytes[i] + 3;
    recv_bytes[i] = block_bytes(kind, r, me, p);
    recv_offsets[i] = recv_total;
    recv_total += recv_bytes[i] + 3;
  }
  std::vector<uint8_t> in(send_total, 0xaa);
  for (int r = 0; r < p; ++r) {
    const auto i = static_cast<size_t>(r);
    for (size_t k = 0; k < send_bytes[i]; ++k) in[send_offsets[i] + k] = block_byte(me, r, k);
  }
  std::vector<uint8_t> out(recv_total, 0xee);
  algorithms::all_to_all(g.call("all_to_all"), in.data(), send_bytes, send_offsets, out.data(), recv_bytes,
                         recv_offsets, algo);
  for (int r = 0; r < p; ++r) {
    const auto i = static_cast<size_t>(r);
    for (size_t k = 0; k < recv_bytes[i]; ++k) {
      check(out[recv_offsets[i] + k] == block_byte(r, me, k),
            std::string("all_to_all ") + algorithms::algo_name(algo) + " layout " + std::to_string(kind) +
                ": byte " + std::to_string(k) + " from rank " + std::to_string(r) + " differs");
    }
    check(out[recv_offsets[i] + recv_bytes[i]] == 0xee, "all_to_all wrote past a block");
  }
}

using AllToAllTest = GroupTest;

TEST_P(AllToAllTest, EveryLayoutWithEveryAlgorithm) {
  EXPECT_EQ(with_group(mode(), n(),
                       [](Group& g) {
                         for (AllToAllAlgo algo : kAlgos) {
                           for (int kind = 0; kind < 5; ++kind) check_all_to_all(g, algo, kind);
                         }
                         // The algorithms interoperate: ranks may choose differently.
                         check_all_to_all(
                             g, g.rank() % 2 == 0 ? AllToAllAlgo::kLinear : AllToAllAlgo::kPairwise, 3);
                       }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Groups, AllToAllTest, ::testing::ValuesIn(group_params()), group_param_name);

TEST(AllToAllErrors, ASplitTheRanksDisagreeOnIsReported) {
  EXPECT_EQ(with_group(Mode::kThreads, 2,
                       [](Group& g) {
                         // Rank 1 sends 4 bytes where rank 0 expects 8; rank 0 sends as expected.
                         std::vector<uint8_t> in(16, 1), out(16, 0);
                         const std::vector<size_t> offsets{0, 8};
                         const std::vector<size_t> send =
                             g.rank() == 0 ? std::vector<size_t>{8, 8} : std::vector<size_t>{4, 8};
                         const std::vector<size_t> recv{8, 8};
                         if (g.rank() == 1) {
                           algorithms::all_to_all(g.call("all_to_all"), in.data(), send, offsets, out.data(),
                                                  recv, offsets, AllToAllAlgo::kLinear);
                           return;
                         }
                         try {
                           algorithms::all_to_all(g.call("all_to_all"), in.data(), send, offsets, out.data(),
                                                  recv, offsets, AllToAllAlgo::kLinear);
                         } catch (const DistBackendError& e) {
                           check(std::string(e.what()).find("expected 8 bytes from rank 1 but it sent 4") !=
                                     std::string::npos,
                                 std::string("unexpected message: ") + e.what());
                           return;
                         }
                         throw std::runtime_error("no error for a mismatched split");
                       }),
            "");
}

}  // namespace
}  // namespace tdist::testing
