// The functional API (distributed.h) in forked processes, as a torch user
// would call it: init_process_group with every init method, groups, object
// collectives, and the spec's eleven test programs with their outputs.

#include <gtest/gtest.h>
#include <unistd.h>

#include <sstream>
#include <thread>

#include "pg_harness.h"
#include "tdist/distributed.h"
#include "tdist/errors.h"
#include "tdist/trace.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

std::string fmt(const Tensor& t) {
  std::ostringstream out;
  out << "[";
  for (int64_t i = 0; i < t.numel(); ++i) out << (i ? ", " : "") << real_at(t, i);
  out << "]";
  return out.str();
}

std::string fmt(const std::vector<Tensor>& list) {
  std::string out = "[";
  for (size_t i = 0; i < list.size(); ++i) out += (i ? ", " : "") + fmt(list[i]);
  return out + "]";
}

// Runs fn(rank) on n forked processes after init_process_group(env://).
std::string with_env_init(int n, const std::function<void(int)>& fn) {
  int port = pick_free_port();
  return describe_failures(run_forked(
      n,
      [&](int rank) {
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
        setenv("RANK", std::to_string(rank).c_str(), 1);
        setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
        init_process_group({.backend = "TDIST", .timeout = 60s});
        fn(rank);
        // Rank 0 hosts the store: it leaves last.
        barrier();
        destroy_process_group();
      },
      90s));
}

class SpecPrograms : public ::testing::TestWithParam<int> {};

// Each program prints what the spec's version prints; rank 0 collects every
// rank's lines through the store-free object collectives and checks them.
TEST_P(SpecPrograms, ElevenPrimitivesPrintTheExpectedResults) {
  int n = GetParam();
  EXPECT_EQ(with_env_init(
                n,
                [&](int rank) {
                  std::vector<std::string> lines;
                  int ws = get_world_size();
                  check(get_rank() == rank && ws == n && get_backend() == "tdist" && is_initialized(),
                        "init state");
                  // send / recv
                  Tensor tensor = Tensor::from_vector<int64_t>({1, 2, 3});
                  if (get_rank() == 0) send(tensor, 1);
                  if (get_rank() == 1) {
                    Tensor recv_tensor = Tensor::zeros(DType::kInt64, {3});
                    recv(recv_tensor, 0);
                    lines.push_back(fmt(recv_tensor));
                  }
                  // broadcast
                  Tensor b = Tensor::from_vector<int64_t>({0});
                  if (get_rank() == 0) static_cast<int64_t*>(b.data())[0] += 1;
                  broadcast(b, 0);
                  lines.push_back("Rank " + std::to_string(rank) + ": " + fmt(b));
                  // all_reduce
                  Tensor a = Tensor::from_vector<int64_t>({get_rank() + 1});
                  all_reduce(a, ReduceOp::SUM);
                  lines.push_back("Rank " + std::to_string(rank) + ": " + fmt(a));
                  // reduce
                  Tensor r = Tensor::from_vector<int64_t>({get_rank() + 1});
                  reduce(r, 0, ReduceOp::SUM);
                  if (get_rank() == 0) lines.push_back("Reduced result: " + fmt(r));
                  // all_gather
                  Tensor g = Tensor::from_vector<int64_t>({get_rank()});
                  std::vector<Tensor> gather_list;
                  for (int i = 0; i < ws; ++i) gather_list.push_back(Tensor::zeros(DType::kInt64, {1}));
                  all_gather(gather_list, g);
                  lines.push_back("Rank " + std::to_string(rank) + ": " + fmt(gather_list));
                  // gather
                  std::vector<Tensor> gathered;
                  if (get_rank() == 0) {
                    for (int i = 0; i < ws; ++i) gathered.push_back(Tensor::zeros(DType::kInt64, {1}));
                  }
                  gather(g, gathered, 0);
                  if (get_rank() == 0) lines.push_back("Gathered result: " + fmt(gathered));
                  // scatter
                  std::vector<Tensor> scatter_list;
                  if (get_rank() == 0) {
                    for (int i = 0; i < ws; ++i) scatter_list.push_back(Tensor::from_vector<int64_t>({i}));
                  }
                  Tensor s = Tensor::zeros(DType::kInt64, {1});
                  scatter(s, scatter_list, 0);
                  lines.push_back("Rank " + std::to_string(rank) + ": " + fmt(s));
                  // reduce_scatter
                  std::vector<Tensor> input;
                  for (int i = 0; i < ws; ++i)
                    input.push_back(Tensor::from_vector<int64_t>({get_rank() + 1}));
                  Tensor output = Tensor::zeros(DType::kInt64, {1});
                  reduce_scatter(output, input, ReduceOp::SUM);
                  lines.push_back("Rank " + std::to_string(rank) + ": " + fmt(output));
                  // all_to_all (the spec passes whole tensors: all_to_all_single)
                  Tensor in =
                      Tensor::from_vector<int32_t>(std::vector<int32_t>(static_cast<size_t>(ws), get_rank()));
                  Tensor out = Tensor::zeros(DType::kInt32, {ws});
                  all_to_all_single(out, in);
                  lines.push_back("Rank " + std::to_string(rank) + ": " + fmt(out));
                  // barrier
                  lines.push_back("Rank " + std::to_string(rank) + " reached barrier.");
                  barrier();
                  lines.push_back("Rank " + std::to_string(rank) + " passed barrier.");

                  // What the spec's programs print, computed here.
                  int sum = ws * (ws + 1) / 2;
                  std::string iota;
                  for (int i = 0; i < ws; ++i) iota += (i ? ", " : "") + std::to_string(i);
                  std::string lists;
                  for (int i = 0; i < ws; ++i)
                    lists += (i ? ", " : "") + std::string("[") + std::to_string(i) + "]";
                  std::vector<std::string> want;
                  std::string me = "Rank " + std::to_string(rank) + ": ";
                  if (rank == 1) want.push_back("[1, 2, 3]");
                  want.push_back(me + "[1]");
                  want.push_back(me + "[" + std::to_string(sum) + "]");
                  if (rank == 0) want.push_back("Reduced result: [" + std::to_string(sum) + "]");
                  want.push_back(me + "[" + lists + "]");
                  if (rank == 0) want.push_back("Gathered result: [" + lists + "]");
                  want.push_back(me + "[" + std::to_string(rank) + "]");
                  want.push_back(me + "[" + std::to_string(sum) + "]");
                  want.push_back(me + "[" + iota + "]");
                  want.push_back("Rank " + std::to_string(rank) + " reached barrier.");
                  want.push_back("Rank " + std::to_string(rank) + " passed barrier.");
                  for (size_t i = 0; i < std::max(lines.size(), want.size()); ++i) {
                    std::string got_line = i < lines.size() ? lines[i] : "<missing>";
                    std::string want_line = i < want.size() ? want[i] : "<nothing>";
                    check(got_line == want_line, "line " + std::to_string(i) + ": got '" + got_line +
                                                     "', expected '" + want_line + "'");
                  }
                }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, SpecPrograms, ::testing::Values(2, 4));

// batch_isend_irecv posts a batch's sends before its receives: the works
// still come back in the list's order, each receive holds its own message
// (two on one sender and tag arrive in the order sent), and a receive
// reports its sender, whether it finished inside its post or later.
TEST(Functional, BatchIsendIrecvGivesEveryWorkItsOwnMessageInListOrder) {
  for (int n : {2, 3, 5}) {
    EXPECT_EQ(with_env_init(
                  n,
                  [&](int rank) {
                    const int next = (rank + 1) % n;
                    const int prev = (rank + n - 1) % n;
                    auto filled = [](int64_t count, int64_t base) {
                      return make_tensor(DType::kFloat32, count, [&](int64_t i) { return base + i % 1000; });
                    };
                    constexpr int64_t kLarge = 16384;  // 64 KiB: a request's way, not a ring slot's
                    Tensor x = filled(3, rank * 100), y = filled(1, rank * 100 + 50),
                           z = filled(kLarge, rank);
                    Tensor a = Tensor::zeros(DType::kFloat32, {3}), b = Tensor::zeros(DType::kFloat32, {1});
                    Tensor c = Tensor::zeros(DType::kFloat32, {kLarge});
                    auto works = batch_isend_irecv({{P2POp::Kind::kIrecv, a, prev, nullptr, 1},
                                                    {P2POp::Kind::kIsend, x, next, nullptr, 1},
                                                    {P2POp::Kind::kIrecv, b, prev, nullptr, 1},
                                                    {P2POp::Kind::kIsend, y, next, nullptr, 1},
                                                    {P2POp::Kind::kIrecv, c, next, nullptr, 2},
                                                    {P2POp::Kind::kIsend, z, prev, nullptr, 2}});
                    check(works.size() == 6, "six works for six operations");
                    for (auto& work : works) work->wait();
                    check(works[0]->op() == "recv" && works[1]->op() == "send" && works[4]->op() == "recv",
                          "works out of the list's order");
                    check(real_at(a, 0) == prev * 100 && real_at(a, 2) == prev * 100 + 2,
                          "first receive: " + fmt(a));
                    check(real_at(b, 0) == prev * 100 + 50, "second receive: " + fmt(b));
                    check(real_at(c, 0) == next && real_at(c, kLarge - 1) == next + (kLarge - 1) % 1000,
                          "the 64 KiB receive");
                    check(works[0]->source_rank() == prev && works[2]->source_rank() == prev &&
                              works[4]->source_rank() == next && works[1]->source_rank() == -1,
                          "source ranks");
                  }),
              "")
        << "world size " << n;
  }
}

TEST(Functional, GroupsOverlapAndNonMembersGetWhatTheSpecSays) {
  EXPECT_EQ(with_env_init(
                5,
                [&](int rank) {
                  Group evens = new_group({0, 2, 4});
                  Group low = new_group({0, 1, 2});  // overlaps evens in 0 and 2
                  Group all = new_group();
                  bool in_evens = rank % 2 == 0;
                  bool in_low = rank <= 2;
                  check(get_rank(evens) == (in_evens ? rank / 2 : -1), "get_rank(evens)");
                  check(get_world_size(evens) == (in_evens ? 3 : -1), "get_world_size(evens)");
                  check(get_process_group_ranks(evens) == std::vector<int>{0, 2, 4}, "ranks of evens");
                  check(get_group_rank(evens, 4) == 2 && get_group_rank(evens, 1) == -1, "get_group_rank");
                  check(get_global_rank(evens, 1) == 2, "get_global_rank");
                  check(is_member(evens) == in_evens, "is_member");
                  // Interleave collectives on the groups in a per-group consistent order.
                  for (int round = 0; round < 3; ++round) {
                    Tensor e = Tensor::from_vector<int32_t>({rank});
                    WorkPtr w = all_reduce(e, ReduceOp::SUM, evens, /*async_op=*/true);
                    check(in_evens == (w != nullptr), "non-member gets no work handle");
                    Tensor l = Tensor::from_vector<int32_t>({rank + 10});
                    all_reduce(l, ReduceOp::SUM, low);
                    if (w) w->wait();
                    if (in_evens) check(real_at(e, 0) == 6, "evens sum");
                    if (!in_evens) check(real_at(e, 0) == rank, "a non-member's tensor is untouched");
                    if (in_low) check(real_at(l, 0) == 33, "low sum");
                    Tensor t = Tensor::from_vector<int32_t>({1});
                    all_reduce(t, ReduceOp::SUM, all);
                    check(real_at(t, 0) == 5, "all sum");
                  }
                  // Ranks passed to ops are global ranks.
                  Tensor b = Tensor::from_vector<int32_t>({rank == 4 ? 44 : 0});
                  broadcast(b, 4, evens);
                  if (in_evens) check(real_at(b, 0) == 44, "broadcast from global rank 4 in evens");
                  if (rank == 0) {
                    try {
                      broadcast(b, 1, evens);
                      throw std::runtime_error("broadcast from a non-member src accepted");
                    } catch (const DistInvalidArgument& e) {
                      check(std::string(e.what()).find("not a member") != std::string::npos, e.what());
                    }
                  }
                  // sendrecv takes and returns global ranks; a non-member gets -1.
                  {
                    Tensor out = Tensor::from_vector<int32_t>({rank});
                    Tensor in = Tensor::zeros(DType::kInt32, {1});
                    const int next = (rank + 2) % 6, prev = (rank + 4) % 6;  // 0 -> 2 -> 4 -> 0
                    const int from = sendrecv(out, next, in, prev, evens, 9);
                    check(from == (in_evens ? prev : -1), "sendrecv's source: " + std::to_string(from));
                    check(real_at(in, 0) == (in_evens ? prev : 0), "sendrecv in evens: " + fmt(in));
                  }
                  // Subgroup point to point with any-source receive returns the global rank.
                  if (rank == 4) send(Tensor::from_vector<int32_t>({7}), 0, evens);
                  if (rank == 0) {
                    Tensor t = Tensor::zeros(DType::kInt32, {1});
                    check(recv(t, std::nullopt, evens) == 4 && real_at(t, 0) == 7,
                          "any-source recv in a subgroup");
                  }
                }),
            "");
}

TEST(Functional, ObjectCollectivesCarryBytesOfAnySize) {
  EXPECT_EQ(with_env_init(3,
                          [&](int rank) {
                            auto obj = [](int r) {
                              return to_bytes(
                                  std::string(static_cast<size_t>(r * 5), static_cast<char>('a' + r)) + "!");
                            };
                            std::vector<Bytes> list(2);
                            if (rank == 1) list = {to_bytes("first"), to_bytes(std::string(100000, 'x'))};
                            broadcast_object_list(list, 1);
                            check(to_string(list[0]) == "first" && list[1].size() == 100000,
                                  "broadcast_object_list");
                            std::vector<Bytes> all;
                            all_gather_object(all, obj(rank));
                            for (int r = 0; r < 3; ++r)
                              check(all[static_cast<size_t>(r)] == obj(r), "all_gather_object");
                            std::vector<Bytes> gathered;
                            gather_object(obj(rank), rank == 2 ? &gathered : nullptr, 2);
                            if (rank == 2) {
                              for (int r = 0; r < 3; ++r)
                                check(gathered[static_cast<size_t>(r)] == obj(r), "gather_object");
                            }
                            std::vector<Bytes> mine;
                            std::vector<Bytes> inputs;
                            if (rank == 0) inputs = {obj(0), obj(1), obj(2)};
                            scatter_object_list(mine, inputs, 0);
                            check(mine.size() == 1 && mine[0] == obj(rank), "scatter_object_list");
                          }),
            "");
}

TEST(Functional, FileAndTcpInitMethodsAndAnExplicitStore) {
  std::string path = temp_path("init");
  int port = pick_free_port();
  EXPECT_EQ(
      describe_failures(run_forked(
          3,
          [&](int rank) {
            init_process_group({.init_method = "file://" + path, .world_size = 3, .rank = rank});
            Tensor t = Tensor::from_vector<float>({1.5f});
            all_reduce(t);
            check(real_at(t, 0) == 4.5, "file:// all_reduce");
            barrier();
            destroy_process_group();
            check(!is_initialized(), "destroyed");
            init_process_group(
                {.init_method = "tcp://127.0.0.1:" + std::to_string(port), .world_size = 3, .rank = rank});
            all_reduce(t, ReduceOp::MAX);
            check(real_at(t, 0) == 4.5, "tcp:// all_reduce");
            barrier();
            destroy_process_group();
          },
          60s)),
      "");
}

// A backend that forwards to a tdist group and waits for it itself, as a
// wrapper or a Python ProcessGroup subclass would.
class ForwardingBackend final : public ProcessGroup {
 public:
  ForwardingBackend(Group inner, const ProcessGroupOptions& options)
      : ProcessGroup(inner->rank(), inner->size(), options), inner_(std::move(inner)) {}
  std::string backend_name() const override { return "forwarding"; }
  WorkPtr all_reduce(const Tensor& tensor, const ReduceOp& op) override {
    auto work = inner_->all_reduce(tensor, op);  // must be a real work, even inside a blocking call
    work->wait();
    auto done = std::make_shared<Work>("all_reduce", std::vector<Tensor>{tensor});
    done->finish(nullptr);
    return done;
  }

 private:
  Group inner_;
};

TEST(Functional, ABackendForwardingToATdistGroupGetsARealWork) {
  // A blocking call of the functional API runs a tdist group's operation on
  // the caller's thread and returns no work; that must hold for the group
  // the call was made on only, not for one the backend calls inside it.
  register_backend(
      "forwarding",
      [](std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options) -> Group {
        return std::make_shared<ForwardingBackend>(
            create_process_group("tdist", std::make_shared<PrefixStore>("inner", store), rank, size, options),
            options);
      });
  std::string path = temp_path("forwarding");
  EXPECT_EQ(
      describe_failures(run_forked(
          3,
          [&](int rank) {
            init_process_group(
                {.backend = "forwarding", .init_method = "file://" + path, .world_size = 3, .rank = rank});
            for (int i = 0; i < 3; ++i) {
              Tensor t = Tensor::from_vector<float>({1.0f + float(rank)});
              all_reduce(t);
              check(real_at(t, 0) == 6.0, "all_reduce through the forwarding backend");
            }
            destroy_process_group();
          },
          60s)),
      "");
  unlink(path.c_str());
}

TEST(Functional, MisuseIsReportedClearly) {
  EXPECT_EQ(
      describe_failures(run_forked(
          1,
          [&](int) {
            try {
              barrier();
              throw std::runtime_error("barrier before init accepted");
            } catch (const DistError& e) {
              check(std::string(e.what()).find("init_process_group") != std::string::npos, e.what());
            }
            try {
              init_process_group(
                  {.backend = "nccl", .store = std::make_shared<HashStore>(), .world_size = 1, .rank = 0});
              throw std::runtime_error("unknown backend accepted");
            } catch (const DistInvalidArgument& e) {
              check(std::string(e.what()).find("tdist") != std::string::npos, e.what());
            }
            init_process_group({.store = std::make_shared<HashStore>(), .world_size = 1, .rank = 0});
            try {
              init_process_group({.store = std::make_shared<HashStore>(), .world_size = 1, .rank = 0});
              throw std::runtime_error("double init accepted");
            } catch (const DistError& e) {
              check(std::string(e.what()).find("already") != std::string::npos, e.what());
            }
            destroy_process_group();
          })),
      "");
}

}  // namespace
}  // namespace tdist::testing

namespace tdist::testing {
namespace {

// destroy_process_group() on another thread while the main thread waits in
// an all_reduce that rank 1 never joins: the call raises, naming the destroy,
// and nothing is freed under it (the sanitizer builds would see it), on
// shared memory and over TCP, blocking and async.
void destroy_midcall(const char* transport, bool async_op) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);  // rank 0 tells rank 1 when it is done
  const int port = pick_free_port();
  EXPECT_EQ(describe_failures(run_forked(
                2,
                [&](int rank) {
                  setenv("MASTER_ADDR", "127.0.0.1", 1);
                  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
                  setenv("RANK", std::to_string(rank).c_str(), 1);
                  setenv("WORLD_SIZE", "2", 1);
                  setenv("TDIST_TRANSPORT", transport, 1);
                  init_process_group({.timeout = 60s});
                  if (rank == 1) {
                    char done = 0;
                    check(read(pipe_fds[0], &done, 1) == 1, "rank 0 never said it was done");
                    destroy_process_group();
                    return;
                  }
                  std::thread destroyer([] {
                    // The flight recorder says when the call has started.
                    for (;;) {
                      const std::string calls = trace_json();
                      // (trace_json indents: a space follows each colon)
                      if (calls.find("\"state\": \"started\"") != std::string::npos &&
                          calls.find("\"count\": 1048576") != std::string::npos) {
                        break;
                      }
                      std::this_thread::yield();
                    }
                    destroy_process_group();
                  });
                  std::string message;
                  try {
                    Tensor t = Tensor::zeros(DType::kFloat32, {1 << 20});
                    if (WorkPtr w = all_reduce(t, ReduceOp::SUM, nullptr, async_op)) w->wait();
                  } catch (const DistBackendError& e) {
                    message = e.what();
                  }
                  destroyer.join();
                  const char done = 1;
                  check(write(pipe_fds[1], &done, 1) == 1, "cannot tell rank 1");
                  check(message.find("destroy_process_group() was called on rank 0") != std::string::npos,
                        "the blocked call did not raise naming the destroy: '" + message + "'");
                  check(!is_initialized(), "the default group survived its destroy");
                },
                90s)),
            "");
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

TEST(Functional, DestroyFromAnotherThreadEndsABlockingCallOnSharedMemory) {
  destroy_midcall("auto", false);
}
TEST(Functional, DestroyFromAnotherThreadEndsABlockingCallOverTcp) {
  destroy_midcall("tcp", false);
}
TEST(Functional, DestroyFromAnotherThreadEndsAnAsyncCallOnSharedMemory) {
  destroy_midcall("auto", true);
}
TEST(Functional, DestroyFromAnotherThreadEndsAnAsyncCallOverTcp) {
  destroy_midcall("tcp", true);
}

}  // namespace
}  // namespace tdist::testing
