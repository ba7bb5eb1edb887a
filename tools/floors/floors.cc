// tdist-floors: what this host's memory and kernel allow, measured the way
// the library's ranks run (one process per rank, all at once, sharing the
// cores), with the library's own kernels and sizes. docs/performance.md
// holds the 64 MiB targets against these floors, measured in the same run
// (tools/compare --floors).
//
//   in_place            every rank adds 1 to its own n bytes of float32: the
//                       least any all_reduce does (read and write every
//                       tensor once), with no byte moved between ranks.
//   copy                every rank copies n bytes between two arrays of its
//                       own, as the shared-memory collectives copy outputs
//                       (stream_copy from the streaming threshold, memcpy
//                       below): the least an all_gather or all_to_all
//                       writing n bytes per rank does.
//   two_shot_passes     the copies and reductions of the library's two-shot
//                       all_reduce (its round size and its reduction) through
//                       a shared segment, without any waiting between ranks:
//                       that algorithm when synchronisation costs nothing.
//   single_copy_passes  the library's single-copy all_reduce without waiting:
//                       every owner reads its piece of each peer's array with
//                       process_vm_readv tile by tile, reduces it and writes
//                       it back with process_vm_writev.
//   ping_pong           ranks 0 and 1 pass one cache line back and forth
//                       kPingPongPasses times (the others wait; meant for
//                       2 ranks on 2 CPUs): time_us / 100
//                       is the ns one pass takes, the floor of every flag a
//                       collective waits for. On the Zen 4 VM about 27 ns
//                       when its two vCPUs are threads of one core, 160 ns
//                       when they are two cores (docs/performance.md).
//                       n is not used.
//   tcp_exchange        every rank sends 2(w-1)/w n bytes to the next rank and
//                       receives as many from the previous one over loopback
//                       TCP, through the transport's connections per pair
//                       (kDefaultSocketsPerPeer, one stripe each): the bytes
//                       a ring all_reduce moves each way (n at 2 ranks, the
//                       least any 2-rank all_reduce can send, as each rank
//                       needs all of the other's tensor), with no reduction
//                       and no waiting for anything but the sockets.
//
// A run of a floor is the time from the first rank's start to the last
// rank's end; every rank starts after a barrier. One JSON line per floor:
//   {"floor":"in_place","world_size":4,"bytes":67108864,"time_us":...,"runs_us":[...]}
//
//     tdist-floors [--world 4] [--bytes 64M] [--runs 7] [--floors in_place,copy,...]

#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "algorithms/shm/shm_common.h"
#include "common/cpus.h"
#include "common/error_text.h"
#include "common/scratch.h"
#include "common/socket.h"
#include "common/stream_copy.h"
#include "options.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"
#include "transport/shm/shm_group.h"
#include "transport/shm/shm_single_copy.h"
#include "transport/shm/shm_sync.h"
#include "transport/tcp/tcp_transport.h"

namespace {

namespace shm = tdist::algorithms::shm::detail;
using Clock = std::chrono::steady_clock;

constexpr int kMaxWorld = 64;
constexpr int kMaxRuns = 100;

struct Args {
  int world = 4;
  size_t bytes = size_t{64} << 20;
  int runs = 7;
  std::vector<std::string> floors;  // all of them unless --floors says
};

// What the ranks share: a barrier, each rank's process and start and end of
// every run (ns since the parent's start).
struct Control {
  std::atomic<int> arrived[kMaxRuns + 1];
  std::atomic<int> failed;
  alignas(64) std::atomic<uint64_t> ball;  // ping_pong's cache line
  alignas(64) pid_t pid[kMaxWorld];
  int64_t start_ns[kMaxRuns][kMaxWorld];
  int64_t end_ns[kMaxRuns][kMaxWorld];
};

int64_t now_ns(Clock::time_point origin) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - origin).count();
}

// Everyone arrives, then everyone leaves (yielding: ranks may outnumber
// cores). A rank that failed makes the others give up.
bool barrier(Control& control, int run, int world) {
  control.arrived[run].fetch_add(1);
  while (control.arrived[run].load() < world) {
    if (control.failed.load() != 0) return false;
    sched_yield();
  }
  return true;
}

// MAP_SHARED: one region for all ranks; MAP_PRIVATE, mapped before the
// fork: each rank its own copy, at the same address in every rank.
void* map_anonymous(size_t bytes, int sharing) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, sharing | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("tdist-floors: mmap");
    std::exit(1);  // NOLINT(concurrency-mt-unsafe): single-threaded
  }
  return p;
}

// The pieces of one rank's work, run once per run.
struct Rank {
  int me;
  int world;
  size_t bytes;
  Control* control;
  float* data;         // n bytes, the same address in every rank (mapped before fork)
  float* other;        // n more, for copy
  uint8_t* segment;    // two_shot_passes: every rank's two buffers of a round
  size_t round_bytes;  // two_shot_passes
  // tcp_exchange: this rank's connections to the next rank and from the
  // previous one (the same ones at 2 ranks), non-blocking.
  std::vector<int> to_next;
  std::vector<int> from_prev;
};

void in_place(const Rank& r) {
  const size_t count = r.bytes / 4;
  for (size_t i = 0; i < count; ++i) r.data[i] += 1.0F;
}

void copy(const Rank& r) {
  if (r.bytes >= tdist::detail::streaming_threshold()) {
    tdist::detail::stream_copy(r.other, r.data, r.bytes);
  } else {
    std::memcpy(r.other, r.data, r.bytes);
  }
}

// reduce_two_shot in src/algorithms/shm/shm_reduce.cc, float32 SUM, less
// every wait and flag, in its order: the step that opens round k copies
// the peers' pieces of round k - 2 back, reduces our own piece of round
// k - 1 from every rank's buffer (ours from the data itself) into our
// buffer and our data, then copies round k's pieces in.
void two_shot_passes(const Rank& r) {
  const size_t piece = r.round_bytes / static_cast<size_t>(r.world) / 64 * 64;
  const size_t round = piece * static_cast<size_t>(r.world);
  const size_t rounds = (r.bytes + round - 1) / round;
  auto* data = reinterpret_cast<uint8_t*>(r.data);
  shm::Sources srcs(r.world);
  const tdist::ReduceOp sum{tdist::ReduceOp::SUM};
  auto buffer = [&](int rank, size_t k) {
    return r.segment + (static_cast<size_t>(rank) * 2 + k % 2) * r.round_bytes;
  };
  auto part = [&](size_t k, int j) {
    return shm::piece_of(std::min(round, r.bytes - k * round), piece, static_cast<size_t>(j));
  };
  // The peers' pieces of round k, between our data and a buffer: into ours
  // (copy in) or back from each owner's.
  auto move_pieces = [&](size_t k, bool in) {
    for (int j = 0; j < r.world; ++j) {
      const shm::Piece piece_j = part(k, j);
      if (j == r.me || piece_j.length == 0) continue;
      uint8_t* ours = data + k * round + piece_j.begin;
      uint8_t* shared = buffer(in ? r.me : j, k) + piece_j.begin;
      if (in) {
        std::memcpy(shared, ours, piece_j.length);
      } else {
        std::memcpy(ours, shared, piece_j.length);
      }
    }
  };
  for (size_t step = 0; step < rounds + 2; ++step) {
    if (step >= 2) move_pieces(step - 2, false);
    if (step >= 1 && step <= rounds) {  // reduce our piece of round step - 1
      const size_t k = step - 1;
      const shm::Piece own = part(k, r.me);
      uint8_t* round_data = data + k * round;
      for (int j = 0; j < r.world; ++j)
        srcs[static_cast<size_t>(j)] = (j == r.me ? round_data : buffer(j, k)) + own.begin;
      if (own.length > 0) {
        shm::reduce_sources(buffer(r.me, k) + own.begin, srcs.data(), r.world, own.length / 4,
                            tdist::DType::kFloat32, sum, r.world, round_data + own.begin);
      }
    }
    if (step < rounds) move_pieces(step, true);
  }
}

// single_copy_reduce in src/algorithms/shm/shm_reduce.cc, float32 SUM, less
// its two meetings, with the transport's copies (which throw what failed).
// Every rank's array is at the same address (mapped before the fork).
void single_copy_passes(const Rank& r) {
  const size_t own_bytes = shm::single_copy_piece(r.bytes / 4, r.world, 4) * 4;
  const shm::Piece own = shm::piece_of(r.bytes, own_bytes, static_cast<size_t>(r.me));
  const size_t tile = shm::single_copy_tile_bytes(r.world);
  auto scratch = tdist::detail::make_scratch(tile * static_cast<size_t>(r.world));
  auto* data = reinterpret_cast<uint8_t*>(r.data);
  shm::Sources srcs(r.world);
  const tdist::ReduceOp sum{tdist::ReduceOp::SUM};
  for (size_t b = 0; b < own.length; b += tile) {
    const size_t length = std::min(tile, own.length - b);
    uint8_t* at = data + own.begin + b;
    for (int j = 0; j < r.world; ++j) {
      uint8_t* mine = scratch.get() + static_cast<size_t>(j) * tile;
      if (j != r.me) tdist::transport::shm::read_peer_memory(r.control->pid[j], j, mine, at, length);
      srcs[static_cast<size_t>(j)] = j == r.me ? at : mine;
    }
    shm::reduce_sources(at, srcs.data(), r.world, length / 4, tdist::DType::kFloat32, sum, r.world);
    for (int j = 0; j < r.world; ++j) {
      if (j != r.me) tdist::transport::shm::write_peer_memory(r.control->pid[j], j, at, at, length);
    }
  }
}

constexpr uint64_t kPingPongPasses = 100'000;

// Rank 0 serves odd numbers, rank 1 answers with the next even one; the
// count goes on from run to run (each rank keeps its own place).
void ping_pong(const Rank& r) {
  if (r.world < 2 || r.me > 1) return;
  static uint64_t passes = 0;  // this process's, across runs
  std::atomic<uint64_t>& ball = r.control->ball;
  for (uint64_t end = passes + kPingPongPasses; passes < end; passes += 2) {
    if (r.me == 0) ball.store(passes + 1, std::memory_order_release);
    const uint64_t want = r.me == 0 ? passes + 2 : passes + 1;
    // Yielding now and then: at more ranks than CPUs the two may share one.
    for (int spins = 1; ball.load(std::memory_order_acquire) != want; ++spins) {
      if (spins % 4096 == 0) sched_yield();
    }
    if (r.me == 1) ball.store(passes + 2, std::memory_order_release);
  }
}

// The bytes of a stream of `total` bytes, one stripe per connection as the
// transport cuts a message (tcp::stripe_begin), taken from (or put into) an
// array of n bytes again and again: a rank has n bytes, a ring moves more.
struct Stripe {
  size_t at = 0;
  size_t end = 0;
};

// Moves what one call may move of `stripe` through `fd`; throws on an
// error other than "try again" and on a peer that closed.
void move_stripe(int fd, Stripe& stripe, uint8_t* array, size_t n, bool out) {
  const size_t offset = stripe.at % n;
  const size_t length = std::min(stripe.end - stripe.at, n - offset);
  const ssize_t moved = out ? ::send(fd, array + offset, length, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : ::recv(fd, array + offset, length, MSG_DONTWAIT);
  if (moved > 0) {
    stripe.at += static_cast<size_t>(moved);
    return;
  }
  if (moved == 0) throw std::runtime_error("tcp_exchange: the peer closed the connection");
  if (errno == EAGAIN || errno == EINTR) return;
  throw std::runtime_error(std::string("tcp_exchange: ") + (out ? "send: " : "recv: ") +
                           tdist::errno_text(errno));
}

void tcp_exchange(const Rank& r) {
  if (r.world < 2) return;
  const size_t total = r.bytes * 2 * static_cast<size_t>(r.world - 1) / static_cast<size_t>(r.world);
  const int lanes = static_cast<int>(r.to_next.size());
  std::vector<Stripe> out(r.to_next.size());
  std::vector<Stripe> in(r.from_prev.size());
  for (int i = 0; i < lanes; ++i) {
    const auto lane = static_cast<size_t>(i);
    out[lane] = in[lane] = {tdist::transport::tcp::stripe_begin(total, lanes, i),
                            tdist::transport::tcp::stripe_begin(total, lanes, i + 1)};
  }
  std::vector<pollfd> polls(r.to_next.size() * 2);
  auto* data = reinterpret_cast<uint8_t*>(r.data);
  auto* other = reinterpret_cast<uint8_t*>(r.other);
  for (;;) {
    size_t waiting = 0;
    for (size_t lane = 0; lane < out.size(); ++lane) {
      if (out[lane].at < out[lane].end) polls[waiting++] = {r.to_next[lane], POLLOUT, 0};
      if (in[lane].at < in[lane].end) polls[waiting++] = {r.from_prev[lane], POLLIN, 0};
    }
    if (waiting == 0) return;
    const int ready = ::poll(polls.data(), waiting, 60'000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) throw std::runtime_error(std::string("tcp_exchange: poll: ") + tdist::errno_text(errno));
    if (ready == 0) throw std::runtime_error("tcp_exchange: no progress in 60 s");
    for (size_t i = 0; i < waiting; ++i) {
      if (polls[i].revents == 0) continue;
      const bool sending = polls[i].events == POLLOUT;
      const std::vector<int>& fds = sending ? r.to_next : r.from_prev;
      const auto lane = static_cast<size_t>(std::find(fds.begin(), fds.end(), polls[i].fd) - fds.begin());
      move_stripe(polls[i].fd, sending ? out[lane] : in[lane], sending ? data : other, r.bytes, sending);
    }
  }
}

struct Floor {
  const char* name;
  void (*run)(const Rank&);
};
constexpr Floor kFloors[] = {{"in_place", in_place},
                             {"copy", copy},
                             {"two_shot_passes", two_shot_passes},
                             {"single_copy_passes", single_copy_passes},
                             {"ping_pong", ping_pong},
                             {"tcp_exchange", tcp_exchange}};

// tcp_exchange's connections: pair p joins rank p ("a", its first end) and
// rank p + 1 (mod world), kDefaultSocketsPerPeer connections each; at 2
// ranks there is one pair, used both ways. Made before the fork, so every
// rank inherits them; each rank keeps its own ends (take_ends), the parent
// none.
struct Ring {
  std::vector<std::vector<tdist::Socket>> a;
  std::vector<std::vector<tdist::Socket>> b;
};

Ring connect_ring(int world) {
  Ring ring;
  if (world < 2) return ring;
  const int pairs = world == 2 ? 1 : world;
  tdist::ListenOptions where;
  where.host = "127.0.0.1";
  tdist::Socket listener = tdist::listen_on(0, where);
  for (int p = 0; p < pairs; ++p) {
    ring.a.emplace_back();
    ring.b.emplace_back();
    for (int i = 0; i < tdist::transport::kDefaultSocketsPerPeer; ++i) {
      ring.a.back().push_back(tdist::connect_with_retry("127.0.0.1", listener.local_port(),
                                                        tdist::deadline_after(std::chrono::seconds(30))));
      int error = 0;
      tdist::Socket accepted;
      while (!(accepted = tdist::accept_connection(listener, &error)) && error == 0)
        listener.wait_readable(tdist::kNoDeadline);
      if (!accepted)
        throw std::runtime_error(std::string("tcp_exchange: accept: ") + tdist::errno_text(error));
      accepted.set_nodelay();
      ring.b.back().push_back(std::move(accepted));
    }
  }
  return ring;
}

// Rank me's ends: it sends on pair me (its "a" end) and receives on pair
// me - 1 (its "b" end); at 2 ranks both are pair 0, rank 0 holding "a".
void take_ends(const Ring& ring, Rank& r) {
  if (ring.a.empty()) return;
  const bool two = r.world == 2;
  const auto send_pair = static_cast<size_t>(two ? 0 : r.me);
  const auto recv_pair = static_cast<size_t>(two ? 0 : (r.me + r.world - 1) % r.world);
  const auto& send_end = (two && r.me == 1) ? ring.b[send_pair] : ring.a[send_pair];
  const auto& recv_end = (two && r.me == 0) ? ring.a[recv_pair] : ring.b[recv_pair];
  for (const tdist::Socket& s : send_end) r.to_next.push_back(s.fd());
  for (const tdist::Socket& s : recv_end) r.from_prev.push_back(s.fd());
  // The other ends are closed here, as the parent closes its copies, so
  // that a rank that dies closes its connections and its peers stop.
  for (const auto* side : {&ring.a, &ring.b}) {
    for (const auto& pair : *side) {
      for (const tdist::Socket& s : pair) {
        const bool mine = std::find(r.to_next.begin(), r.to_next.end(), s.fd()) != r.to_next.end() ||
                          std::find(r.from_prev.begin(), r.from_prev.end(), s.fd()) != r.from_prev.end();
        if (!mine) ::close(s.fd());
      }
    }
  }
}

Args parse(int argc, char** argv) {
  Args args;
  std::string bytes = "64M";
  CLI::App app{"tdist-floors: memory and kernel floors of the shared-memory collectives on this host"};
  app.add_option("--world", args.world, "ranks (processes) running at once")->check(CLI::Range(1, kMaxWorld));
  app.add_option("--bytes", bytes, "bytes per rank (K, M, G suffixes), a multiple of 4 KiB");
  app.add_option("--runs", args.runs, "runs of each floor; the median is reported")
      ->check(CLI::Range(1, kMaxRuns));
  std::vector<std::string> names;
  for (const Floor& floor : kFloors) names.emplace_back(floor.name);
  app.add_option("--floors", args.floors, "which floors")->delimiter(',')->check(CLI::IsMember(names));
  try {
    app.parse(argc, argv);
    try {
      args.bytes = tdist::bench::parse_size(bytes, "--bytes");
    } catch (const std::exception& e) {
      throw CLI::ValidationError(e.what());
    }
    if (args.bytes == 0 || args.bytes % 4096 != 0)
      throw CLI::ValidationError("--bytes", "must be a positive multiple of 4096");
    if (args.floors.empty()) args.floors = names;
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message; a usage error exits with 2, as tdist-bench's
    // and tdistrun's do (CLI11's own codes differ by kind), --help with 0.
    std::exit(app.exit(e) == 0 ? 0 : 2);  // NOLINT(concurrency-mt-unsafe): no other thread runs
  }
  return args;
}

const Floor& find_floor(const std::string& name) {
  return *std::find_if(std::begin(kFloors), std::end(kFloors),
                       [&](const Floor& floor) { return name == floor.name; });  // parse checked the name
}

// Measures one floor: forks the ranks, returns every run's time in us
// (empty if a rank failed, with the reason on stderr).
std::vector<double> measure(const Args& args, const Floor& floor) {
  Ring ring;
  if (std::string(floor.name) == "tcp_exchange") {
    try {
      ring = connect_ring(args.world);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tdist-floors: tcp_exchange: connecting the ranks: %s\n", e.what());
      return {};
    }
  }
  auto* control = static_cast<Control*>(map_anonymous(sizeof(Control), MAP_SHARED));
  auto* data = static_cast<float*>(map_anonymous(args.bytes * 2, MAP_PRIVATE));
  // The round the library picks for this many ranks on this process's CPUs.
  const bool oversubscribed =
      tdist::detail::outnumber_cpus(static_cast<size_t>(args.world), tdist::detail::allowed_cpus().size());
  const size_t round_bytes = oversubscribed ? tdist::algorithms::kOversubscribedRoundBytes
                                            : tdist::transport::shm::kDefaultBufferBytes;
  auto* segment =
      static_cast<uint8_t*>(map_anonymous(round_bytes * 2 * static_cast<size_t>(args.world), MAP_SHARED));
  const Clock::time_point origin = Clock::now();
  std::vector<pid_t> children;
  for (int me = 0; me < args.world; ++me) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("tdist-floors: fork");
      std::exit(1);  // NOLINT(concurrency-mt-unsafe): single-threaded
    }
    if (pid > 0) {
      children.push_back(pid);
      continue;
    }
    control->pid[me] = getpid();
    Rank r{me, args.world, args.bytes, control, data, data + args.bytes / 4, segment, round_bytes, {}, {}};
    take_ends(ring, r);
    for (size_t i = 0; i < args.bytes / 2; ++i) data[i] = 1.0F;  // both arrays, touched by this rank
    bool ok = barrier(*control, 0, args.world);
    for (int run = 0; ok && run < args.runs; ++run) {
      control->start_ns[run][me] = now_ns(origin);
      try {
        floor.run(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tdist-floors: %s: rank %d: %s\n", floor.name, me, e.what());
        control->failed.store(1);
        ok = false;
      }
      control->end_ns[run][me] = now_ns(origin);
      ok = ok && barrier(*control, run + 1, args.world);
    }
    _exit(ok ? 0 : 1);
  }
  ring = Ring{};  // the ranks hold their ends
  bool ok = true;
  for (pid_t pid : children) {
    int status = 0;
    ok = waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 && ok;
  }
  std::vector<double> times;
  for (int run = 0; ok && run < args.runs; ++run) {
    const int64_t first = *std::min_element(control->start_ns[run], control->start_ns[run] + args.world);
    const int64_t last = *std::max_element(control->end_ns[run], control->end_ns[run] + args.world);
    times.push_back(static_cast<double>(last - first) / 1e3);
  }
  munmap(segment, round_bytes * 2 * static_cast<size_t>(args.world));
  munmap(data, args.bytes * 2);
  munmap(control, sizeof(Control));
  return times;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  int status = 0;
  for (const std::string& name : args.floors) {
    const Floor& floor = find_floor(name);
    std::vector<double> times = measure(args, floor);
    if (times.empty()) {
      status = 1;
      continue;
    }
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    std::string runs;
    for (double t : times) {
      if (!runs.empty()) runs += ',';
      runs += std::to_string(t);
    }
    std::printf(
        "{\"floor\": \"%s\", \"world_size\": %d, \"bytes\": %zu, \"time_us\": %.1f, \"runs_us\": [%s]}\n",
        floor.name, args.world, args.bytes, sorted[sorted.size() / 2], runs.c_str());
    std::fflush(stdout);
  }
  return status;
}
