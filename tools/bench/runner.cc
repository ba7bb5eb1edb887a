#include "runner.h"

#include <complex>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <type_traits>

#include "check.h"
#include "tdist/distributed.h"

namespace tdist::bench {
namespace {

constexpr int kRoot = 0;
constexpr int kMaxReportedErrors = 3;

template <typename T>
struct IsComplex : std::false_type {};
template <typename T>
struct IsComplex<std::complex<T>> : std::true_type {};

// A check value as an element. Integers wrap (two's complement), bool is
// "nonzero"; the float types hold every check value exactly.
template <typename T>
T to_element(int64_t v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(v);
  } else if constexpr (IsComplex<T>::value) {
    using F = typename T::value_type;
    return T(static_cast<F>(v), static_cast<F>(-v));
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// A value that differs from `expected`: what an output holds until the op
// writes it.
template <typename T>
T poison(T expected) {
  if constexpr (std::is_same_v<T, bool>) {
    return !expected;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(expected ^ T{1});
  } else if constexpr (IsComplex<T>::value) {
    const auto nan = std::numeric_limits<typename T::value_type>::quiet_NaN();
    return T(nan, nan);
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(std::numeric_limits<float>::quiet_NaN());
  } else {
    return std::numeric_limits<T>::quiet_NaN();
  }
}

template <typename T>
bool same(T a, T b) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(a) == static_cast<float>(b);
  } else {
    return a == b;
  }
}

template <typename T>
std::string show(T v) {
  std::ostringstream out;
  if constexpr (std::is_same_v<T, bool> || std::is_integral_v<T>) {
    out << static_cast<int64_t>(v);
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    out << static_cast<float>(v);
  } else {
    out << v;
  }
  return out.str();
}

}  // namespace

OpRunner::OpRunner(BenchOp op, DType dtype, const ReduceOp& reduce_op, const Layout& layout, bool batch_p2p)
    : op_(op),
      dtype_(dtype),
      reduce_op_(reduce_op),
      layout_(layout),
      rank_(get_rank()),
      world_size_(get_world_size()),
      batch_p2p_(batch_p2p) {
  const int64_t c = layout.count;
  const bool root = rank_ == kRoot;
  switch (op) {
    case BenchOp::kGather:
      input_ = Tensor::zeros(dtype, {c});
      output_ = Tensor::zeros(dtype, {root ? layout.output_elems : 0});
      if (root) {
        for (int r = 0; r < world_size_; ++r) root_list_.push_back(output_.view(r * c, c));
      }
      break;
    case BenchOp::kScatter:
      input_ = Tensor::zeros(dtype, {root ? layout.input_elems : 0});
      output_ = Tensor::zeros(dtype, {c});
      if (root) {
        for (int r = 0; r < world_size_; ++r) root_list_.push_back(input_.view(r * c, c));
      }
      break;
    default:
      input_ = Tensor::zeros(dtype, {layout.input_elems});
      output_ = Tensor::zeros(dtype, {layout.output_elems});
      break;
  }
  if (op == BenchOp::kSendRecv) {
    // A ring: everyone sends to the next rank and receives from the
    // previous one at the same time, as nccl-tests' sendrecv does. The
    // batch's list is made once, as the MPIs' benchmarks post from fixed
    // arguments: its tensor copies are the caller's cost, not the library's.
    next_ = (rank_ + 1) % world_size_;
    prev_ = (rank_ + world_size_ - 1) % world_size_;
    if (batch_p2p_) ring_ops_ = {{P2POp::Kind::kIrecv, output_, prev_}, {P2POp::Kind::kIsend, input_, next_}};
  }
}

void OpRunner::run() {
  switch (op_) {
    case BenchOp::kAllReduce:
      all_reduce(input_, reduce_op_);
      break;
    case BenchOp::kBroadcast:
      broadcast(input_, kRoot);
      break;
    case BenchOp::kReduce:
      reduce(input_, kRoot, reduce_op_);
      break;
    case BenchOp::kAllGather:
      all_gather_into_tensor(output_, input_);
      break;
    case BenchOp::kReduceScatter:
      reduce_scatter_tensor(output_, input_, reduce_op_);
      break;
    case BenchOp::kAllToAll:
      all_to_all_single(output_, input_);
      break;
    case BenchOp::kGather:
      gather(input_, root_list_, kRoot);
      break;
    case BenchOp::kScatter:
      scatter(output_, root_list_, kRoot);
      break;
    case BenchOp::kSendRecv: {
      if (!batch_p2p_) {
        (void)sendrecv(input_, next_, output_, prev_);
        break;
      }
      auto works = batch_isend_irecv(ring_ops_);
      for (auto& work : works) work->wait();
      break;
    }
    case BenchOp::kBarrier:
      barrier();
      break;
  }
}

void OpRunner::prepare_check() {
  const int64_t c = layout_.count;
  const int p = world_size_;
  const ReducePattern pattern(dtype_, reduce_op_, p);
  dispatch_dtype(dtype_, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* in = static_cast<T*>(input_.data());
    T* out = static_cast<T*>(output_.data());
    auto fill = [](T* data, int64_t n, auto&& value_of) {
      for (int64_t k = 0; k < n; ++k) data[k] = value_of(k);
    };
    const int64_t n_in = input_.numel();
    const int64_t n_out = output_.numel();
    switch (op_) {
      case BenchOp::kAllReduce:
      case BenchOp::kReduce:
      case BenchOp::kReduceScatter:
        fill(in, n_in, [&](int64_t k) { return to_element<T>(pattern.input(rank_, k)); });
        fill(out, n_out, [&](int64_t j) { return poison(to_element<T>(pattern.expected(rank_ * c + j))); });
        break;
      case BenchOp::kBroadcast:
        fill(in, n_in, [&](int64_t k) {
          const T value = to_element<T>(data_value(dtype_, kRoot, k));
          return rank_ == kRoot ? value : poison(value);
        });
        break;
      case BenchOp::kAllGather:
      case BenchOp::kGather:
        fill(in, n_in, [&](int64_t j) { return to_element<T>(data_value(dtype_, rank_, j)); });
        fill(out, n_out, [&](int64_t k) { return poison(to_element<T>(data_value(dtype_, k / c, k % c))); });
        break;
      case BenchOp::kScatter:
        fill(in, n_in, [&](int64_t k) { return to_element<T>(data_value(dtype_, k / c, k % c)); });
        fill(out, n_out, [&](int64_t j) { return poison(to_element<T>(data_value(dtype_, rank_, j))); });
        break;
      case BenchOp::kAllToAll:
        // Block d of sender s is identified as s * p + d wherever it lands.
        fill(in, n_in,
             [&](int64_t k) { return to_element<T>(data_value(dtype_, int64_t{rank_} * p + k / c, k % c)); });
        fill(out, n_out, [&](int64_t k) {
          return poison(to_element<T>(data_value(dtype_, (k / c) * p + rank_, k % c)));
        });
        break;
      case BenchOp::kSendRecv: {
        const int prev = (rank_ + p - 1) % p;
        fill(in, n_in, [&](int64_t k) { return to_element<T>(data_value(dtype_, rank_, k)); });
        fill(out, n_out, [&](int64_t k) { return poison(to_element<T>(data_value(dtype_, prev, k))); });
        break;
      }
      case BenchOp::kBarrier:
        break;
    }
  });
}

const Tensor* OpRunner::checked_buffer() const {
  switch (op_) {
    case BenchOp::kBarrier:
      return nullptr;
    case BenchOp::kReduce:
      // Other ranks' buffers are unspecified after reduce.
      return rank_ == kRoot ? &input_ : nullptr;
    case BenchOp::kAllReduce:
    case BenchOp::kBroadcast:
      return &input_;  // in place
    default:
      return &output_;  // gather's is empty off the root
  }
}

void OpRunner::corrupt_for_test() {
  const Tensor* checked = checked_buffer();
  if (checked == nullptr || checked->numel() == 0) return;
  dispatch_dtype(dtype_, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* data = static_cast<T*>(checked->data());
    data[0] = poison(data[0]);
  });
}

int64_t OpRunner::count_errors() const {
  const int64_t c = layout_.count;
  const int p = world_size_;
  const ReducePattern pattern(dtype_, reduce_op_, p);
  // Which buffer this rank verifies, and the value its element k must hold.
  const Tensor* checked = checked_buffer();
  if (checked == nullptr) return 0;
  std::function<int64_t(int64_t)> expected;
  switch (op_) {
    case BenchOp::kAllReduce:
    case BenchOp::kReduce:
      expected = [&](int64_t k) { return pattern.expected(k); };
      break;
    case BenchOp::kReduceScatter:
      expected = [&](int64_t j) { return pattern.expected(rank_ * c + j); };
      break;
    case BenchOp::kBroadcast:
      expected = [&](int64_t k) { return data_value(dtype_, kRoot, k); };
      break;
    case BenchOp::kAllGather:
    case BenchOp::kGather:  // only the root has an output
      expected = [&](int64_t k) { return data_value(dtype_, k / c, k % c); };
      break;
    case BenchOp::kScatter:
      expected = [&](int64_t j) { return data_value(dtype_, rank_, j); };
      break;
    case BenchOp::kAllToAll:
      expected = [&](int64_t k) { return data_value(dtype_, (k / c) * p + rank_, k % c); };
      break;
    case BenchOp::kSendRecv:
      expected = [&](int64_t k) { return data_value(dtype_, (rank_ + p - 1) % p, k); };
      break;
    case BenchOp::kBarrier:
      return 0;
  }
  int64_t errors = 0;
  dispatch_dtype(dtype_, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* data = static_cast<const T*>(checked->data());
    for (int64_t k = 0; k < checked->numel(); ++k) {
      const T want = to_element<T>(expected(k));
      if (same(data[k], want)) continue;
      if (++errors <= kMaxReportedErrors) {
        std::fprintf(stderr, "tdist-bench: rank %d: %s of %llu bytes: element %lld is %s, expected %s\n",
                     rank_, bench_op_name(op_), static_cast<unsigned long long>(layout_.bytes),
                     static_cast<long long>(k), show(data[k]).c_str(), show(want).c_str());
      }
    }
  });
  return errors;
}

void OpRunner::zero() {
  if (input_.nbytes() > 0) std::memset(input_.data(), 0, input_.nbytes());
  if (output_.nbytes() > 0) std::memset(output_.data(), 0, output_.nbytes());
}

}  // namespace tdist::bench
