// tdist-store-flood: how long a legitimate client waits for the TCPStore
// server while an attacker floods it with connections or large SETs (issue
// 49). The server runs in this process; the attackers are forked children
// with their own descriptor tables, so together they can hold more
// connections than the server's RLIMIT_NOFILE allows it.
//
//     tdist-store-flood --attack hog|drop|timeout|big-sets [--connections N]
//                       [--processes P] [--addresses A] [--seconds S]
//                       [--attacker-nice N]
//
//   hog      P attackers hold N connections each (a PING on each unless
//            --silent), for S seconds
//   drop     the same, then every attacker closes all of them at once
//   timeout  N silent connections that the server drops at once when its
//            first-request timeout (2 s here) expires
//   big-sets P clients SET a 200 MiB value each, all at once
//
// Throughout, a client from 127.0.0.1 that holds a key GETs it in a loop
// (its longest round trip and its 99th percentile are printed), and a new
// client connects and PINGs every 100 ms (its longest connect + PING and
// how many were refused). Attackers connect from 127.0.<k>.2, k = 1..A (all
// of 127/8 is loopback), as A hosts would.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/tcp/client.h"
#include "store/tcp/protocol.h"
#include "store/tcp/server.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Args {
  std::string attack = "hog";
  int connections = 10500;
  int processes = 2;
  int addresses = 2;
  double seconds = 5;
  bool silent = false;
  size_t value_mib = 200;
  int attacker_nice = 0;
};

// One attacker: opens its connections (from 127.0.<k>.2, round robin over
// the addresses), optionally PINGs on each, reports how many it holds, then
// waits for the parent's word to close them all at once (its exit).
[[noreturn]] void attacker(int index, const Args& args, uint16_t port, int go_fd, int report_fd) {
  std::vector<int> fds;
  fds.reserve(static_cast<size_t>(args.connections));
  std::vector<uint8_t> ping;
  {
    tdist::tcpstore::FrameWriter w(static_cast<uint8_t>(tdist::tcpstore::Command::kPing), 1);
    w.u32(tdist::tcpstore::kProtocolVersion);
    ping = w.finish();
  }
  int held = 0;
  for (int i = 0; i < args.connections; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in from{};
    from.sin_family = AF_INET;
    int k = (index * args.connections + i) % args.addresses + 1;
    std::string source = "127.0." + std::to_string(k) + ".2";
    ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
      ::close(fd);
      continue;
    }
    if (!args.silent && args.attack != "timeout") (void)!::send(fd, ping.data(), ping.size(), MSG_NOSIGNAL);
    fds.push_back(fd);
    ++held;
  }
  (void)!::write(report_fd, &held, sizeof(held));
  char go = 0;
  (void)!::read(go_fd, &go, 1);
  ::_exit(0);  // every connection closes at once
}

[[noreturn]] void big_setter(const Args& args, uint16_t port, int go_fd, int report_fd) {
  int ready = 1;
  (void)!::write(report_fd, &ready, sizeof(ready));
  char go = 0;
  (void)!::read(go_fd, &go, 1);
  try {
    tdist::TCPStoreClient client("127.0.0.1", port, milliseconds(60000));
    client.set("big/" + std::to_string(::getpid()), tdist::Bytes(args.value_mib << 20, 'b'),
               milliseconds(120000));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "big SET: %s\n", e.what());
  }
  ::_exit(0);
}

struct Child {
  pid_t pid = -1;
  int go = -1;      // write end: closing it tells the child to go on
  int report = -1;  // read end
};

template <typename Fn>
Child fork_child(int nice_value, Fn body) {
  int go[2];
  int report[2];
  if (::pipe(go) != 0 || ::pipe(report) != 0) std::exit(2);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(go[1]);
    ::close(report[0]);
    if (nice_value > 0) {
      sched_param normal{};
      ::sched_setscheduler(0, SCHED_OTHER, &normal);
      (void)!::nice(nice_value);
    }
    body(go[0], report[1]);
  }
  ::close(go[0]);
  ::close(report[1]);
  return Child{pid, go[1], report[0]};
}

size_t peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoul(line.substr(6)) / 1024;
  }
  return 0;
}

// The legitimate clients: GETs of a key held on one connection, and a new
// connection (+ PING) every 100 ms.
class Probes {
 public:
  explicit Probes(uint16_t port) : port_(port), holder_("127.0.0.1", port, milliseconds(10000)) {
    holder_.set("probe/key", tdist::to_bytes("probe value"), milliseconds(10000));
    get_thread_ = std::thread([this] { get_loop(); });
    connect_thread_ = std::thread([this] { connect_loop(); });
  }
  void stop() {
    stopping_ = true;
    get_thread_.join();
    connect_thread_.join();
  }
  // The measurements from now on belong to the phase `name` (the
  // attackers connecting, holding, leaving): while they connect, they take
  // the CPUs too, which any server would show.
  void phase(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    phases_.push_back(Phase{name});
  }
  void report() {
    for (auto& p : phases_) {
      std::sort(p.get_us.begin(), p.get_us.end());
      int64_t p99 = p.get_us.empty() ? 0 : p.get_us[p.get_us.size() * 99 / 100];
      int64_t max = p.get_us.empty() ? 0 : p.get_us.back();
      std::printf(
          "  %-10s client holding a key: %5zu GETs, p99 %6.1f ms, longest %6.1f ms | new clients: %3d served "
          "(longest %6.1f ms), %3d refused%s%s\n",
          p.name.c_str(), p.get_us.size(), static_cast<double>(p99) / 1000, static_cast<double>(max) / 1000,
          p.connects, static_cast<double>(p.longest_connect_us) / 1000, p.refused,
          p.first_refusal.empty() ? "" : "; first: ", p.first_refusal.c_str());
    }
    std::printf("  GETs failed: %d\n", get_failures_);
  }

 private:
  void get_loop() {
    while (!stopping_) {
      auto start = Clock::now();
      try {
        holder_.get("probe/key", milliseconds(20000));
        std::lock_guard<std::mutex> lock(mutex_);
        phases_.back().get_us.push_back(
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
      } catch (const std::exception& e) {
        ++get_failures_;
        std::fprintf(stderr, "GET failed: %s\n", e.what());
        return;
      }
      std::this_thread::sleep_for(milliseconds(1));
    }
  }
  void connect_loop() {
    while (!stopping_) {
      auto start = Clock::now();
      try {
        tdist::TCPStoreClient client("127.0.0.1", port_, milliseconds(2000));
        std::lock_guard<std::mutex> lock(mutex_);
        Phase& p = phases_.back();
        p.longest_connect_us = std::max<int64_t>(
            p.longest_connect_us,
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
        ++p.connects;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex_);
        Phase& p = phases_.back();
        if (p.first_refusal.empty()) p.first_refusal = e.what();
        ++p.refused;
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
  }

  struct Phase {
    std::string name;
    std::vector<int64_t> get_us;
    int connects = 0;
    int refused = 0;
    int64_t longest_connect_us = 0;
    std::string first_refusal;
  };

  uint16_t port_;
  tdist::TCPStoreClient holder_;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::vector<Phase> phases_{Phase{"start"}};
  std::thread get_thread_;
  std::thread connect_thread_;
  int get_failures_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"tdist-store-flood: a legitimate TCPStore client's latency under connection and SET floods"};
  app.add_option("--attack", args.attack, "hog, drop, timeout or big-sets")
      ->check(CLI::IsMember({"hog", "drop", "timeout", "big-sets"}));
  app.add_option("--connections", args.connections, "connections per attacker process")
      ->check(CLI::Range(1, 60000));
  app.add_option("--processes", args.processes, "attacker processes")->check(CLI::Range(1, 64));
  app.add_option("--addresses", args.addresses, "source addresses 127.0.<k>.2 the attackers use")
      ->check(CLI::Range(1, 250));
  app.add_option("--seconds", args.seconds, "how long the connections are held")->check(CLI::PositiveNumber);
  app.add_flag("--silent", args.silent, "no PING on the attackers' connections");
  app.add_option("--value-mib", args.value_mib, "big-sets: the size of each value");
  app.add_option("--attacker-nice", args.attacker_nice,
                 "the attackers' nice value (they run under the normal scheduler even when this "
                 "program runs under chrt): attackers on other hosts take none of this host's CPUs")
      ->check(CLI::Range(0, 19));
  CLI11_PARSE(app, argc, argv);
  ::signal(SIGPIPE, SIG_IGN);

  // The children are forked before the server's thread starts; they learn
  // its port through the pre-bound listening socket's number.
  int listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in any{};
  any.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &any.sin_addr);
  ::bind(listen_fd, reinterpret_cast<sockaddr*>(&any), sizeof(any));
  socklen_t len = sizeof(any);
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&any), &len);
  uint16_t port = ntohs(any.sin_port);

  std::vector<Child> children;
  for (int p = 0; p < args.processes; ++p) {
    if (args.attack == "big-sets") {
      children.push_back(
          fork_child(args.attacker_nice, [&](int go, int report) { big_setter(args, port, go, report); }));
    } else {
      // The attackers connect once the server listens: their first word.
      children.push_back(fork_child(args.attacker_nice, [&, p](int go, int report) {
        char start = 0;
        (void)!::read(go, &start, 1);
        attacker(p, args, port, go, report);
      }));
    }
  }

  tdist::TCPServerOptions options;
  options.port = port;
  options.listen_fd = listen_fd;
  options.host = "127.0.0.1";
  if (args.attack == "timeout") options.first_request_timeout = milliseconds(2000);
  auto server = tdist::TCPServer::start(options);
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  std::printf("attack %s: %d process(es) x %d connections from %d address(es); server RLIMIT_NOFILE %llu\n",
              args.attack.c_str(), args.processes, args.connections, args.addresses,
              static_cast<unsigned long long>(limit.rlim_cur));
  std::fflush(stdout);
  Probes probes(port);
  auto started = Clock::now();
  probes.phase(args.attack == "big-sets" ? "sets" : "connecting");
  if (args.attack == "big-sets") {
    for (auto& c : children) {
      int ready = 0;
      (void)!::read(c.report, &ready, sizeof(ready));
    }
    for (auto& c : children) ::close(c.go);
    for (auto& c : children) ::waitpid(c.pid, nullptr, 0);
  } else {
    for (auto& c : children) (void)!::write(c.go, "s", 1);
    int total = 0;
    for (auto& c : children) {
      int held = 0;
      (void)!::read(c.report, &held, sizeof(held));
      total += held;
    }
    std::printf("attackers connected %d times in %.1f s; server: %llu open, %llu accepted\n", total,
                std::chrono::duration<double>(Clock::now() - started).count(),
                static_cast<unsigned long long>(server->stats().connections_open),
                static_cast<unsigned long long>(server->stats().connections_accepted));
    probes.phase("holding");
    std::this_thread::sleep_for(std::chrono::duration<double>(args.seconds));
    if (args.attack == "drop" || args.attack == "timeout") {
      std::printf("server before the drop: %llu connections open\n",
                  static_cast<unsigned long long>(server->stats().connections_open));
    }
    probes.phase(args.attack == "timeout" ? "timing out" : "leaving");
    if (args.attack == "timeout") std::this_thread::sleep_for(milliseconds(3000));
    for (auto& c : children) ::close(c.go);
    for (auto& c : children) ::waitpid(c.pid, nullptr, 0);
    if (args.attack == "drop") std::this_thread::sleep_for(milliseconds(2000));
  }
  probes.stop();
  probes.report();
  auto stats = server->stats();
  std::printf("server: longest turn %.1f ms CPU, %llu open, peak RSS %zu MiB, memory budget used %llu MiB\n",
              static_cast<double>(stats.longest_turn_us) / 1000,
              static_cast<unsigned long long>(stats.connections_open), peak_rss_mib(),
              static_cast<unsigned long long>(stats.memory_used >> 20));
  return 0;
}
