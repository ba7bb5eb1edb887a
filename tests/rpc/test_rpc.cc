// RPC between workers (include/tdist/rpc.h), as threads and as forked
// processes: calls by name with bytes and tensors, both ways at once among
// 1 to 8 workers; remote errors, unknown functions, timeouts and nested
// deadlines; a busy worker's refusal; a killed worker named by its callers;
// graceful and immediate shutdown. About 700 lines in one file: every
// test runs on the one harness of workers as threads and as processes
// defined at its top.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "multirank.h"
#include "rpc/rpc_buffers.h"
#include "rpc/rpc_direct.h"
#include "tdist/rpc.h"

namespace tdist::rpc {
namespace {

using testing::Mode;
using testing::run_with_store;
using namespace std::chrono_literals;

std::shared_ptr<Store> borrow(Store& store) {
  return {&store, [](Store*) {}};
}

std::string worker(int rank) {
  return "worker" + std::to_string(rank);
}

std::vector<uint8_t> bytes_of(const std::string& text) {
  return {text.begin(), text.end()};
}
std::string text_of(const std::vector<uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}

// How long test.nested's own call took to time out (-1: it did not).
std::atomic<int64_t> g_nested_failed_after_ms{-1};

// The functions of these tests, registered once per process (forked
// workers inherit them).
void register_test_functions() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Echoes its payload with the serving worker's and the caller's names,
    // and returns each tensor plus one (float64) or doubled (int32).
    register_function("test.echo", [](const Message& args, const CallInfo& call) {
      Message out;
      out.payload = bytes_of(text_of(args.payload) + " from " + call.caller.name);
      for (const Tensor& t : args.tensors) {
        Tensor r = t.clone();
        if (t.dtype() == DType::kFloat64) {
          for (int64_t i = 0; i < t.numel(); ++i) static_cast<double*>(r.data())[i] += 1.0;
        } else if (t.dtype() == DType::kInt32) {
          for (int64_t i = 0; i < t.numel(); ++i) static_cast<int32_t*>(r.data())[i] *= 2;
        }
        out.tensors.push_back(r);
      }
      return out;
    });
    register_function("test.raise", [](const Message&, const CallInfo&) -> Message {
      throw std::out_of_range("index 7 is past the end");
    });
    register_function("test.raise_remote", [](const Message&, const CallInfo&) -> Message {
      throw RemoteException("ValueError", "bad value", "Traceback (most recent call last):\n  line 1\n");
    });
    // Sleeps as many milliseconds as its payload says, whatever its
    // deadline (a function that overruns the call), then answers.
    register_function("test.sleep", [](const Message& args, const CallInfo& call) {
      const auto ms = std::stoi(text_of(args.payload));
      const auto until = Clock::now() + std::chrono::milliseconds(ms);
      while (Clock::now() < until) std::this_thread::sleep_for(5ms);
      return Message{bytes_of("slept"), {}};
    });
    // Calls test.sleep (3 s) on the worker its payload names, with no
    // timeout of its own: the nested call inherits what is left of this
    // one's deadline. Records how long it took to fail (only a call that
    // inherited it fails: with the default 60 s the sleep answers).
    register_function("test.nested", [](const Message& args, const CallInfo& call) {
      const auto start = Clock::now();
      try {
        call.agent->call_sync(text_of(args.payload), "test.sleep", Message{bytes_of("3000"), {}});
      } catch (const DistTimeoutError&) {
        g_nested_failed_after_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      }
      return Message{};
    });
  });
}

// Starts an agent per rank, runs body, shuts down gracefully.
std::string with_agents(Mode mode, int n, const std::function<void(Agent&, int)>& body,
                        const AgentOptions& options = {}) {
  register_test_functions();
  return run_with_store(mode, n, [&](Store& store, int rank) -> testing::KeepAlive {
    auto agent = Agent::start(worker(rank), rank, n, borrow(store), options);
    body(*agent, rank);
    agent->shutdown(true);
    return nullptr;
  });
}

// Every worker of the store's `n` gets here before any goes on.
void barrier(Store& store, const std::string& name, int rank, int n) {
  store.set(name + "/" + std::to_string(rank), "1");
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(name + "/" + std::to_string(r));
  store.wait(keys);
}

// A float64 tensor whose elements say who sent it.
Tensor numbered(int64_t count, int rank) {
  Tensor f = Tensor::zeros(DType::kFloat64, {count});
  for (int64_t i = 0; i < count; ++i)
    static_cast<double*>(f.data())[i] = double(int64_t{rank} * 1000 + i % 97);
  return f;
}

bool numbered_plus_one(const Tensor& t, int64_t count, int rank) {
  if (t.numel() != count || t.dtype() != DType::kFloat64) return false;
  for (int64_t i = 0; i < count; ++i) {
    if (static_cast<const double*>(t.data())[i] != double(int64_t{rank} * 1000 + i % 97) + 1) return false;
  }
  return true;
}

class RpcModes : public ::testing::TestWithParam<Mode> {};

TEST_P(RpcModes, TensorsArriveWhicheverWayTheyTravelAndOffersAreLetGo) {
  // In the header (at most 4 KiB), as bytes after it, or offered for a
  // direct read (same host): direct reads off, from 5,000 bytes, and from
  // the default 64 KiB. Every offer is let go of once read: after a round
  // of calls without tensors, which each worker sends behind its releases,
  // no hold word is in use.
  register_test_functions();
  for (size_t min_bytes : {size_t{0}, size_t{5000}, size_t{64} << 10}) {
    SCOPED_TRACE("direct reads from " + std::to_string(min_bytes) + " bytes");
    AgentOptions options;
    options.direct_read_min_bytes = min_bytes;
    const int n = 3;
    EXPECT_EQ(
        run_with_store(GetParam(), n,
                       [&](Store& store, int rank) -> testing::KeepAlive {
                         auto agent = Agent::start(worker(rank), rank, n, borrow(store), options);
                         const std::vector<int64_t> counts{0, 1, 511, 512, 625, 8191, 8192, 300'001};
                         std::vector<Future> futures;
                         for (int to = 0; to < n; ++to) {
                           for (int64_t count : counts) {
                             futures.push_back(agent->call_async(
                                 worker(to), "test.echo", Message{bytes_of("n"), {numbered(count, rank)}}));
                           }
                         }
                         for (size_t i = 0; i < futures.size(); ++i) {
                           const int64_t count = counts[i % counts.size()];
                           Message m = futures[i].wait();
                           if (m.tensors.size() != 1 || !numbered_plus_one(m.tensors[0], count, rank)) {
                             throw std::runtime_error("wrong tensor back for " + std::to_string(count) +
                                                      " elements");
                           }
                         }
                         barrier(store, "calls", rank, n);
                         for (int to = 0; to < n; ++to) agent->call_sync(worker(to), "test.echo", {});
                         barrier(store, "empty calls", rank, n);
                         if (detail::holds_in_use() != 0) {
                           throw std::runtime_error(std::to_string(detail::holds_in_use()) +
                                                    " offers were never let go of");
                         }
                         agent->shutdown(true);
                         return nullptr;
                       }),
        "");
  }
}

TEST(Rpc, LargeReceiveBuffersAreReusedAndSmallOnesAreNot) {
  // (40 MiB: a size no other test of this process leaves in the cache.)
  const size_t before = detail::cached_buffer_bytes();
  void* first = nullptr;
  {
    Tensor t = detail::receive_buffer(DType::kFloat32, {10 << 20}, size_t{40} << 20);
    first = t.data();
    ASSERT_EQ(t.nbytes(), size_t{40} << 20);
  }
  EXPECT_EQ(detail::cached_buffer_bytes(), before + (size_t{40} << 20));
  // A tensor of about that size takes that block; one of less than half
  // of it does not (it would pin four times its own size).
  Tensor again = detail::receive_buffer(DType::kInt8, {int64_t{30} << 20}, size_t{30} << 20);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(detail::cached_buffer_bytes(), before);
  Tensor small = detail::receive_buffer(DType::kInt8, {4096}, 4096);
  EXPECT_NE(small.data(), first);
}

TEST(Rpc, AReaderRefusesATensorItsSenderLetGoOf) {
  // The offer's bytes are still there (this process's own memory), but the
  // hold word says the sender let go: the read must not be used.
  std::vector<double> data(1000, 3.5);
  std::vector<double> into(1000, 0.0);
  auto hold = detail::acquire_hold();
  ASSERT_TRUE(hold.has_value());
  const auto address = reinterpret_cast<uint64_t>(data.data());
  const auto word = reinterpret_cast<uint64_t>(hold->word);
  detail::read_offer(getpid(), "self", into.data(), 8000, address, word, hold->token);
  EXPECT_EQ(into, data);
  // In pieces (the kernel moves under 2 GiB per call): 3000 + 3000 + 2000.
  for (size_t i = 0; i < 1000; ++i) data[i] = double(i);
  detail::read_offer(getpid(), "self", into.data(), 8000, address, word, hold->token, 3000);
  EXPECT_EQ(into, data);
  detail::release_hold(*hold);
  try {
    detail::read_offer(getpid(), "self", into.data(), 8000, address, word, hold->token);
    FAIL() << "a released offer was read";
  } catch (const DistBackendError& e) {
    EXPECT_NE(std::string(e.what()).find("worker 'self' let go of a tensor of 8000 bytes"), std::string::npos)
        << e.what();
  }
  // A token from an earlier offer of the same word is refused too.
  auto again = detail::acquire_hold();
  ASSERT_TRUE(again.has_value());
  EXPECT_NE(again->token, hold->token);
  EXPECT_THROW(detail::read_offer(getpid(), "self", into.data(), 8000, address,
                                  reinterpret_cast<uint64_t>(again->word), hold->token),
               DistBackendError);
  detail::release_hold(*again);
}

TEST_P(RpcModes, EveryWorkerCallsEveryOtherWithBytesAndTensors) {
  for (int n : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE(std::to_string(n) + " workers");
    EXPECT_EQ(
        with_agents(GetParam(), n,
                    [&](Agent& agent, int rank) {
                      // Every size class: none, one, odd, large.
                      std::vector<Future> futures;
                      for (int to = 0; to < n; ++to) {
                        for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{300'001}}) {
                          Tensor f = Tensor::zeros(DType::kFloat64, {count});
                          for (int64_t i = 0; i < count; ++i) {
                            static_cast<double*>(f.data())[i] = double(int64_t{rank} * 1000 + i % 97);
                          }
                          Tensor k = Tensor::zeros(DType::kInt32, {2, 3});
                          for (int i = 0; i < 6; ++i) static_cast<int32_t*>(k.data())[i] = rank + i;
                          futures.push_back(
                              agent.call_async(worker(to), "test.echo",
                                               Message{bytes_of("hi " + std::to_string(count)), {f, k}}));
                        }
                      }
                      size_t at = 0;
                      for (int to = 0; to < n; ++to) {
                        for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{300'001}}) {
                          Message m = futures[at++].wait();
                          if (text_of(m.payload) != "hi " + std::to_string(count) + " from " + worker(rank)) {
                            throw std::runtime_error("wrong payload: " + text_of(m.payload));
                          }
                          if (m.tensors.size() != 2 || m.tensors[0].numel() != count ||
                              m.tensors[1].shape() != std::vector<int64_t>{2, 3}) {
                            throw std::runtime_error("wrong tensors back");
                          }
                          for (int64_t i = 0; i < count; ++i) {
                            if (static_cast<double*>(m.tensors[0].data())[i] !=
                                double(int64_t{rank} * 1000 + i % 97) + 1) {
                              throw std::runtime_error("wrong float64 element " + std::to_string(i));
                            }
                          }
                          for (int i = 0; i < 6; ++i) {
                            if (static_cast<int32_t*>(m.tensors[1].data())[i] != 2 * (rank + i)) {
                              throw std::runtime_error("wrong int32 element");
                            }
                          }
                        }
                      }
                    }),
        "");
  }
}

TEST_P(RpcModes, RemoteErrorsComeBackWithTypeMessageAndWorker) {
  EXPECT_EQ(with_agents(
                GetParam(), 2,
                [&](Agent& agent, int rank) {
                  const std::string peer = worker(1 - rank);
                  try {
                    agent.call_sync(peer, "test.raise", {});
                    throw std::runtime_error("no error came back");
                  } catch (const RpcError& e) {
                    if (e.worker() != peer || e.type() != "std::out_of_range" ||
                        e.message() != "index 7 is past the end" ||
                        std::string(e.what()).find("'test.raise' on worker '" + peer +
                                                   "' raised std::out_of_range: index 7 is past the end") ==
                            std::string::npos) {
                      throw std::runtime_error(std::string("wrong error: ") + e.what());
                    }
                  }
                  try {
                    agent.call_sync(peer, "test.raise_remote", {});
                    throw std::runtime_error("no error came back");
                  } catch (const RpcError& e) {
                    if (e.type() != "ValueError" ||
                        e.remote_traceback().find("line 1") == std::string::npos ||
                        std::string(e.what()).find("remote traceback (worker '" + peer + "')") ==
                            std::string::npos) {
                      throw std::runtime_error(std::string("wrong error: ") + e.what());
                    }
                  }
                  try {
                    agent.call_sync(peer, "test.no_such_function", {});
                    throw std::runtime_error("no error came back");
                  } catch (const RpcError& e) {
                    if (std::string(e.what()).find("no function named 'test.no_such_function' is registered "
                                                   "on worker '" +
                                                   peer + "'") == std::string::npos) {
                      throw std::runtime_error(std::string("wrong error: ") + e.what());
                    }
                  }
                  try {
                    agent.call_sync("nobody", "test.echo", {});
                    throw std::runtime_error("an unknown worker was accepted");
                  } catch (const DistInvalidArgument& e) {
                    if (std::string(e.what()).find("no worker is named 'nobody'; the workers are 'worker0' "
                                                   "(0) 'worker1' (1)") == std::string::npos) {
                      throw std::runtime_error(std::string("wrong error: ") + e.what());
                    }
                  }
                }),
            "");
}

TEST_P(RpcModes, ACallPastItsDeadlineFailsNamingTheCalleeAndTheFunction) {
  EXPECT_EQ(with_agents(
                GetParam(), 2,
                [&](Agent& agent, int rank) {
                  if (rank != 0) return;
                  try {
                    agent.call_sync("worker1", "test.sleep", Message{bytes_of("2000"), {}}, 100ms);
                    throw std::runtime_error("the call did not time out");
                  } catch (const DistTimeoutError& e) {
                    if (std::string(e.what()).find("call of 'test.sleep' on worker 'worker1' from 'worker0' "
                                                   "timed out after 100 ms") == std::string::npos) {
                      throw std::runtime_error(std::string("wrong error: ") + e.what());
                    }
                  }
                  // The worker still answers the next call.
                  if (text_of(agent.call_sync("worker1", "test.echo", Message{bytes_of("x"), {}}).payload) !=
                      "x from worker0") {
                    throw std::runtime_error("no answer after a timeout");
                  }
                }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Rpc, RpcModes, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& param_info) {
                           return std::string(testing::mode_name(param_info.param));
                         });

TEST(Rpc, ANestedCallInheritsWhatIsLeftOfItsCallersDeadline) {
  // worker0 calls test.nested on worker1 with 300 ms; worker1's own call to
  // worker0's test.sleep (3 s, no timeout given) must give up with it, not
  // after the default 60 s.
  g_nested_failed_after_ms = -1;
  EXPECT_EQ(
      with_agents(Mode::kThreads, 2,
                  [&](Agent& agent, int rank) {
                    if (rank != 0) return;
                    // Both calls end at the same deadline: the outer one
                    // times out, or gets test.nested's reply, sent as soon
                    // as its own call gave up (which of the two comes first
                    // is the scheduler's). What is tested is below.
                    try {
                      agent.call_sync("worker1", "test.nested", Message{bytes_of("worker0"), {}}, 300ms);
                    } catch (const DistTimeoutError&) {
                    }
                  }),
      "");
  // Graceful shutdown waited for worker1's handler, so it has recorded: the
  // nested call timed out, where the default 60 s would have let the 3 s
  // sleep answer.
  EXPECT_GE(g_nested_failed_after_ms.load(), 0);
  ::testing::Test::RecordProperty("nested_failed_after_ms", std::to_string(g_nested_failed_after_ms.load()));
}

TEST(Rpc, WorkerInfosNameEveryWorker) {
  EXPECT_EQ(
      with_agents(Mode::kThreads, 3,
                  [&](Agent& agent, int rank) {
                    if (agent.current_worker_info().name != worker(rank) ||
                        agent.current_worker_info().id != rank) {
                      throw std::runtime_error("wrong current worker");
                    }
                    auto all = agent.all_worker_infos();
                    for (int r = 0; r < 3; ++r) {
                      if (all[static_cast<size_t>(r)].name != worker(r) ||
                          agent.worker_info(worker(r)).id != r || agent.worker_info(r).name != worker(r) ||
                          all[static_cast<size_t>(r)].port == 0 || all[static_cast<size_t>(r)].ip.empty()) {
                        throw std::runtime_error("wrong info for worker " + std::to_string(r));
                      }
                    }
                  }),
      "");
}

TEST(Rpc, TwoWorkersWithOneNameAreRefusedOnBoth) {
  register_test_functions();
  std::string failures = run_with_store(Mode::kThreads, 2, [&](Store& store, int rank) -> testing::KeepAlive {
    try {
      Agent::start("same", rank, 2, borrow(store));
    } catch (const DistInvalidArgument& e) {
      if (std::string(e.what()).find("workers 0 and 1 are both named 'same'") == std::string::npos) throw;
      return nullptr;
    }
    throw std::runtime_error("a duplicate name was accepted");
  });
  EXPECT_EQ(failures, "");
}

TEST(Rpc, FuturesChainWithThenAndReportDone) {
  EXPECT_EQ(with_agents(
                Mode::kThreads, 2,
                [&](Agent& agent, int rank) {
                  Future f = agent.call_async(worker(1 - rank), "test.echo", Message{bytes_of("a"), {}});
                  Future g = f.then([](const Future& done) {
                    Message m = done.wait();
                    m.payload.push_back('!');
                    return m;
                  });
                  if (text_of(g.wait().payload) != "a from " + worker(rank) + "!" || !f.done() || !g.done()) {
                    throw std::runtime_error("wrong chained result");
                  }
                  // An exception in the callback fails the chained future.
                  Future h = f.then([](const Future&) -> Message { throw std::logic_error("no"); });
                  try {
                    h.wait();
                    throw std::runtime_error("the callback's error was lost");
                  } catch (const std::logic_error&) {
                  }
                  // A future made by hand.
                  Future mine;
                  if (mine.done()) throw std::runtime_error("a fresh future is done");
                  mine.set_result(Message{bytes_of("z"), {}});
                  if (text_of(mine.wait().payload) != "z") throw std::runtime_error("wrong set_result");
                }),
            "");
}

TEST(Rpc, AFullWorkerRefusesCallsInsteadOfQueueingWithoutBound) {
  // One serving thread, no queue: while it sleeps, a second call is
  // refused at once with an error saying why.
  AgentOptions options;
  options.num_worker_threads = 1;
  options.max_queued_requests = 0;
  EXPECT_EQ(with_agents(
                Mode::kThreads, 2,
                [&](Agent& agent, int rank) {
                  if (rank != 0) return;
                  Future slow = agent.call_async("worker1", "test.sleep", Message{bytes_of("500"), {}});
                  // The sleeper occupies the only thread once it runs; a call
                  // that finds it so is refused (several tries: the first may
                  // arrive before the sleeper is running).
                  bool refused = false;
                  for (int i = 0; i < 50 && !refused; ++i) {
                    try {
                      agent.call_sync("worker1", "test.echo", Message{bytes_of("x"), {}});
                    } catch (const RpcError& e) {
                      refused = std::string(e.what()).find(
                                    "worker 'worker1' is busy: all 1 serving threads are running "
                                    "and 0 requests wait; 'test.echo' was refused") != std::string::npos;
                      if (!refused) throw;
                    }
                  }
                  if (!refused) throw std::runtime_error("no call was refused");
                  if (text_of(slow.wait().payload) != "slept")
                    throw std::runtime_error("the slow call failed");
                },
                options),
            "");
}

TEST(Rpc, AKilledWorkerFailsTheCallsWaitingOnItAndTheOthersShutDown) {
  // Worker 2 dies (SIGKILL) while serving worker 0's call; worker 0's call
  // fails naming it, workers 0 and 1 still call each other and shut down
  // gracefully without it.
  register_test_functions();
  register_function("test.die", [](const Message&, const CallInfo&) -> Message {
    kill(getpid(), SIGKILL);
    return {};
  });
  std::string failures = run_with_store(
      Mode::kProcesses, 3,
      [&](Store& store, int rank) -> testing::KeepAlive {
        auto agent = Agent::start(worker(rank), rank, 3, borrow(store));
        if (rank == 2) {
          // Waits to be killed by the call it serves.
          std::this_thread::sleep_for(60s);
          return nullptr;
        }
        if (rank == 0) {
          try {
            agent->call_sync("worker2", "test.die", {}, 20s);
            throw std::runtime_error("the dead worker's call did not fail");
          } catch (const DistNetworkError& e) {
            if (std::string(e.what()).find("on worker 'worker2' from 'worker0' failed") ==
                std::string::npos) {
              throw std::runtime_error(std::string("wrong error: ") + e.what());
            }
          }
        }
        if (text_of(
                agent->call_sync(worker(1 - rank), "test.echo", Message{bytes_of("still"), {}}).payload) !=
            "still from " + worker(rank)) {
          throw std::runtime_error("the survivors cannot call each other");
        }
        agent->shutdown(true);
        std::_Exit(0);  // the harness's exit barrier would wait for the dead worker
      },
      60s);
  // Worker 2 died by SIGKILL, as meant; the others exited cleanly.
  EXPECT_NE(failures.find("rank 2"), std::string::npos) << failures;
  EXPECT_EQ(failures.find("rank 0"), std::string::npos) << failures;
  EXPECT_EQ(failures.find("rank 1"), std::string::npos) << failures;
  unregister_function("test.die");
}

// The text of `path` once it holds `needle`, waiting up to 20 s for a
// dump written by another thread; what it holds then if never.
std::string file_once_it_holds(const std::string& path, const std::string& needle) {
  const auto until = Clock::now() + 20s;
  std::string text;
  while (Clock::now() < until) {
    std::ifstream in(path);
    std::stringstream all;
    all << in.rdbuf();
    text = all.str();
    if (text.find(needle) != std::string::npos) break;
    std::this_thread::sleep_for(10ms);
  }
  return text;
}

TEST(Rpc, PendingCallsAreDumpedOnATimeoutAndOnSigusr1) {
  register_test_functions();
  const std::string dir = testing::temp_path("rpc-dump");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  EXPECT_EQ(
      run_with_store(
          Mode::kProcesses, 2,
          [&](Store& store, int rank) -> testing::KeepAlive {
            setenv("TDIST_TRACE_DIR", dir.c_str(), 1);
            auto agent = Agent::start(worker(rank), rank, 2, borrow(store));
            if (rank == 0) {
              const std::string path = dir + "/rpc0.txt";
              Future slow = agent->call_async("worker1", "test.sleep", Message{bytes_of("1500"), {}});
              try {
                agent->call_sync("worker1", "test.sleep", Message{bytes_of("1000"), {}}, 100ms);
                throw std::runtime_error("the call did not time out");
              } catch (const DistTimeoutError&) {
              }
              std::string text = file_once_it_holds(path, "call(s) without an answer");
              for (const char* expected : {"worker 'worker0' (rank 0), a call timed out: 2 call(s)",
                                           "'worker0' -> 'worker1' test.sleep", "timed out", "deadline in"}) {
                if (text.find(expected) == std::string::npos) {
                  throw std::runtime_error("the timeout's dump lacks \"" + std::string(expected) +
                                           "\": " + text);
                }
              }
              raise(SIGUSR1);
              text = file_once_it_holds(path, "SIGUSR1");
              if (text.find(
                      "(rank 0), SIGUSR1: 1 call(s) without an answer\n  call 0: 'worker0' -> 'worker1' "
                      "test.sleep") == std::string::npos) {
                throw std::runtime_error("no SIGUSR1 dump of the slow call: " + text);
              }
              slow.wait();
            }
            agent->shutdown(true);
            return nullptr;
          }),
      "");
}

TEST(Rpc, SixtyFourWorkersStartCallEachOtherAndShutDown) {
  // torch's RPC (TensorPipe) fails to start beyond a few dozen workers.
  // Here 64 processes on this machine each call every worker (itself
  // included) with a tensor and check the answers, then shut down
  // gracefully.
  register_test_functions();
  const int n = 64;
  AgentOptions options;
  options.num_worker_threads = 2;  // 64 processes on a few cores: threads cost more than they bring
  EXPECT_EQ(run_with_store(
                Mode::kProcesses, n,
                [&](Store& store, int rank) -> testing::KeepAlive {
                  auto agent = Agent::start(worker(rank), rank, n, borrow(store), options);
                  std::vector<Future> futures;
                  futures.reserve(n);
                  for (int to = 0; to < n; ++to) {
                    futures.push_back(agent->call_async(
                        worker(to), "test.echo", Message{bytes_of(std::to_string(to)), {numbered(9, rank)}}));
                  }
                  for (int to = 0; to < n; ++to) {
                    Message m = futures[static_cast<size_t>(to)].wait();
                    if (text_of(m.payload) != std::to_string(to) + " from " + worker(rank) ||
                        m.tensors.size() != 1 || !numbered_plus_one(m.tensors[0], 9, rank)) {
                      throw std::runtime_error("wrong answer from " + worker(to));
                    }
                  }
                  agent->shutdown(true);
                  return nullptr;
                },
                120s, 120s),
            "");
}

TEST(Rpc, ACallThatWaitsForTheNextIsNotLeftBehindIt) {
  // Two requests posted back to back while one idle serving thread polls
  // for work: the second must wake another thread, since the first waits
  // for it. Many rounds, to meet the moment the poller is between polls.
  static std::mutex mutex;
  static std::condition_variable cv;
  static int flags = 0;
  register_function("test.wait_for_flag", [](const Message& args, const CallInfo&) {
    const int round = std::stoi(text_of(args.payload));
    std::unique_lock<std::mutex> lock(mutex);
    const bool seen = cv.wait_for(lock, 10s, [&] { return flags >= round; });
    return Message{bytes_of(seen ? "seen" : "never"), {}};
  });
  register_function("test.set_flag", [](const Message& args, const CallInfo&) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      flags = std::stoi(text_of(args.payload));
    }
    cv.notify_all();
    return Message{};
  });
  EXPECT_EQ(run_with_store(
                Mode::kThreads, 2,
                [&](Store& store, int rank) -> testing::KeepAlive {
                  register_test_functions();
                  auto agent = Agent::start(worker(rank), rank, 2, borrow(store));
                  if (rank == 0) {
                    for (int round = 1; round <= 200; ++round) {
                      const std::string r = std::to_string(round);
                      Future waits = agent->call_async("worker1", "test.wait_for_flag", {bytes_of(r), {}});
                      Future sets = agent->call_async("worker1", "test.set_flag", {bytes_of(r), {}});
                      sets.wait();
                      if (text_of(waits.wait().payload) != "seen") {
                        throw std::runtime_error("round " + r + ": the waiting call never saw the flag");
                      }
                    }
                  }
                  agent->shutdown(true);
                  return nullptr;
                },
                120s),
            "");
  unregister_function("test.wait_for_flag");
  unregister_function("test.set_flag");
}

TEST(Rpc, AnImmediateShutdownFailsOutstandingCalls) {
  EXPECT_EQ(
      run_with_store(Mode::kThreads, 2,
                     [&](Store& store, int rank) -> testing::KeepAlive {
                       register_test_functions();
                       auto agent = Agent::start(worker(rank), rank, 2, borrow(store));
                       if (rank == 0) {
                         Future f = agent->call_async("worker1", "test.sleep", Message{bytes_of("1000"), {}});
                         agent->shutdown(false);
                         try {
                           f.wait();
                           throw std::runtime_error("an outstanding call survived shutdown");
                         } catch (const DistError& e) {
                           if (std::string(e.what()).find("worker 'worker0' shut down (not gracefully)") ==
                               std::string::npos) {
                             throw std::runtime_error(std::string("wrong error: ") + e.what());
                           }
                         }
                         try {
                           agent->call_async("worker1", "test.echo", {});
                           throw std::runtime_error("a call after shutdown was accepted");
                         } catch (const DistError&) {
                         }
                       }
                       return std::shared_ptr<void>(agent);
                     }),
      "");
}

}  // namespace
}  // namespace tdist::rpc
