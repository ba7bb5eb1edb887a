#include <gtest/gtest.h>

#include "tdist/errors.h"
#include "tdist/rendezvous.h"

namespace tdist {
namespace {

TEST(ParseInitMethod, Env) {
  auto url = parse_init_method("env://");
  EXPECT_EQ(url.scheme, "env");
  EXPECT_EQ(url.rank, -1);
  EXPECT_EQ(url.world_size, -1);
  url = parse_init_method("ENV://?rank=2&world_size=4");
  EXPECT_EQ(url.scheme, "env");
  EXPECT_EQ(url.rank, 2);
  EXPECT_EQ(url.world_size, 4);
}

TEST(ParseInitMethod, TcpIpv4AndHostName) {
  auto url = parse_init_method("tcp://10.1.1.20:23456");
  EXPECT_EQ(url.scheme, "tcp");
  EXPECT_EQ(url.host, "10.1.1.20");
  EXPECT_EQ(url.port, 23456);
  url = parse_init_method("tcp://node-3.cluster:29500/?world_size=8");
  EXPECT_EQ(url.host, "node-3.cluster");
  EXPECT_EQ(url.port, 29500);
  EXPECT_EQ(url.world_size, 8);
}

TEST(ParseInitMethod, TcpIpv6InBrackets) {
  auto url = parse_init_method("tcp://[::1]:29500");
  EXPECT_EQ(url.host, "::1");
  EXPECT_EQ(url.port, 29500);
  url = parse_init_method("tcp://[fe80::1%25eth0]:1?rank=0");
  EXPECT_EQ(url.host, "fe80::1%25eth0");
  EXPECT_EQ(url.rank, 0);
}

TEST(ParseInitMethod, File) {
  auto url = parse_init_method("file:///mnt/nfs/sharedfile");
  EXPECT_EQ(url.scheme, "file");
  EXPECT_EQ(url.path, "/mnt/nfs/sharedfile");
  url = parse_init_method("file:///tmp/with%20space?rank=1&world_size=2");
  EXPECT_EQ(url.path, "/tmp/with space");
  EXPECT_EQ(url.rank, 1);
}

void expect_invalid(const std::string& init_method, const std::string& needle) {
  try {
    parse_init_method(init_method);
    FAIL() << init_method << " was accepted";
  } catch (const DistInvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << init_method << ": " << e.what();
  }
}

TEST(ParseInitMethod, ErrorsSayWhatIsWrong) {
  expect_invalid("localhost:1234", "not a URL");
  expect_invalid("udp://host:1", "unknown scheme 'udp'");
  expect_invalid("tcp://host", "expected tcp://host:port");
  expect_invalid("tcp://::1:80", "IPv6");
  expect_invalid("tcp://[::1:80", "unclosed");
  expect_invalid("tcp://[::1]80", "tcp://[ipv6]:port");
  expect_invalid("tcp://:80", "host is empty");
  expect_invalid("tcp://host:0", "port must be between 1 and 65535");
  expect_invalid("tcp://host:70000", "port must be between 1 and 65535");
  expect_invalid("tcp://host:http", "port must be an integer");
  expect_invalid("tcp://host:1?rank=x", "query parameter rank must be an integer");
  expect_invalid("tcp://host:1?world_size=0", "query parameter world_size must be between 1");
  expect_invalid("tcp://host:1?color=red", "unknown query parameter 'color'");
  expect_invalid("env://host:1", "env:// takes no address");
  expect_invalid("file://relative/path", "file:///absolute/path");
  expect_invalid("file:///bad%zzescape", "bad percent escape");
}

// Found by fuzz_init_method: a bracket inside the brackets was taken as part
// of the host ("[fe05eth"), which only failed later, at name resolution.
TEST(ParseInitMethod, BracketsOnlyAroundTheWholeHost) {
  expect_invalid("tcp://[[fe05eth]:1234", "'[' or ']' inside the host '[fe05eth'");
  expect_invalid("tcp://a]b:80", "'[' or ']' inside the host");
  expect_invalid("tcp://a[b:80", "'[' or ']' inside the host");
}

TEST(ParseInitMethod, APathWithANulByteIsRefused) {
  expect_invalid("file:///a%00b", "the path holds a NUL byte (%00)");
  expect_invalid("file:///tmp/x?rank=0%00", "query parameter rank");
}

}  // namespace
}  // namespace tdist
