#include "pg_harness.h"

#include <complex>
#include <stdexcept>

#include "tdist/file_store.h"

namespace tdist::testing {

std::string with_groups(Mode mode, int n, const std::function<void(ProcessGroup&, int)>& fn,
                        std::chrono::milliseconds timeout) {
  auto hash = std::make_shared<HashStore>();
  std::string path = temp_path("pg");
  return run_ranks(
      mode, n,
      [&](int rank) {
        std::shared_ptr<Store> store = hash;
        if (mode == Mode::kProcesses) store = std::make_shared<FileStore>(path, n);
        // The store outlives slow or failing collectives: its own deadline is
        // longer than the group's.
        store->set_timeout(timeout + std::chrono::seconds(20));
        ProcessGroupOptions options;
        options.timeout = timeout;
        auto group =
            create_process_group("tdist", std::make_shared<PrefixStore>("pg", store), rank, n, options);
        fn(*group, rank);
        // Nobody tears down its connections while others still use them.
        if (store->add("pg_done", 1) == n) store->set("pg_all_done", "1");
        store->wait({"pg_all_done"});
      },
      timeout + std::chrono::seconds(40));
}

Tensor make_tensor(DType dtype, int64_t count, const std::function<double(int64_t)>& value) {
  Tensor t = Tensor::zeros(dtype, {count});
  for (int64_t i = 0; i < count; ++i) set_at(t, i, value(i));
  return t;
}

void set_at(const Tensor& t, int64_t i, double v) {
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(t.data()) + i;
    if constexpr (std::is_same_v<T, bool>) {
      *p = v != 0;
    } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      *p = T(static_cast<float>(v));
    } else if constexpr (std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>) {
      using R = typename T::value_type;
      *p = T(static_cast<R>(v), static_cast<R>(-v));
    } else if constexpr (std::is_integral_v<T>) {
      // Wrap like the two's-complement integers the tensor holds.
      *p = static_cast<T>(static_cast<int64_t>(v));
    } else {
      *p = static_cast<T>(v);
    }
  });
}

double real_at(const Tensor& t, int64_t i) {
  return dispatch_dtype(t.dtype(), [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    T v = static_cast<const T*>(t.data())[i];
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      return static_cast<float>(v);
    } else if constexpr (std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>) {
      return static_cast<double>(v.real());
    } else {
      return static_cast<double>(v);
    }
  });
}

double imag_at(const Tensor& t, int64_t i) {
  return dispatch_dtype(t.dtype(), [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>) {
      return static_cast<double>(static_cast<const T*>(t.data())[i].imag());
    } else {
      return 0;
    }
  });
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

}  // namespace tdist::testing
