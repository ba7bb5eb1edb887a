#pragma once

// The RPC layer's messages on the wire (docs/rpc.md, "Protocol"). A call is
// a request header to the callee on kRequestTag, then each tensor's bytes on
// the call's data tag; the answer is a response header to the caller on
// kResponseTag, then its tensors on the answer's data tag. Headers name the
// tensors' dtypes and shapes first, so the receiver allocates each tensor
// and receives its bytes straight into it. Between workers of one host a
// large tensor may instead be offered for a direct read (rpc_direct.h): its
// description then carries where it lies in the sender's memory, the
// receiver copies it from there and says so with a release message on
// kReleaseTag, and no bytes follow on the data tag. Pure encoding and decoding:
// decoding checks every length against what is there and raises
// DistBackendError on a malformed header, never reads past it.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tdist/dtype.h"

namespace tdist::rpc::wire {

inline constexpr uint64_t kRequestTag = 1;
inline constexpr uint64_t kResponseTag = 2;
/// "I have read the tensors you offered for call `id`": the sender may drop them.
inline constexpr uint64_t kReleaseTag = 3;
/// Tensors of at most this many bytes travel inside their header.
inline constexpr size_t kInlineMaxBytes = 4096;
/// Tags at and above this carry tensors: two per call (request, response).
inline constexpr uint64_t kFirstDataTag = uint64_t{1} << 16;

/// The tag of call `id`'s tensors (its caller numbers its calls).
inline uint64_t data_tag(uint64_t id, bool response) {
  return kFirstDataTag + 2 * id + (response ? 1 : 0);
}

enum class Kind : uint8_t { kRequest = 1, kResponse = 2, kRelease = 3 };

/// Where a tensor offered for a direct read lies in the sender's process,
/// and the word there that holds `token` as long as the sender keeps it.
struct DirectSource {
  uint64_t address = 0;
  uint64_t hold_word = 0;
  uint64_t token = 0;
};

struct TensorMeta {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  /// Set: read it from the sender's memory.
  std::optional<DirectSource> direct;
  /// Set: a small tensor's bytes, in the header itself. Neither set: its
  /// bytes follow on the data tag.
  std::optional<std::vector<uint8_t>> bytes;
  /// Elements times element size; raises DistBackendError on overflow.
  size_t nbytes() const;
};

struct Request {
  uint64_t id = 0;
  /// What the caller's deadline leaves, in microseconds (relative: the
  /// workers' clocks need not agree).
  int64_t timeout_us = 0;
  std::string function;
  std::vector<uint8_t> payload;
  std::vector<TensorMeta> tensors;
};

struct Response {
  uint64_t id = 0;
  bool ok = true;
  // When !ok: what the function raised.
  std::string error_type;
  std::string error_message;
  std::string error_traceback;
  std::vector<uint8_t> payload;
  std::vector<TensorMeta> tensors;
};

/// The receiver of call `id`'s request (response: false) or answer (true)
/// has read what was offered for a direct read.
struct Release {
  uint64_t id = 0;
  bool response = false;
};

std::vector<uint8_t> encode(const Request& request);
std::vector<uint8_t> encode(const Response& response);
std::vector<uint8_t> encode(const Release& release);

/// The kind of an encoded header; raises DistBackendError if it is neither.
Kind kind_of(const std::vector<uint8_t>& bytes);
Request decode_request(const std::vector<uint8_t>& bytes);
Response decode_response(const std::vector<uint8_t>& bytes);
Release decode_release(const std::vector<uint8_t>& bytes);

}  // namespace tdist::rpc::wire
