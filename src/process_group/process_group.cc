#include "tdist/process_group.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>

#include "common/owned_by_process.h"
#include "tdist/errors.h"
#include "validate.h"

namespace tdist {

namespace {
thread_local std::chrono::milliseconds call_timeout{0};
}  // namespace

ScopedCallTimeout::ScopedCallTimeout(std::chrono::milliseconds timeout) : previous_(call_timeout) {
  call_timeout = timeout.count() > 0 ? timeout : std::chrono::milliseconds(0);
}

ScopedCallTimeout::~ScopedCallTimeout() {
  call_timeout = previous_;
}

std::chrono::milliseconds ScopedCallTimeout::current() {
  return call_timeout;
}

namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendFactory> factories;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

}  // namespace

// Defined by the tdist backend; registered on first use of the registry so
// static-library linking cannot drop it.
Group make_tdist_process_group(std::shared_ptr<Store> store, int rank, int size,
                               const ProcessGroupOptions& options);

namespace {
void ensure_builtin_backends(Registry& r) {
  if (r.factories.count("tdist") == 0) r.factories["tdist"] = make_tdist_process_group;
}
}  // namespace

ProcessGroup::ProcessGroup(int rank, int size, ProcessGroupOptions options)
    : rank_(rank), size_(size), options_(std::move(options)), owner_pid_(detail::this_process_id()) {
  if (options_.global_ranks.empty()) {
    for (int r = 0; r < size; ++r) options_.global_ranks.push_back(r);
  }
}

bool ProcessGroup::forked_copy() const {
  return owner_pid_ != detail::this_process_id();
}

void ProcessGroup::unsupported(const char* op) const {
  throw DistBackendError("backend " + backend_name() + " does not support " + op);
}

std::string ProcessGroup::comm_name() const {
  unsupported("comm_name");
}
void ProcessGroup::reinit(bool) {
  unsupported("reinit_process_group");
}
void ProcessGroup::abort(const std::string&) {
  unsupported("abort");
}

WorkPtr ProcessGroup::broadcast(const Tensor&, int) {
  unsupported("broadcast");
}
WorkPtr ProcessGroup::all_reduce(const Tensor&, const ReduceOp&) {
  unsupported("all_reduce");
}
WorkPtr ProcessGroup::reduce(const Tensor&, int, const ReduceOp&) {
  unsupported("reduce");
}
WorkPtr ProcessGroup::all_gather(const std::vector<Tensor>&, const Tensor&) {
  unsupported("all_gather");
}
WorkPtr ProcessGroup::all_gather_into_tensor(const Tensor&, const Tensor&) {
  unsupported("all_gather_into_tensor");
}
WorkPtr ProcessGroup::all_gather_into_tensor_uneven(const Tensor&, const Tensor&,
                                                    const std::vector<int64_t>&) {
  unsupported("all_gather_into_tensor_uneven");
}
WorkPtr ProcessGroup::gather(const std::vector<Tensor>&, const Tensor&, int) {
  unsupported("gather");
}
WorkPtr ProcessGroup::scatter(const Tensor&, const std::vector<Tensor>&, int) {
  unsupported("scatter");
}
WorkPtr ProcessGroup::reduce_scatter(const Tensor&, const std::vector<Tensor>&, const ReduceOp&) {
  unsupported("reduce_scatter");
}
WorkPtr ProcessGroup::reduce_scatter_tensor(const Tensor&, const Tensor&, const ReduceOp&) {
  unsupported("reduce_scatter_tensor");
}
WorkPtr ProcessGroup::reduce_scatter_tensor_uneven(const Tensor&, const Tensor&, const std::vector<int64_t>&,
                                                   const ReduceOp&) {
  unsupported("reduce_scatter_tensor_uneven");
}
WorkPtr ProcessGroup::all_to_all(const std::vector<Tensor>&, const std::vector<Tensor>&) {
  unsupported("all_to_all");
}
WorkPtr ProcessGroup::all_to_all_single(const Tensor&, const Tensor&, const std::vector<int64_t>&,
                                        const std::vector<int64_t>&) {
  unsupported("all_to_all_single");
}
WorkPtr ProcessGroup::barrier() {
  unsupported("barrier");
}
WorkPtr ProcessGroup::send(const Tensor&, int, int) {
  unsupported("send");
}
WorkPtr ProcessGroup::recv(const Tensor&, int, int) {
  unsupported("recv");
}

int ProcessGroup::sendrecv(const Tensor* send_tensor, int dst, const Tensor* recv_tensor, int src, int tag) {
  // The send is posted first: a receive alone could wait for a message
  // that the peer sends only once this rank's has come.
  const WorkPtr sent = send_tensor != nullptr ? send(*send_tensor, dst, tag) : nullptr;
  WorkPtr got;
  std::exception_ptr first;
  try {
    // Its post may raise too (the group was aborted meanwhile, a refusal
    // of an earlier send): the send is still waited for below.
    if (recv_tensor != nullptr) got = recv(*recv_tensor, src, tag);
    if (got) got->wait();
  } catch (...) {
    first = std::current_exception();
  }
  // The send is waited for even after the receive failed: the caller may
  // reuse its tensor once this returns.
  try {
    if (sent) sent->wait();
  } catch (...) {
    if (!first) first = std::current_exception();
  }
  if (first) std::rethrow_exception(first);
  return got ? got->source_rank() : -1;
}

void register_backend(const std::string& name, BackendFactory factory) {
  std::string key = lower(name);
  if (key.empty()) throw DistInvalidArgument("register_backend: the name is empty");
  if (!factory) throw DistInvalidArgument("register_backend('" + name + "'): the factory is empty");
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  ensure_builtin_backends(r);
  if (r.factories.count(key) != 0) {
    throw DistInvalidArgument("register_backend: a backend named '" + key + "' is already registered");
  }
  r.factories[key] = std::move(factory);
}

std::vector<std::string> registered_backends() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  ensure_builtin_backends(r);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

std::string backend_name(const std::string& name) {
  std::string key = lower(name);
  auto names = registered_backends();
  if (std::find(names.begin(), names.end(), key) != names.end()) return key;
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  throw DistInvalidArgument("unknown backend '" + name + "'; registered backends: " + known);
}

Group create_process_group(const std::string& backend, std::shared_ptr<Store> store, int rank, int size,
                           const ProcessGroupOptions& options) {
  std::string key = backend_name(backend);
  validate::positive_timeout("create_process_group(" + key + ")", options.timeout);
  BackendFactory factory;
  {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    factory = r.factories.at(key);
  }
  return factory(std::move(store), rank, size, options);
}

}  // namespace tdist
