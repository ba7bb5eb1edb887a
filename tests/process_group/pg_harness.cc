#include "pg_harness.h"

#include <signal.h>
#include <unistd.h>

#include <complex>
#include <stdexcept>

#include "tdist/file_store.h"

namespace tdist::testing {

std::string with_groups(Mode mode, int n, const std::function<void(ProcessGroup&, int)>& fn,
                        std::chrono::milliseconds timeout) {
  // The store outlives slow or failing collectives: its own deadline is
  // longer than the group's.
  return run_with_store(
      mode, n,
      [&](Store& store, int rank) -> KeepAlive {
        ProcessGroupOptions options;
        options.timeout = timeout;
        auto group = group_on_store(store, rank, n, options);
        fn(*group, rank);
        return group;
      },
      timeout + std::chrono::seconds(40), timeout + std::chrono::seconds(20));
}

Group group_on_store(Store& store, int rank, int size, const ProcessGroupOptions& options) {
  // Groups take a shared_ptr; the store outlives the group here.
  std::shared_ptr<Store> shared(&store, [](Store*) {});
  return create_process_group("tdist", std::make_shared<PrefixStore>("pg", shared), rank, size, options);
}

std::string worlds_param_name(const ::testing::TestParamInfo<std::tuple<Mode, int>>& p) {
  return std::string(mode_name(std::get<0>(p.param))) + "_" + std::to_string(std::get<1>(p.param));
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

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(what);
}

void check_elements(const Tensor& t, int64_t first, int64_t count, const std::function<double(int64_t)>& want,
                    const std::string& what) {
  for (int64_t i = 0; i < count; ++i) {
    if (real_at(t, first + i) != want(i)) {
      throw std::runtime_error(what + ": element " + std::to_string(i) + " is " +
                               std::to_string(real_at(t, first + i)) + ", expected " +
                               std::to_string(want(i)));
    }
  }
}

void checked_all_reduce(ProcessGroup& pg, int64_t count, int round) {
  const int n = pg.size();
  Tensor t = make_tensor(DType::kFloat32, count, [&](int64_t i) { return pg.rank() + i + round; });
  pg.all_reduce(t, ReduceOp::SUM)->wait();
  check_elements(
      t, 0, count, [&](int64_t i) { return n * (n - 1) / 2.0 + n * static_cast<double>(i + round); },
      "all_reduce round " + std::to_string(round));
}

KillTestOp all_reduce_op() {
  return KillTestOp{"all_reduce", [](int) { return 1.0f; },
                    [](ProcessGroup& pg, Tensor& t) { return pg.all_reduce(t, ReduceOp::SUM); },
                    [](int ranks) { return static_cast<float>(ranks) * static_cast<float>(ranks); }};
}

std::string kill_one_rank_in(const KillTestOp& op, int ranks, const std::string& name, size_t floats,
                             int victim, const std::function<void(int)>& setup,
                             const std::function<void(ProcessGroup&)>& on_group) {
  const std::string path = temp_path(name);
  auto outcomes = run_forked(
      ranks,
      [&](int rank) {
        if (setup) setup(rank);
        auto store = std::make_shared<FileStore>(path, ranks);
        ProcessGroupOptions options;
        options.timeout = std::chrono::seconds(60);
        auto pg = create_process_group("tdist", store, rank, ranks, options);
        if (on_group) on_group(*pg);
        std::vector<float> data(floats, op.initial(rank));
        Tensor t = Tensor::wrap(data);
        op.start(*pg, t)->wait();  // a first one completes everywhere
        if (store->add("first_done", 1) == ranks) store->set("all_first_done", "1");
        auto work = op.start(*pg, t);
        if (rank == victim) {
          store->wait({"all_first_done"});
          raise(SIGKILL);
        }
        // The victim's part of this one may finish before its SIGKILL lands
        // (its group runs it while it waits on the store): then this one
        // completes everywhere, and the next, which the victim never joins,
        // must fail.
        for (int call = 0; call < 2; ++call) {
          try {
            (call == 0 ? work : op.start(*pg, t))->wait();
            if (call == 1) break;  // the victim never joined it
            // Completed before the victim died: then it must be right.
            const float expected = op.after_two(ranks);
            for (float x : data) {
              check(x == expected, [&] {
                return "a " + op.name + " completed with " + std::to_string(x) + ", expected " +
                       std::to_string(expected);
              });
            }
          } catch (const DistError& e) {
            check(dynamic_cast<const DistNetworkError*>(&e) != nullptr,
                  std::string("not a network error: ") + e.what());
            check(std::string(e.what()).find("rank " + std::to_string(victim)) != std::string::npos,
                  std::string("the dead rank is not named: ") + e.what());
            return;
          }
        }
        throw std::runtime_error("two " + op.name + "s completed although rank " + std::to_string(victim) +
                                 " was killed");
      },
      std::chrono::seconds(50));
  unlink(path.c_str());
  bool as_expected = true;
  for (const auto& o : outcomes) as_expected = as_expected && (o.rank == victim ? o.signal == SIGKILL : o.ok);
  return as_expected ? "" : describe_failures(outcomes);
}

std::string kill_one_rank_in_all_reduce(int ranks, const std::string& name, size_t floats, int victim,
                                        const std::function<void(int)>& setup,
                                        const std::function<void(ProcessGroup&)>& on_group) {
  return kill_one_rank_in(all_reduce_op(), ranks, name, floats, victim, setup, on_group);
}

}  // namespace tdist::testing
