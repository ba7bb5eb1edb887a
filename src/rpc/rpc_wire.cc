#include "rpc/rpc_wire.h"

#include <cstring>
#include <limits>
#include <type_traits>

#include "tdist/errors.h"

namespace tdist::rpc::wire {
namespace {

// A tensor of more dimensions than this is refused (torch allows 64).
constexpr uint32_t kMaxDims = 64;

// Where a tensor's bytes are (TensorMeta): the byte after its shape.
enum class Placement : uint8_t { kFollows = 0, kDirect = 1, kInline = 2 };

class Writer {
 public:
  explicit Writer(Kind kind) { put(static_cast<uint8_t>(kind)); }
  template <typename T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void put_bytes(const void* data, size_t n) {
    put(static_cast<uint64_t>(n));
    const auto* p = static_cast<const uint8_t*>(data);
    out_.insert(out_.end(), p, p + n);
  }
  void put_string(const std::string& s) { put_bytes(s.data(), s.size()); }
  void put_tensors(const std::vector<TensorMeta>& tensors) {
    put(static_cast<uint32_t>(tensors.size()));
    for (const TensorMeta& t : tensors) {
      put(static_cast<uint8_t>(t.dtype));
      put(static_cast<uint32_t>(t.shape.size()));
      for (int64_t d : t.shape) put(d);
      put(t.direct ? Placement::kDirect : t.bytes ? Placement::kInline : Placement::kFollows);
      if (t.direct) {
        put(t.direct->address);
        put(t.direct->hold_word);
        put(t.direct->token);
      } else if (t.bytes) {
        put_bytes(t.bytes->data(), t.bytes->size());
      }
    }
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  Reader(const std::vector<uint8_t>& bytes, Kind expected) : bytes_(bytes) {
    if (get<uint8_t>() != static_cast<uint8_t>(expected)) fail("not a " + std::string(name(expected)));
  }
  template <typename T>
  T get() {
    need(sizeof(T), "a field");
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::vector<uint8_t> get_bytes() {
    const auto n = get<uint64_t>();
    need(n, "a byte string");
    std::vector<uint8_t> out(bytes_.begin() + static_cast<std::ptrdiff_t>(at_),
                             bytes_.begin() + static_cast<std::ptrdiff_t>(at_ + n));
    at_ += n;
    return out;
  }
  // A byte that must be 0 or 1; `what` names it in the error.
  bool get_flag(const char* what) {
    const auto v = get<uint8_t>();
    if (v > 1) fail(std::string(what) + " " + std::to_string(v));
    return v == 1;
  }
  std::string get_string() {
    std::vector<uint8_t> b = get_bytes();
    return {b.begin(), b.end()};
  }
  std::vector<TensorMeta> get_tensors() {
    const auto count = get<uint32_t>();
    // Each tensor takes at least 6 bytes: a count beyond that is garbage.
    need(static_cast<uint64_t>(count) * 6, "the tensors' descriptions");
    std::vector<TensorMeta> tensors(count);
    for (TensorMeta& t : tensors) {
      const auto dtype = get<uint8_t>();
      if (dtype >= kAllDTypes.size()) fail("dtype " + std::to_string(dtype) + " is unknown");
      t.dtype = static_cast<DType>(dtype);
      const auto dims = get<uint32_t>();
      if (dims > kMaxDims)
        fail(std::to_string(dims) + " dimensions (at most " + std::to_string(kMaxDims) + ")");
      t.shape.resize(dims);
      for (int64_t& d : t.shape) {
        d = get<int64_t>();
        if (d < 0) fail("a negative dimension " + std::to_string(d));
      }
      (void)t.nbytes();  // refuses a size that overflows
      const auto where = get<uint8_t>();
      if (where > static_cast<uint8_t>(Placement::kInline)) fail("tensor placement " + std::to_string(where));
      if (where == static_cast<uint8_t>(Placement::kInline)) {
        t.bytes = get_bytes();
        if (t.bytes->size() != t.nbytes()) {
          fail("a tensor of " + std::to_string(t.nbytes()) + " bytes carries " +
               std::to_string(t.bytes->size()));
        }
      }
      if (where == static_cast<uint8_t>(Placement::kDirect)) {
        DirectSource source;
        source.address = get<uint64_t>();
        source.hold_word = get<uint64_t>();
        source.token = get<uint64_t>();
        if (source.hold_word == 0 || source.token == 0) fail("a direct read without a hold");
        t.direct = source;
      }
    }
    return tensors;
  }
  void finish() const {
    if (at_ != bytes_.size()) fail(std::to_string(bytes_.size() - at_) + " bytes after the end");
  }

 private:
  static const char* name(Kind kind) {
    switch (kind) {
      case Kind::kRequest:
        return "request";
      case Kind::kResponse:
        return "response";
      case Kind::kRelease:
        return "release";
    }
    return "message";
  }
  void need(uint64_t n, const char* what) const {
    if (n > bytes_.size() - at_) {
      fail(std::string(what) + " of " + std::to_string(n) + " bytes at offset " + std::to_string(at_) +
           " runs past the end (" + std::to_string(bytes_.size()) + " bytes)");
    }
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw DistBackendError("rpc: malformed message header: " + why);
  }

  const std::vector<uint8_t>& bytes_;
  size_t at_ = 0;
};

}  // namespace

size_t TensorMeta::nbytes() const {
  size_t n = element_size(dtype);
  for (int64_t d : shape) {
    const auto dim = static_cast<size_t>(d);
    if (dim != 0 && n > std::numeric_limits<size_t>::max() / dim) {
      throw DistBackendError("rpc: malformed message header: a tensor's size overflows");
    }
    n *= dim;
  }
  return n;
}

std::vector<uint8_t> encode(const Request& request) {
  Writer w(Kind::kRequest);
  w.put(request.id);
  w.put(request.timeout_us);
  w.put_string(request.function);
  w.put_bytes(request.payload.data(), request.payload.size());
  w.put_tensors(request.tensors);
  return w.take();
}

std::vector<uint8_t> encode(const Response& response) {
  Writer w(Kind::kResponse);
  w.put(response.id);
  w.put(static_cast<uint8_t>(response.ok ? 1 : 0));
  if (!response.ok) {
    w.put_string(response.error_type);
    w.put_string(response.error_message);
    w.put_string(response.error_traceback);
  }
  w.put_bytes(response.payload.data(), response.payload.size());
  w.put_tensors(response.tensors);
  return w.take();
}

std::vector<uint8_t> encode(const Release& release) {
  Writer w(Kind::kRelease);
  w.put(release.id);
  w.put(static_cast<uint8_t>(release.response ? 1 : 0));
  return w.take();
}

Kind kind_of(const std::vector<uint8_t>& bytes) {
  if (!bytes.empty() && bytes[0] >= static_cast<uint8_t>(Kind::kRequest) &&
      bytes[0] <= static_cast<uint8_t>(Kind::kRelease)) {
    return static_cast<Kind>(bytes[0]);
  }
  throw DistBackendError("rpc: malformed message header: not a request, response or release");
}

Request decode_request(const std::vector<uint8_t>& bytes) {
  Reader r(bytes, Kind::kRequest);
  Request request;
  request.id = r.get<uint64_t>();
  request.timeout_us = r.get<int64_t>();
  request.function = r.get_string();
  request.payload = r.get_bytes();
  request.tensors = r.get_tensors();
  r.finish();
  return request;
}

Response decode_response(const std::vector<uint8_t>& bytes) {
  Reader r(bytes, Kind::kResponse);
  Response response;
  response.id = r.get<uint64_t>();
  response.ok = r.get_flag("status");
  if (!response.ok) {
    response.error_type = r.get_string();
    response.error_message = r.get_string();
    response.error_traceback = r.get_string();
  }
  response.payload = r.get_bytes();
  response.tensors = r.get_tensors();
  r.finish();
  return response;
}

Release decode_release(const std::vector<uint8_t>& bytes) {
  Reader r(bytes, Kind::kRelease);
  Release release;
  release.id = r.get<uint64_t>();
  release.response = r.get_flag("direction");
  r.finish();
  return release;
}

}  // namespace tdist::rpc::wire
