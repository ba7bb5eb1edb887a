#pragma once

// Shared by the algorithm tests: groups of ranks (threads or forked
// processes) connected by the TCP transport, call contexts with the same
// sequence numbers on every rank, and typed buffers with exact references.
//
// References: every reduction test uses values whose result is exact in any
// order of combination, so one independent computation in wider arithmetic
// (int64/uint64 with wrap-around for integers, double for floating and
// complex types) is the answer for every algorithm: small integers for SUM,
// MIN, MAX and PREMUL_SUM (factor 3), powers of two for PRODUCT, and for AVG
// offsets that cancel across ranks, so the mean is a small integer. Integer
// overflow, where it happens (PRODUCT, unsigned wrap), is modular and
// therefore order-independent too. Floating-point order sensitivity is
// tested separately, by bitwise identity across ranks.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <complex>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "algorithms/algorithms.h"
#include "multirank.h"
#include "tdist/dtype.h"
#include "tdist/file_store.h"
#include "tdist/reduce_op.h"
#include "transport/tcp/tcp_transport.h"

namespace tdist::testing {

using namespace std::chrono_literals;

/// One rank's side of a connected group.
class Group {
 public:
  explicit Group(transport::Transport& t) : transport_(t) {}

  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }
  transport::Transport& transport() { return transport_; }

  /// The context of the next call; every rank makes the same calls in the
  /// same order, so sequence numbers agree.
  algorithms::CallContext call(const std::string& op, std::chrono::milliseconds timeout = 60s) {
    return algorithms::CallContext{transport_, op, seq_++, transport::Clock::now() + timeout, timeout};
  }

 private:
  transport::Transport& transport_;
  uint64_t seq_ = 1;
};

using GroupFn = std::function<void(Group&)>;
using StoreGroupFn = std::function<void(Store&, Group&)>;

/// Runs fn on n ranks, each with its own connected TCP transport, and keeps
/// every transport alive until all ranks are done; fn also gets the store
/// the ranks met through (for what a test arranges outside the group).
/// Returns run_ranks' description of failures ("" if none).
inline std::string with_store_and_group(Mode mode, int n, const StoreGroupFn& fn,
                                        std::chrono::milliseconds deadline = 240s) {
  return run_with_store(
      mode, n,
      [&](Store& store, int rank) -> KeepAlive {
        transport::TcpOptions options;
        options.timeout = 60s;
        std::shared_ptr<transport::Transport> t = transport::connect_tcp(store, rank, n, options);
        Group group(*t);
        fn(store, group);
        return t;
      },
      deadline);
}

/// with_store_and_group for tests that need no store.
inline std::string with_group(Mode mode, int n, const GroupFn& fn,
                              std::chrono::milliseconds deadline = 240s) {
  return with_store_and_group(
      mode, n, [&](Store&, Group& group) { fn(group); }, deadline);
}

/// The parameters every multi-rank suite runs over: ranks as threads for
/// world sizes 1, 2, 3, 4, 5, 8 and as forked processes for 3 and 5.
struct GroupParam {
  Mode mode;
  int n;
};

inline std::vector<GroupParam> group_params() {
  std::vector<GroupParam> params;
  for (int n : {1, 2, 3, 4, 5, 8}) params.push_back({Mode::kThreads, n});
  for (int n : {3, 5}) params.push_back({Mode::kProcesses, n});
  return params;
}

inline std::string group_param_name(const ::testing::TestParamInfo<GroupParam>& info) {
  return std::string(mode_name(info.param.mode)) + "_" + std::to_string(info.param.n);
}

class GroupTest : public ::testing::TestWithParam<GroupParam> {
 protected:
  Mode mode() const { return GetParam().mode; }
  int n() const { return GetParam().n; }
};

/// Throws (failing the rank) with `what` unless `ok`.
inline void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

/// The element counts every collective is tried with on p ranks: 0, 1, odd,
/// fewer than p, more than p.
inline std::vector<size_t> small_counts(int p) {
  std::vector<size_t> counts{0, 1, 7};
  if (p > 2) counts.push_back(static_cast<size_t>(p) - 1);
  counts.push_back(static_cast<size_t>(3 * p) + 2);
  return counts;
}

/// The large count (the pipelined path): over a million, odd.
inline constexpr size_t kLargeCount = 1'000'003;

// ---- Typed buffers ----

/// `count` elements of `dtype`, element i holding value(i) converted to the
/// type (complex: value - 2·value·i; bool: value != 0).
inline std::vector<uint8_t> make_buffer(DType dtype, size_t count,
                                        const std::function<double(size_t)>& value) {
  std::vector<uint8_t> bytes(count * element_size(dtype));
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < count; ++i) {
      const double v = value(i);
      T x;
      if constexpr (std::is_same_v<T, bool>) {
        x = v != 0;
      } else if constexpr (std::is_integral_v<T>) {
        x = static_cast<T>(static_cast<int64_t>(v));
      } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        x = T(static_cast<float>(v));
      } else if constexpr (std::is_same_v<T, std::complex<float>> ||
                           std::is_same_v<T, std::complex<double>>) {
        using R = typename T::value_type;
        x = T(static_cast<R>(v), static_cast<R>(-2 * v));
      } else {
        x = static_cast<T>(v);
      }
      std::memcpy(bytes.data() + i * sizeof(T), &x, sizeof(T));
    }
  });
  return bytes;
}

/// The value rank `rank` of `p` contributes at element i for `op`: exact in
/// any order of combination (see the file comment).
inline double reduce_value(DType dtype, ReduceOp::Kind kind, int rank, int p, size_t i) {
  const auto r = static_cast<int64_t>(rank);
  const auto k = static_cast<int64_t>(i % 1024);
  if (kind == ReduceOp::PRODUCT) {
    if (is_integral(dtype, /*include_bool=*/false)) return static_cast<double>((r + 2 * k) % 5 - 2);
    static const double kPowers[] = {1.0, 2.0, -1.0, 0.5};
    return kPowers[(r * 3 + k) % 4];
  }
  if (kind == ReduceOp::AVG) {
    // Offsets 2r - (p - 1) sum to zero: the mean is exactly (k % 7) - 3.
    return static_cast<double>(k % 7 - 3 + 2 * r - (p - 1));
  }
  return static_cast<double>((r * 5 + k * 3) % 13 - 6);
}

/// The buffer rank `rank` contributes.
inline std::vector<uint8_t> contribution(DType dtype, const ReduceOp& op, int rank, int p, size_t count) {
  return make_buffer(dtype, count, [&](size_t i) { return reduce_value(dtype, op.kind, rank, p, i); });
}

/// op over the p contributions, computed independently in wide arithmetic.
inline std::vector<uint8_t> reference_reduce(DType dtype, const ReduceOp& op, int p, size_t count) {
  std::vector<std::vector<uint8_t>> inputs;
  for (int r = 0; r < p; ++r) inputs.push_back(contribution(dtype, op, r, p, count));
  std::vector<uint8_t> out(count * element_size(dtype));
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto in = [&](int r, size_t i) {
      T x;
      std::memcpy(&x, inputs[static_cast<size_t>(r)].data() + i * sizeof(T), sizeof(T));
      return x;
    };
    for (size_t i = 0; i < count; ++i) {
      T result{};
      if constexpr (std::is_same_v<T, bool>) {
        bool acc = in(0, i);
        for (int r = 1; r < p; ++r) {
          const bool x = in(r, i);
          switch (op.kind) {
            case ReduceOp::SUM:
            case ReduceOp::MAX:
            case ReduceOp::BOR:
              acc = acc || x;
              break;
            case ReduceOp::PRODUCT:
            case ReduceOp::MIN:
            case ReduceOp::BAND:
              acc = acc && x;
              break;
            default:
              acc = acc != x;
              break;
          }
        }
        result = acc;
      } else if constexpr (std::is_integral_v<T>) {
        const auto factor = static_cast<uint64_t>(static_cast<int64_t>(std::trunc(op.premul_factor)));
        uint64_t sum = 0, product = 1, band = ~uint64_t{0}, bor = 0, bxor = 0;
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (int r = 0; r < p; ++r) {
          const int64_t x = static_cast<int64_t>(in(r, i));
          const auto u = static_cast<uint64_t>(x);
          sum += op.kind == ReduceOp::PREMUL_SUM ? static_cast<uint64_t>(static_cast<T>(u * factor)) : u;
          product *= u;
          band &= u;
          bor |= u;
          bxor ^= u;
          lo = std::min(lo, x);
          hi = std::max(hi, x);
        }
        switch (op.kind) {
          case ReduceOp::SUM:
          case ReduceOp::PREMUL_SUM:
            result = static_cast<T>(sum);
            break;
          case ReduceOp::PRODUCT:
            result = static_cast<T>(product);
            break;
          case ReduceOp::MIN:
            result = static_cast<T>(lo);
            break;
          case ReduceOp::MAX:
            result = static_cast<T>(hi);
            break;
          case ReduceOp::BAND:
            result = static_cast<T>(band);
            break;
          case ReduceOp::BOR:
            result = static_cast<T>(bor);
            break;
          case ReduceOp::BXOR:
            result = static_cast<T>(bxor);
            break;
          case ReduceOp::AVG:
            result = static_cast<T>(static_cast<int64_t>(static_cast<T>(sum)) / p);
            break;
        }
      } else {
        // Floating and complex: real and imaginary parts in double.
        auto parts = [](T x) -> std::pair<double, double> {
          if constexpr (std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>) {
            return {static_cast<double>(x.real()), static_cast<double>(x.imag())};
          } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
            return {static_cast<double>(static_cast<float>(x)), 0.0};
          } else {
            return {static_cast<double>(x), 0.0};
          }
        };
        // Sums start from rank 0's value, not 0.0, so that -0.0 + -0.0 stays -0.0.
        const double scale = op.kind == ReduceOp::PREMUL_SUM ? op.premul_factor : 1.0;
        double re = parts(in(0, i)).first * scale, im = parts(in(0, i)).second * scale;
        double product = 1, lo = INFINITY, hi = -INFINITY;
        for (int r = 0; r < p; ++r) {
          auto [a, b] = parts(in(r, i));
          if (r > 0) {
            re += a * scale;
            im += b * scale;
          }
          product *= a;
          lo = std::min(lo, a);
          hi = std::max(hi, a);
        }
        if (op.kind == ReduceOp::AVG) {
          re /= p;
          im /= p;
        }
        if (op.kind == ReduceOp::PRODUCT) re = product;
        if (op.kind == ReduceOp::MIN) re = lo;
        if (op.kind == ReduceOp::MAX) re = hi;
        if constexpr (std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>) {
          using R = typename T::value_type;
          result = T(static_cast<R>(re), static_cast<R>(im));
        } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
          result = T(static_cast<float>(re));
        } else {
          result = static_cast<T>(re);
        }
      }
      std::memcpy(out.data() + i * sizeof(T), &result, sizeof(T));
    }
  });
  return out;
}

/// The first element where two buffers differ, as text, or "" if equal.
inline std::string first_difference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                                    size_t element_bytes) {
  if (got.size() != want.size()) {
    return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  }
  for (size_t i = 0; i < got.size(); i += element_bytes) {
    if (std::memcmp(got.data() + i, want.data() + i, element_bytes) != 0) {
      return "element " + std::to_string(i / element_bytes) + " differs";
    }
  }
  return "";
}

/// Ops valid for `dtype`, with PREMUL_SUM's factor 3.
inline std::vector<ReduceOp> ops_for(DType dtype) {
  std::vector<ReduceOp> ops;
  for (ReduceOp::Kind kind : {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX, ReduceOp::BAND,
                              ReduceOp::BOR, ReduceOp::BXOR, ReduceOp::AVG, ReduceOp::PREMUL_SUM}) {
    const ReduceOp op = kind == ReduceOp::PREMUL_SUM ? ReduceOp::premul_sum(3.0) : ReduceOp(kind);
    if (is_reduce_supported(dtype, op)) ops.push_back(op);
  }
  return ops;
}

/// "float32 SUM" for messages.
inline std::string describe(DType dtype, const ReduceOp& op) {
  return std::string(dtype_name(dtype)) + " " + reduce_op_name(op);
}

/// A byte pattern that identifies (rank, index): for data movement tests.
inline uint8_t pattern_byte(int rank, size_t i) {
  return static_cast<uint8_t>((static_cast<size_t>(rank) * 131 + i * 7 + i / 251) & 0xff);
}

inline std::vector<uint8_t> pattern_block(int rank, size_t n) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = pattern_byte(rank, i);
  return bytes;
}

}  // namespace tdist::testing
