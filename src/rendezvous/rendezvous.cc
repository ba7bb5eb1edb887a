#include "tdist/rendezvous.h"

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "common/env.h"
#include "common/owned_by_process.h"
#include "left_store.h"
#include "tdist/errors.h"
#include "tdist/file_store.h"
#include "tdist/logging.h"
#include "tdist/tcp_store.h"

namespace tdist {
namespace {

std::string percent_decode(const std::string& text, const std::string& url) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      throw DistInvalidArgument("init_method '" + url + "': bad percent escape at position " +
                                std::to_string(i));
    }
    out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
    i += 2;
  }
  return out;
}

int int_param(const std::string& value, const std::string& name, const std::string& url, int min) {
  return static_cast<int>(
      parse_int(value, "init_method '" + url + "': query parameter " + name, min, INT32_MAX));
}

// Fills rank/world_size left at -1 from the first of `env_names` that is
// set: tdistrun/torchrun's variable, then those of other launchers (Open
// MPI's mpirun, MPICH/PMI, Slurm's srun). *source gets the name used. Keep
// the orders in step with launch_environment() (src/launcher/launch_env.cc).
int from_env_if_unset(int value, std::initializer_list<const char*> env_names, const char* param, int min,
                      std::string* source) {
  if (value >= 0) return value;
  for (const char* name : env_names) {
    if (auto env = env_int(name, min, INT32_MAX)) {
      *source = name;
      return static_cast<int>(*env);
    }
  }
  auto it = env_names.begin();
  std::string message = std::string("env:// rendezvous: ") + param +
                        " was not given and environment variable " + *it + " is not set (nor";
  for (++it; it != env_names.end(); ++it) {
    message += std::string(" ") + *it + (it + 1 == env_names.end() ? ")" : ",");
  }
  throw DistInvalidArgument(message);
}

constexpr std::initializer_list<const char*> kRankVariables = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                                               "SLURM_PROCID"};
constexpr std::initializer_list<const char*> kWorldSizeVariables = {
    "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"};

// Other launchers give ranks but no master address; say where to put one.
std::string foreign_launcher_hint(const std::string& rank_source) {
  if (rank_source.empty() || rank_source == "RANK") return "";
  return "; the rank came from " + rank_source +
         ", and that launcher does not set the master's address: export MASTER_ADDR (the host of rank 0) "
         "and MASTER_PORT (a free port there) to every rank, e.g. mpirun -x MASTER_ADDR -x MASTER_PORT";
}

void check_rank(const std::string& where, int rank, int world_size) {
  if (world_size <= 0) {
    throw DistInvalidArgument(where + ": world_size must be positive, got " + std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    throw DistInvalidArgument(where + ": rank must be in [0, " + std::to_string(world_size) + "), got " +
                              std::to_string(rank));
  }
}

// MASTER_PORT as a port number. Blanks around the number are ignored, as
// torch's int(os.environ["MASTER_PORT"]) ignores them; anything else that is
// not a whole number in 1..65535 is an error quoting the value. Unset: nullopt.
std::optional<int> master_port_from_env() {
  const char* raw = std::getenv("MASTER_PORT");  // NOLINT(concurrency-mt-unsafe): tdist never calls setenv
  if (raw == nullptr) return std::nullopt;
  const std::string text = raw;
  try {
    return static_cast<int>(parse_int(text, "MASTER_PORT", 1, 65535));
  } catch (const DistInvalidArgument&) {
    const std::string what = "env:// rendezvous: environment variable MASTER_PORT";
    throw DistInvalidArgument(what + " must be a port number from 1 to 65535, got '" + text + "'");
  }
}

// True if the launcher hosts the ranks' store (tdistrun --agent-store or
// --restart-policy=failed, torchrun's agent): torch's env:// tests the
// variable against "True" in the same way.
bool agent_hosts_store() {
  return env_string("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
}

// `agent_store`: every rank, 0 included, only connects (the launcher hosts
// the server, which then outlives any rank).
std::shared_ptr<Store> tcp_store_for(const std::string& host, int port, int rank, int world_size,
                                     Store::Duration timeout, bool agent_store = false) {
  TCPStoreOptions options;
  options.port = static_cast<uint16_t>(port);
  options.world_size = world_size;
  options.is_master = rank == 0 && !agent_store;
  options.timeout = timeout;
  options.wait_for_workers = true;
  // Several process groups of one process may rendezvous on the same port.
  options.multi_tenant = true;
  TDIST_LOG(INFO) << "rendezvous: rank " << rank << " of " << world_size
                  << (options.is_master ? " hosting" : " joining") << (agent_store ? " the launcher's" : "")
                  << " TCPStore at " << host << ":" << port;
  if (options.is_master || agent_store || !detail::left_store_at(host, port)) {
    return std::make_shared<TCPStore>(host, options);
  }
  // This process left a job's store here, which rank 0 may still keep
  // (left_store.h): joining it would join that job, and it may close under
  // this attempt. The next store comes once rank 0 has closed it.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    try {
      auto store = std::make_shared<TCPStore>(host, options);
      if (!store->check({detail::this_process_left_key()})) return store;
    } catch (const DistStoreTimeoutError&) {
      throw;
    } catch (const DistStoreError&) {
      if (std::chrono::steady_clock::now() >= deadline) throw;  // not the left store closing, then
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw DistStoreTimeoutError("rendezvous: rank " + std::to_string(rank) + " reached the store at " +
                                  host + ":" + std::to_string(port) +
                                  " of the job it left (destroy_process_group), and no new one came within " +
                                  std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a retry, as after a refused connect
  }
}

struct LeftStores {
  std::mutex mutex;
  std::set<std::pair<std::string, int>> addresses;  // guarded by mutex
};

LeftStores& left_stores() {
  static auto* stores = new LeftStores;  // NOLINT(cppcoreguidelines-owning-memory): used at exit, never freed
  return *stores;
}

}  // namespace

void detail::remember_left_store(const std::string& host, int port) {
  std::lock_guard<std::mutex> lock(left_stores().mutex);
  left_stores().addresses.emplace(host, port);
}

bool detail::left_store_at(const std::string& host, int port) {
  std::lock_guard<std::mutex> lock(left_stores().mutex);
  return left_stores().addresses.count({host, port}) != 0;
}

std::string detail::this_process_left_key() {
  static const std::string random = [] {
    std::random_device device;
    std::ostringstream text;
    text << std::hex << ((static_cast<uint64_t>(device()) << 32) | device());
    return text.str();
  }();
  return "tdist_left_process/" + random + "-" + std::to_string(this_process_id());
}

InitMethodUrl parse_init_method(const std::string& init_method) {
  InitMethodUrl url;
  auto sep = init_method.find("://");
  if (sep == std::string::npos) {
    throw DistInvalidArgument("init_method '" + init_method +
                              "' is not a URL; expected env://, tcp://host:port or file:///path");
  }
  url.scheme = init_method.substr(0, sep);
  for (auto& c : url.scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string rest = init_method.substr(sep + 3);
  std::string query;
  if (auto q = rest.find('?'); q != std::string::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  size_t start = 0;
  while (start <= query.size() && !query.empty()) {
    size_t end = query.find('&', start);
    if (end == std::string::npos) end = query.size();
    std::string item = query.substr(start, end - start);
    if (!item.empty()) {
      auto eq = item.find('=');
      std::string name = item.substr(0, eq);
      std::string value = eq == std::string::npos ? "" : percent_decode(item.substr(eq + 1), init_method);
      if (name == "rank") {
        url.rank = int_param(value, name, init_method, 0);
      } else if (name == "world_size") {
        url.world_size = int_param(value, name, init_method, 1);
      } else {
        throw DistInvalidArgument("init_method '" + init_method + "': unknown query parameter '" + name +
                                  "' (known: rank, world_size)");
      }
    }
    start = end + 1;
  }

  if (url.scheme == "env") {
    if (!rest.empty()) {
      throw DistInvalidArgument("init_method '" + init_method +
                                "': env:// takes no address; set MASTER_ADDR and MASTER_PORT instead");
    }
  } else if (url.scheme == "tcp") {
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    std::string port_text;
    if (!rest.empty() && rest.front() == '[') {
      auto close = rest.find(']');
      if (close == std::string::npos) {
        throw DistInvalidArgument("init_method '" + init_method + "': unclosed '[' in IPv6 address");
      }
      url.host = rest.substr(1, close - 1);
      if (close + 1 >= rest.size() || rest[close + 1] != ':') {
        throw DistInvalidArgument("init_method '" + init_method + "': expected tcp://[ipv6]:port");
      }
      port_text = rest.substr(close + 2);
    } else {
      auto colon = rest.rfind(':');
      if (colon == std::string::npos || rest.find(':') != colon) {
        throw DistInvalidArgument("init_method '" + init_method +
                                  "': expected tcp://host:port (write IPv6 addresses as tcp://[addr]:port)");
      }
      url.host = rest.substr(0, colon);
      port_text = rest.substr(colon + 1);
    }
    if (url.host.empty()) throw DistInvalidArgument("init_method '" + init_method + "': the host is empty");
    // Brackets belong only around a whole IPv6 address: tcp://[[::1]:80
    // would otherwise name the host "[::1".
    if (url.host.find_first_of("[]") != std::string::npos) {
      throw DistInvalidArgument("init_method '" + init_method + "': '[' or ']' inside the host '" + url.host +
                                "'; expected tcp://host:port or tcp://[ipv6]:port");
    }
    url.port = static_cast<int>(parse_int(port_text, "init_method '" + init_method + "': port", 1, 65535));
  } else if (url.scheme == "file") {
    url.path = percent_decode(rest, init_method);
    if (url.path.empty() || url.path.front() != '/') {
      throw DistInvalidArgument("init_method '" + init_method +
                                "': expected file:///absolute/path (three slashes, then the path)");
    }
    // A file name cannot hold one: the path would be cut short there.
    if (url.path.find('\0') != std::string::npos) {
      throw DistInvalidArgument("init_method '" + init_method + "': the path holds a NUL byte (%00)");
    }
  } else {
    throw DistInvalidArgument("init_method '" + init_method + "': unknown scheme '" + url.scheme +
                              "'; expected env://, tcp:// or file://");
  }
  return url;
}

RendezvousResult rendezvous(const std::string& init_method, int rank, int world_size,
                            Store::Duration timeout) {
  InitMethodUrl url = parse_init_method(init_method);
  // -1 means "not given"; any other negative value is a mistake.
  if (rank < -1) {
    throw DistInvalidArgument(url.scheme + ":// rendezvous: rank " + std::to_string(rank) +
                              " is invalid: a rank is >= 0 (-1 means not given)");
  }
  if (world_size < -1) {
    throw DistInvalidArgument(url.scheme + ":// rendezvous: world_size " + std::to_string(world_size) +
                              " is invalid: it must be positive (-1 means not given)");
  }
  if (rank < 0) rank = url.rank;
  if (world_size < 0) world_size = url.world_size;
  RendezvousResult result;
  if (url.scheme == "env") {
    std::string rank_source;
    std::string size_source;
    rank = from_env_if_unset(rank, kRankVariables, "rank", 0, &rank_source);
    world_size = from_env_if_unset(world_size, kWorldSizeVariables, "world_size", 1, &size_source);
    check_rank("env:// rendezvous", rank, world_size);
    // The spec makes MASTER_ADDR optional on rank 0, which hosts the store
    // (unless the launcher does: then it is on the launcher's host, which
    // "localhost" also reaches when rank 0 shares it).
    auto addr = env_string("MASTER_ADDR");
    if (!addr && rank == 0) addr = "localhost";
    if (!addr) {
      throw DistInvalidArgument("env:// rendezvous: environment variable MASTER_ADDR is not set (rank " +
                                std::to_string(rank) + " needs the address of rank 0)" +
                                foreign_launcher_hint(rank_source));
    }
    auto port = master_port_from_env();
    if (!port) {
      throw DistInvalidArgument("env:// rendezvous: environment variable MASTER_PORT is not set" +
                                foreign_launcher_hint(rank_source));
    }
    if (!rank_source.empty() && rank_source != "RANK") {
      TDIST_LOG(INFO) << "env:// rendezvous: rank " << rank << " from " << rank_source << ", world size "
                      << world_size << " from " << (size_source.empty() ? "the caller" : size_source);
    }
    std::string host = *addr;
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    const bool agent_store = agent_hosts_store();
    result.store = tcp_store_for(host, static_cast<int>(*port), rank, world_size, timeout, agent_store);
    result.rank_0_hosts_store = !agent_store;
  } else if (url.scheme == "tcp") {
    if (rank < 0) throw DistInvalidArgument("tcp:// rendezvous: rank was not given (argument or ?rank=)");
    if (world_size < 0) {
      throw DistInvalidArgument("tcp:// rendezvous: world_size was not given (argument or ?world_size=)");
    }
    check_rank("tcp:// rendezvous", rank, world_size);
    result.store = tcp_store_for(url.host, url.port, rank, world_size, timeout);
    result.rank_0_hosts_store = true;
  } else {  // file
    if (rank < 0) throw DistInvalidArgument("file:// rendezvous: rank was not given (argument or ?rank=)");
    if (world_size < 0) {
      throw DistInvalidArgument("file:// rendezvous: world_size was not given (argument or ?world_size=)");
    }
    check_rank("file:// rendezvous", rank, world_size);
    result.store = std::make_shared<FileStore>(url.path, world_size);
    result.store->set_timeout(timeout);
  }
  result.rank = rank;
  result.world_size = world_size;
  set_log_rank(rank);
  return result;
}

RendezvousResult rendezvous(std::shared_ptr<Store> store, int rank, int world_size) {
  if (!store) throw DistInvalidArgument("rendezvous: the store is null");
  check_rank("rendezvous with an explicit store", rank, world_size);
  set_log_rank(rank);
  return RendezvousResult{std::move(store), rank, world_size};
}

}  // namespace tdist
