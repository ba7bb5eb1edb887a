// The backend registry (the spec's Backend / register_backend) and the
// network-interface choice of the tdist backend.

#include <gtest/gtest.h>

#include <cstdlib>

#include "pg_harness.h"
#include "tdist/errors.h"
#include "transport/tcp/tcp_transport.h"

namespace tdist::testing {
namespace {

// A backend that supports nothing: every op must say so, naming it.
class NothingBackend final : public ProcessGroup {
 public:
  using ProcessGroup::ProcessGroup;
  std::string backend_name() const override { return "nothing"; }
};

TEST(BackendRegistry, NamesAreCaseInsensitiveAndCustomBackendsRegister) {
  EXPECT_EQ(backend_name("TDIST"), "tdist");
  EXPECT_EQ(backend_name("Tdist"), "tdist");
  register_backend("Nothing",
                   [](std::shared_ptr<Store>, int rank, int size, const ProcessGroupOptions& options) {
                     return std::make_shared<NothingBackend>(rank, size, options);
                   });
  EXPECT_EQ(backend_name("NOTHING"), "nothing");
  EXPECT_THROW(register_backend("nothing", [](auto, int, int, const auto&) { return nullptr; }),
               DistInvalidArgument);
  try {
    backend_name("gloo");
    FAIL() << "an unregistered backend was accepted";
  } catch (const DistInvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("'gloo'"), std::string::npos) << what;
    EXPECT_NE(what.find("tdist"), std::string::npos) << what;
  }
  auto pg = create_process_group("NOTHING", std::make_shared<HashStore>(), 0, 1, {});
  EXPECT_EQ(pg->backend_name(), "nothing");
  try {
    pg->all_reduce(Tensor::zeros(DType::kFloat32, {1}), ReduceOp::SUM);
    FAIL() << "an unsupported op ran";
  } catch (const DistBackendError& e) {
    EXPECT_STREQ(e.what(), "backend nothing does not support all_reduce");
  }
}

TEST(SocketInterface, TdistSocketIfnameChoosesTheInterface) {
  setenv("TDIST_SOCKET_IFNAME", "lo", 1);
  EXPECT_EQ(transport::choose_tcp_address({}), "127.0.0.1");
  EXPECT_EQ(with_groups(Mode::kThreads, 3,
                        [](ProcessGroup& pg, int) {
                          Tensor t = Tensor::from_vector<int32_t>({1});
                          pg.all_reduce(t, ReduceOp::SUM)->wait();
                          check(real_at(t, 0) == 3, "all_reduce over lo");
                        }),
            "");
  setenv("TDIST_SOCKET_IFNAME", "no-such-nic0", 1);
  try {
    transport::choose_tcp_address({});
    FAIL() << "a missing interface was accepted";
  } catch (const DistInvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("TDIST_SOCKET_IFNAME='no-such-nic0'"), std::string::npos) << what;
    EXPECT_NE(what.find("lo"), std::string::npos) << what;  // lists what the host has
  }
  unsetenv("TDIST_SOCKET_IFNAME");
  setenv("GLOO_SOCKET_IFNAME", "lo", 1);
  EXPECT_EQ(transport::choose_tcp_address({}), "127.0.0.1");
  unsetenv("GLOO_SOCKET_IFNAME");
  transport::TcpOptions reach;
  reach.reach_host = "127.0.0.1";
  EXPECT_EQ(transport::choose_tcp_address(reach), "127.0.0.1");
}

// Gloo's comma-separated lists: every name is checked, and a group over
// "lo,lo" works (point-to-point always goes over TCP).
TEST(SocketInterface, IfnameVariablesTakeACommaSeparatedList) {
  setenv("GLOO_SOCKET_IFNAME", "lo,lo", 1);
  EXPECT_EQ(transport::choose_tcp_addresses({}), (std::vector<std::string>{"127.0.0.1", "127.0.0.1"}));
  EXPECT_EQ(with_groups(Mode::kThreads, 2,
                        [](ProcessGroup& pg, int rank) {
                          Tensor t = Tensor::from_vector<int32_t>({rank == 0 ? 5 : 0});
                          if (rank == 0) pg.send(t, 1, 3)->wait();
                          if (rank == 1) pg.recv(t, 0, 3)->wait();
                          check(real_at(t, 0) == 5, "send/recv over lo,lo");
                          pg.all_reduce(t, ReduceOp::SUM)->wait();
                          check(real_at(t, 0) == 10, "all_reduce over lo,lo");
                        }),
            "");
  setenv("TDIST_SOCKET_IFNAME", "lo,nosuch0", 1);  // wins over GLOO_SOCKET_IFNAME
  try {
    transport::choose_tcp_addresses({});
    FAIL() << "a list with a missing interface was accepted";
  } catch (const DistInvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("TDIST_SOCKET_IFNAME='nosuch0': no such network interface"), std::string::npos)
        << what;
  }
  unsetenv("TDIST_SOCKET_IFNAME");
  unsetenv("GLOO_SOCKET_IFNAME");
}

}  // namespace
}  // namespace tdist::testing
