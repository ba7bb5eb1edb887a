#pragma once

// What the transport tests share: deadlines, a wait that fails the test,
// ranks with a connected TCP transport, and message sizes and bytes that
// find a transport's edges.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "multirank.h"
#include "transport/tcp/tcp_transport.h"

namespace tdist::testing {

using namespace std::chrono_literals;
using transport::Transport;

inline auto deadline(std::chrono::milliseconds ms = 30s) {
  return transport::Clock::now() + ms;
}

inline void wait_ok(const transport::RequestPtr& request) {
  if (!request->wait_until(deadline())) throw std::runtime_error("request timed out");
}

// Runs fn on n ranks, each with a connected TCP transport.
inline std::string with_transport(Mode mode, int n, const std::function<void(Transport&, int)>& fn) {
  return run_with_store(mode, n, [&](Store& store, int rank) -> KeepAlive {
    transport::TcpOptions options;
    options.timeout = 30s;
    std::shared_ptr<Transport> t = transport::connect_tcp(store, rank, n, options);
    fn(*t, rank);
    return t;
  });
}

// Sizes around the transports' edges: empty, one byte, TCP's 48-byte
// header and 4 KiB read stage, a shared-memory slot's 8064 bytes, the
// most that moves at once (five slots, 40,320 bytes) and one byte more,
// the first size read from the sender (40 KiB), the multi-slot messages
// copied through the cache (to 64 KiB) and streamed past the cache, and
// large; several small messages then share one read, and a large one
// starts inside the stage and ends outside it.
inline std::vector<size_t> edge_sizes() {
  return {0,     1,     15,    16,    17,
          47,    48,    49,    3,     4079,
          4080,  4095,  4096,  4097,  8064,
          8065,  8191,  2,     20000, 32768,
          40320, 40321, 40960, 65536, (size_t{1} << 20) + 5,
          0,     7,     65537, 1};
}

inline uint8_t pattern_byte(int sender, size_t message, size_t i) {
  return static_cast<uint8_t>(sender * 31 + message * 7 + i * 13 + (i >> 8));
}

}  // namespace tdist::testing
