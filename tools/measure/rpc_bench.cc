// The C++ RPC layer's own cost (docs/rpc.md): two agents in this process,
// joined over loopback TCP, worker0 calling a registered function on
// worker1 that returns its tensor argument; the round trip per call at each
// size, with no Python on either side. tools/measure/rpc_compare.py measures the
// Python API against torch's.
//
//   build/bin/tdist-rpc-bench --sizes 4,1048576,67108864

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <thread>

#include "tdist/rpc.h"
#include "tdist/store.h"

int main(int argc, char** argv) {
  CLI::App app{"Round trip of a C++ RPC between two agents of this process"};
  std::vector<size_t> sizes{4, 1 << 20, 64 << 20};
  int iterations = 0;
  app.add_option("--sizes", sizes, "bytes of the float32 tensor sent and returned")->delimiter(',');
  app.add_option("--iters", iterations,
                 "calls per size (default: 2000 below 64 KiB, 200 below 8 MiB, else 10)");
  CLI11_PARSE(app, argc, argv);

  using namespace tdist;
  rpc::register_function("bench.echo", [](rpc::Message args, const rpc::CallInfo&) { return args; });
  auto store = std::make_shared<HashStore>();
  std::shared_ptr<rpc::Agent> callee;
  std::thread other([&] { callee = rpc::Agent::start("worker1", 1, 2, store); });
  auto caller = rpc::Agent::start("worker0", 0, 2, store);
  other.join();
  for (size_t bytes : sizes) {
    const int64_t count = static_cast<int64_t>(std::max<size_t>(1, bytes / 4));
    Tensor t = Tensor::zeros(DType::kFloat32, {count});
    const int n = iterations > 0 ? iterations : bytes < (64 << 10) ? 2000 : bytes < (8 << 20) ? 200 : 10;
    for (int i = 0; i < std::max(3, n / 10); ++i) caller->call_sync("worker1", "bench.echo", {{}, {t}});
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) caller->call_sync("worker1", "bench.echo", {{}, {t}});
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / n;
    std::printf("{\"lib\":\"tdist-rpc-cpp\",\"op\":\"echo\",\"bytes\":%zu,\"time_us\":%.2f}\n", bytes, us);
  }
  std::thread close([&] { callee->shutdown(true); });
  caller->shutdown(true);
  close.join();
  return 0;
}
