// Peer benchmark for tools/compare: Intel's oneCCL (C++ API, CPU communicator).
//
// One process per rank, started with RANK and WORLD_SIZE set (tools/compare
// does that) and CCL_BENCH_KVS_FILE naming a file through which rank 0 hands
// its main KVS address to the others (oneCCL's own key-value store, no MPI
// needed for the bootstrap). Measures each op the way tdist-bench does (same
// buffer sizes, warmup, `iters` back-to-back calls between two barriers, mean
// time on rank 0) and prints, on rank 0, one JSON object per row with
// tdist-bench's keys and "lib": "ccl"; "errors" counts the wrong elements
// --check found over all ranks (0 without --check). float32 only; the check
// values are mpi_bench.c's.
//
// build: c++ -O2 -std=c++17 -I$P/include ccl_bench.cpp -o ccl_bench -L$P/lib -lccl -Wl,-rpath,$P/lib
// run:   RANK=r WORLD_SIZE=n CCL_BENCH_KVS_FILE=/tmp/kvs ./ccl_bench --ops all_reduce --sizes 8,1048576
//                            [--iters N] [--warmup N] [--check]
#include <oneapi/ccl.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

enum Op { ALL_REDUCE, BROADCAST, REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, GATHER, SCATTER, SENDRECV, BARRIER, NOPS };
const char *kNames[NOPS] = {"all_reduce", "broadcast", "reduce",  "all_gather", "reduce_scatter",
                            "all_to_all", "gather",    "scatter", "sendrecv",   "barrier"};

double bus_factor(int op, int p) {
  switch (op) {
    case ALL_REDUCE: return 2.0 * (p - 1) / p;
    case BROADCAST: case REDUCE: case SENDRECV: return 1.0;
    case BARRIER: return 0.0;
    default: return double(p - 1) / p;
  }
}

bool is_split(int op) {
  return op == ALL_GATHER || op == REDUCE_SCATTER || op == ALL_TO_ALL || op == GATHER || op == SCATTER;
}

struct Bench {
  int op, rank, p;
  long c;  // count: per rank for split ops, the whole buffer otherwise
  std::vector<float> in, out;
};

void run(Bench &b, const ccl::communicator &comm) {
  const size_t c = size_t(b.c);
  const int next = (b.rank + 1) % b.p, prev = (b.rank + b.p - 1) % b.p;
  float *in = b.in.data(), *out = b.out.data();
  const auto f32 = ccl::datatype::float32;
  const auto sum = ccl::reduction::sum;
  switch (b.op) {
    case ALL_REDUCE: ccl::allreduce(in, in, c, f32, sum, comm).wait(); break;
    case BROADCAST: ccl::broadcast(in, c, f32, 0, comm).wait(); break;
    // In place on the root, as torch's, tdist's and mpi_bench's reduce are.
    case REDUCE: ccl::reduce(in, in, c, f32, sum, 0, comm).wait(); break;
    case ALL_GATHER: ccl::allgather(in, out, c, f32, comm).wait(); break;
    case REDUCE_SCATTER: ccl::reduce_scatter(in, out, c, f32, sum, comm).wait(); break;
    case ALL_TO_ALL: ccl::alltoall(in, out, c, f32, comm).wait(); break;
    case GATHER: ccl::gather(in, out, c, f32, 0, comm).wait(); break;
    case SCATTER: ccl::scatter(in, out, c, f32, 0, comm).wait(); break;
    case SENDRECV: {
      // Both posted before either is waited for: a ring of blocking sends
      // would deadlock.
      ccl::event r = ccl::recv(out, c, f32, prev, comm);
      ccl::event s = ccl::send(in, c, f32, next, comm);
      s.wait();
      r.wait();
      break;
    }
    case BARRIER: ccl::barrier(comm).wait(); break;
  }
}

long check(Bench &b, const ccl::communicator &comm) {
  const long c = b.c, r = b.rank, p = b.p, prev = (r + p - 1) % p;
  const float tri = float(p * (p + 1) / 2);
  const long n_in = long(b.in.size()) - 1, n_out = long(b.out.size()) - 1;
  for (long k = 0; k < n_in; k++) {
    switch (b.op) {
      case ALL_REDUCE: case REDUCE: case REDUCE_SCATTER: b.in[k] = float((r + 1) * (k % 7 + 1)); break;
      case BROADCAST: b.in[k] = r == 0 ? float(k % 1000) : -1.0f; break;
      case SCATTER: b.in[k] = float(k / c * 1000 + k % c % 1000); break;
      case ALL_TO_ALL: b.in[k] = float((r * p + k / c) * 16 + k % c % 16); break;
      default: b.in[k] = float(r * 1000 + k % 1000); break;
    }
  }
  for (long k = 0; k < n_out; k++) b.out[k] = -1.0f;
  run(b, comm);
  long wrong = 0;
  const float *got = b.out.data();
  long n = n_out;
  if (b.op == ALL_REDUCE || b.op == BROADCAST || (b.op == REDUCE && r == 0)) got = b.in.data(), n = n_in;
  if (b.op == REDUCE && r != 0) n = 0;
  for (long k = 0; k < n; k++) {
    float want = 0;
    switch (b.op) {
      case ALL_REDUCE: case REDUCE: want = tri * float(k % 7 + 1); break;
      case REDUCE_SCATTER: want = tri * float((r * c + k) % 7 + 1); break;
      case BROADCAST: want = float(k % 1000); break;
      case ALL_GATHER: case GATHER: want = float(k / c * 1000 + k % c % 1000); break;
      case SCATTER: want = float(r * 1000 + k % 1000); break;
      case ALL_TO_ALL: want = float(((k / c) * p + r) * 16 + k % c % 16); break;
      case SENDRECV: want = float(prev * 1000 + k % 1000); break;
    }
    if (got[k] != want) wrong++;
  }
  std::fill(b.in.begin(), b.in.end(), 0.0f);
  std::fill(b.out.begin(), b.out.end(), 0.0f);
  int64_t w = wrong;
  ccl::allreduce(&w, &w, 1, ccl::datatype::int64, ccl::reduction::sum, comm).wait();
  return long(w);
}

int find_op(const std::string &name) {
  for (int i = 0; i < NOPS; i++)
    if (name == kNames[i]) return i;
  return -1;
}

std::vector<std::string> split(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// RANK, else PMI_RANK (set by Intel MPI's and MPICH's mpiexec, for runs
// with CCL_ATL_TRANSPORT=mpi); the same for the size.
int env_int(const char *name, const char *pmi_name) {
  const char *v = std::getenv(name);
  if (!v) v = std::getenv(pmi_name);
  if (!v) {
    std::fprintf(stderr, "ccl_bench: neither %s nor %s is set\n", name, pmi_name);
    std::exit(2);
  }
  return std::atoi(v);
}

// Rank 0's main KVS address, handed over through a file: written to a
// temporary name and renamed, so a reader never sees half of it.
ccl::shared_ptr_class<ccl::kvs> make_kvs(int rank, const std::string &path) {
  ccl::kvs::address_type addr;
  if (rank == 0) {
    auto kvs = ccl::create_main_kvs();
    addr = kvs->get_address();
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(addr.data(), std::streamsize(addr.size()));
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::perror("ccl_bench: rename");
      std::exit(2);
    }
    return kvs;
  }
  for (int waited_ms = 0;; waited_ms += 10) {
    std::ifstream f(path, std::ios::binary);
    if (f && f.read(addr.data(), std::streamsize(addr.size()))) break;
    if (waited_ms > 120000) {
      std::fprintf(stderr, "ccl_bench: rank %d: no KVS address in %s after 120 s\n", rank, path.c_str());
      std::exit(2);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ccl::create_kvs(addr);
}

}  // namespace

int main(int argc, char **argv) {
  std::string ops = "all_reduce", sizes = "8,1024,65536,1048576";
  int iters = 20, warmup = 5;
  bool do_check = false;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--ops" && i + 1 < argc) ops = argv[++i];
    else if (a == "--sizes" && i + 1 < argc) sizes = argv[++i];
    else if (a == "--iters" && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc) warmup = std::atoi(argv[++i]);
    else if (a == "--check") do_check = true;
    else {
      std::fprintf(stderr, "ccl_bench: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (iters < 1) iters = 1;
  const int rank = env_int("RANK", "PMI_RANK"), p = env_int("WORLD_SIZE", "PMI_SIZE");
  const char *kvs_file = std::getenv("CCL_BENCH_KVS_FILE");
  if (!kvs_file) {
    std::fprintf(stderr, "ccl_bench: CCL_BENCH_KVS_FILE is not set\n");
    return 2;
  }
  std::vector<int> op_ids;
  for (const auto &name : split(ops)) {
    const int op = find_op(name);
    if (op < 0) {
      std::fprintf(stderr, "ccl_bench: unknown op %s\n", name.c_str());
      return 2;
    }
    op_ids.push_back(op);
  }
  ccl::init();
  auto kvs = make_kvs(rank, kvs_file);
  auto comm = ccl::create_communicator(p, rank, kvs);
  auto barrier = [&] { ccl::barrier(comm).wait(); };
  // As tdist-bench does: small broadcasts for 100 ms before the first op, so
  // the ranks start timing once the scheduler has spread them.
  {
    float x = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    int go = 1;
    while (go) {
      ccl::broadcast(&x, 1, ccl::datatype::float32, 0, comm).wait();
      int v = rank == 0 ? int(std::chrono::steady_clock::now() < until) : 0;
      ccl::broadcast(&v, 1, ccl::datatype::int32, 0, comm).wait();
      go = v;
    }
  }
  for (const int op : op_ids) {
    if (op == SENDRECV && p < 2) continue;
    for (const auto &s : split(op == BARRIER ? std::string("0") : sizes)) {
      const long requested = std::atol(s.c_str());
      const long split_by = is_split(op) ? p : 1;
      Bench b{op, rank, p, requested / 4 / split_by, {}, {}};
      const long nbytes = b.c * 4 * split_by;
      if (op != BARRIER && nbytes == 0) continue;
      long n_in = b.c, n_out = 0;
      switch (op) {
        case ALL_GATHER: n_out = b.c * p; break;
        case GATHER: n_out = rank == 0 ? b.c * p : 0; break;
        case REDUCE_SCATTER: n_in = b.c * p; n_out = b.c; break;
        case SCATTER: n_in = rank == 0 ? b.c * p : 0; n_out = b.c; break;
        case ALL_TO_ALL: n_in = n_out = b.c * p; break;
        case SENDRECV: n_out = b.c; break;
      }
      // Zeroed, so touched (faulted in) before timing; one spare element so
      // that no buffer is empty. Reused for every call at this size.
      b.in.assign(size_t(n_in) + 1, 0.0f);
      b.out.assign(size_t(n_out) + 1, 0.0f);
      const long errors = do_check ? check(b, comm) : 0;
      for (int i = 0; i < warmup; i++) run(b, comm);
      barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; i++) run(b, comm);
      barrier();
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      const double algbw = double(nbytes) / dt / 1e9;
      if (rank == 0) {
        std::printf("{\"lib\": \"ccl\", \"op\": \"%s\", \"dtype\": \"float32\", \"world_size\": %d, \"bytes\": %ld, "
                    "\"time_us\": %.3f, \"algbw_GBps\": %.6g, \"busbw_GBps\": %.6g, \"errors\": %ld}\n",
                    kNames[op], p, nbytes, dt * 1e6, algbw, algbw * bus_factor(op, p), errors);
        std::fflush(stdout);
      }
    }
  }
  barrier();
  if (rank == 0) std::remove(kvs_file);
  return 0;
}
