#pragma once

// The parts of tdistrun's command line that describe the node agents'
// rendezvous (torchrun's --nnodes MIN:MAX, --rdzv-backend, --rdzv-endpoint,
// --rdzv-conf). Each parser raises std::invalid_argument with the message
// tdistrun prints as a usage error.

#include <chrono>
#include <optional>
#include <string>

#include "options.h"

namespace tdist::launcher {

/// The port of a c10d endpoint given without one (torchrun's default).
inline constexpr int kDefaultC10dPort = 29400;

struct NodeRange {
  int min = 1;
  int max = 1;
};
/// "N" (N:N) or "MIN:MAX", 1 <= MIN <= MAX.
NodeRange parse_nnodes(const std::string& text);

/// "static" or "c10d".
RdzvBackend parse_rdzv_backend(const std::string& text);

struct Endpoint {
  std::string host;
  std::optional<int> port;  // absent when the text has none
};
/// "HOST", "HOST:PORT", "[IPv6]", "[IPv6]:PORT", or a bare IPv6 literal
/// (which has no port).
Endpoint parse_endpoint(const std::string& text);

/// The rendezvous settings of --rdzv-conf "k=v,k=v".
struct RdzvConf {
  std::optional<std::chrono::milliseconds> join_timeout;
  std::optional<std::chrono::milliseconds> last_call_timeout;
  std::optional<std::chrono::milliseconds> read_timeout;
  std::optional<bool> is_host;
  /// Keys torchrun knows that change nothing here (close_timeout, ...).
  std::string ignored;
};
RdzvConf parse_rdzv_conf(const std::string& text);

}  // namespace tdist::launcher
