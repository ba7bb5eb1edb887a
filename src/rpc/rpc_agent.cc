// The RPC agent (rpc_agent_impl.h): creation, calling, the workers' names,
// shutdown and the dumps of pending calls.

#include "rpc/rpc_agent_impl.h"

#include <cxxabi.h>

#include <filesystem>
#include <fstream>

namespace tdist::rpc::detail {

// The deadline of the call this thread serves, if any: calls it makes
// inherit what is left of it.
thread_local const Clock::time_point* t_serving_deadline = nullptr;

// "std::out_of_range" for an exception of that type.
std::string type_name(const std::exception& e) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : typeid(e).name();
  std::free(demangled);  // NOLINT(cppcoreguidelines-no-malloc): __cxa_demangle's buffer
  return name;
}

std::string ms_text(Clock::duration d) {
  return std::to_string(duration_cast<milliseconds>(d).count()) + " ms";
}

// Allocates the tensors a header describes.
std::vector<Tensor> allocate(const std::vector<wire::TensorMeta>& metas) {
  std::vector<Tensor> tensors;
  tensors.reserve(metas.size());
  for (const auto& m : metas) {
    tensors.push_back(detail::receive_buffer(m.dtype, m.shape, m.nbytes()));
    if (m.bytes && !m.bytes->empty()) std::memcpy(tensors.back().data(), m.bytes->data(), m.bytes->size());
  }
  return tensors;
}

AgentImpl::AgentImpl(const std::string& name, int rank, int world_size, std::shared_ptr<Store> store,
                     const AgentOptions& options)
    : rank_(rank), options_(options), store_(std::make_shared<PrefixStore>("rpc", std::move(store))) {
  if (name.empty()) throw DistInvalidArgument("rpc: init_rpc needs a worker name");
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw DistInvalidArgument("rpc: rank " + std::to_string(rank) + " is not in a world of " +
                              std::to_string(world_size) + " workers");
  }
  store_->set("name/" + std::to_string(rank), name);
  direct_min_bytes_ = detail::direct_min_bytes(options.direct_read_min_bytes);
  // Every worker says whether it takes part, so that none waits for a
  // card that never comes when their settings differ.
  store_->set("direct/card/" + std::to_string(rank),
              direct_min_bytes_ > 0 ? detail::direct_probe_card() : "");
  transport::TcpOptions tcp;
  tcp.timeout = options.init_timeout;
  tcp.reach_host = options.reach_host;
  tcp.crash_breaks_group = false;  // one worker's death fails only the calls involving it
  tcp.loop_spin = detail::spin_budget();
  transport_ = transport::connect_tcp(*store_, rank, world_size, tcp);
  net_ = transport_.get();
  infos_.resize(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    WorkerInfo& info = infos_[static_cast<size_t>(r)];
    info.id = r;
    info.name = to_string(store_->get("name/" + std::to_string(r)));
    if (world_size > 1) address_of(r, info);  // a world of one worker connects nowhere
  }
  check_names_unique();
  for (const WorkerInfo& info : infos_) by_name_[info.name] = info.id;
  if (world_size > 1) probe_direct_reads();
  pool_ = std::make_unique<detail::ServingPool>(options.num_worker_threads, options.max_queued_requests);
  receive(wire::kRequestTag);
  receive(wire::kResponseTag);
  receive(wire::kReleaseTag);
  watchdog_ = std::thread([this] { watch(); });
  if (tdist::detail::sigusr1_dumps_wanted()) {
    signal_dump_ = tdist::detail::add_sigusr1_dump([this] { dump_pending("SIGUSR1", {}); });
  }
}

Future AgentImpl::call_async(const std::string& to, const std::string& function, Message args,
                             milliseconds timeout, const std::string& label) {
  const int callee = worker_info(to).id;
  const std::string& shown = label.empty() ? function : label;
  if (owner_pid_ != tdist::detail::this_process_id()) {
    throw DistError("rpc: " + tdist::detail::forked_copy_text("agent", owner_pid_) +
                    ", whose calls would go over the parent's connections (call '" + shown + "' on '" + to +
                    "')");
  }
  // Held from the check to the sends: shutdown either finds this call
  // pending or this finds the agent closed.
  std::shared_lock<std::shared_mutex> use(use_mutex_);
  if (!transport_ || closed_.load()) {
    throw DistError("rpc: worker '" + me().name + "' has shut down; it cannot call '" + shown + "' on '" +
                    to + "'");
  }
  const Clock::time_point now = Clock::now();
  Clock::time_point deadline = now + (timeout > milliseconds::zero() ? timeout : options_.rpc_timeout);
  if (t_serving_deadline != nullptr) deadline = std::min(deadline, *t_serving_deadline);
  auto state = std::make_shared<detail::FutureState>();
  state->completer = net_;
  Future future(state);
  if (deadline <= now) {
    state->complete({}, std::make_exception_ptr(timeout_error(callee, shown, now, now)));
    return future;
  }
  const uint64_t id = next_id_.fetch_add(1);
  bool sooner = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_[id] = Pending{callee, shown, now, deadline, state};
    sooner = deadline < watch_wake_;
  }
  // Only a deadline before the watchdog's next wake-up needs it now; a
  // wake-up per call would cost two context switches.
  if (sooner) watch_cv_.notify_all();
  wire::Request request;
  request.id = id;
  request.timeout_us = duration_cast<microseconds>(deadline - now).count();
  request.function = function;
  request.payload = std::move(args.payload);
  request.tensors = describe(callee, id, false, args.tensors);
  auto header = std::make_shared<std::vector<uint8_t>>(wire::encode(request));
  auto tensors = std::make_shared<std::vector<Tensor>>(std::move(args.tensors));
  auto on_sent = [this, id, header, tensors](transport::Request& r) {
    if (auto error = r.error()) fail(id, error);
  };
  transport_->isend(callee, wire::kRequestTag, header->data(), header->size())->on_complete(on_sent);
  for (size_t i = 0; i < tensors->size(); ++i) {
    const Tensor& t = (*tensors)[i];
    if (t.nbytes() > 0 && !request.tensors[i].direct && !request.tensors[i].bytes) {
      transport_->isend(callee, wire::data_tag(id, false), t.data(), t.nbytes())->on_complete(on_sent);
    }
  }
  return future;
}

void AgentImpl::shutdown(bool graceful) {
  // A forked child's copy has none of the agent's threads and must not say
  // goodbye on the parent's connections.
  if (owner_pid_ != tdist::detail::this_process_id()) return;
  std::lock_guard<std::mutex> once(shutdown_mutex_);
  if (shut_down_) return;
  shut_down_ = true;
  if (signal_dump_ != 0) tdist::detail::remove_sigusr1_dump(signal_dump_);
  std::exception_ptr problem;
  if (graceful) {
    try {
      quiesce();
    } catch (...) {
      problem = std::current_exception();
    }
  }
  closed_.store(true);
  const auto error =
      std::make_exception_ptr(DistError("rpc: worker '" + me().name + "' shut down" +
                                        (graceful ? "" : " (not gracefully)") + " before an answer came"));
  {
    std::lock_guard<std::mutex> lock(serving_mutex_);
    serving_ = false;  // the loop thread queues nothing more
  }
  if (!graceful) {
    // At once: requests not started are dropped (their callers learn of
    // it when this worker's connections close), this worker's own calls
    // fail now; functions already running are waited for.
    pool_->drop_queued();
    fail_all(error);
  }
  pool_.reset();  // joins
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  watch_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  {
    // Not aborted: that would break the other workers' transports too.
    // Destroyed, it says goodbye to every peer (their calls to this
    // worker fail, naming it) and fails what is pending here.
    std::unique_lock<std::shared_mutex> lock(use_mutex_);
    closing_.store(true);
    transport_.reset();
  }
  fail_all(error);  // what is left, including a call that raced with closed_
  drop_offers([](const OfferKey&) { return true; });
  if (problem) std::rethrow_exception(problem);
}

const WorkerInfo& AgentImpl::worker_info(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw DistInvalidArgument("rpc: no worker is named '" + name + "'; " + names());
  return infos_[static_cast<size_t>(it->second)];
}

const WorkerInfo& AgentImpl::worker_info(int id) const {
  if (id < 0 || id >= static_cast<int>(infos_.size())) {
    throw DistInvalidArgument("rpc: no worker has id " + std::to_string(id) + "; " + names());
  }
  return infos_[static_cast<size_t>(id)];
}

std::vector<std::string> AgentImpl::pending_calls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> lines;
  const Clock::time_point now = Clock::now();
  for (const auto& [id, p] : pending_)
    lines.push_back(describe_call(id, p, now, "deadline in " + ms_text(p.deadline - now)));
  return lines;
}

std::string AgentImpl::describe_call(uint64_t id, const Pending& p, Clock::time_point now,
                                     const std::string& state) const {
  return "call " + std::to_string(id) + ": '" + me().name + "' -> '" + name_of(p.callee) + "' " + p.function +
         ", waiting " + ms_text(now - p.start) + ", " + state;
}

void AgentImpl::dump_pending(const std::string& reason, const std::vector<std::string>& also) const noexcept {
  try {
    std::vector<std::string> lines = also;
    for (std::string& line : pending_calls()) lines.push_back(std::move(line));
    std::string text = "rpc: worker '" + me().name + "' (rank " + std::to_string(rank_) + "), " + reason +
                       ": " + std::to_string(lines.size()) + " call(s) without an answer";
    for (const std::string& line : lines) text += "\n  " + line;
    TDIST_LOG(WARNING) << text;
    auto dir = env_string("TDIST_TRACE_DIR");
    if (!dir && reason == "SIGUSR1") dir = tdist::detail::sigusr1_dump_dir();
    if (dir) {
      const std::string path = *dir + "/rpc" + std::to_string(rank_) + ".txt";
      std::error_code ignored;  // a directory that cannot be made fails the write, reported below
      std::filesystem::create_directories(*dir, ignored);
      std::ofstream out(path, std::ios::app);
      out << text << "\n";
      if (!out) TDIST_LOG(WARNING) << "rpc: could not write " << path;
    }
  } catch (const std::exception& e) {
    TDIST_LOG(WARNING) << "rpc: dumping the pending calls failed: " << e.what();
  }
}

std::string AgentImpl::names() const {
  std::string text = "the workers are";
  for (const WorkerInfo& info : infos_) text += " '" + info.name + "' (" + std::to_string(info.id) + ")";
  return text;
}

void AgentImpl::address_of(int r, WorkerInfo& info) {
  const auto ad =
      transport::tcp::parse_advertisement(to_string(store_->get("tcp/addr/" + std::to_string(r))));
  if (!ad) return;
  const HostPort hp = parse_host_port(ad->addresses.substr(0, ad->addresses.find(',')));
  info.ip = hp.host;
  info.port = hp.port;
}

void AgentImpl::check_names_unique() const {
  std::map<std::string, int> first;
  for (const WorkerInfo& info : infos_) {
    auto [it, fresh] = first.emplace(info.name, info.id);
    if (!fresh) {
      throw DistInvalidArgument("rpc: workers " + std::to_string(it->second) + " and " +
                                std::to_string(info.id) + " are both named '" + info.name +
                                "'; every worker needs a name of its own");
    }
  }
}

DistTimeoutError AgentImpl::timeout_error(int callee, const std::string& function, Clock::time_point start,
                                          Clock::time_point deadline) const {
  return DistTimeoutError("rpc: call of '" + function + "' on worker '" + name_of(callee) + "' from '" +
                          me().name + "' timed out after " + ms_text(deadline - start));
}

}  // namespace tdist::rpc::detail

namespace tdist::rpc {

std::shared_ptr<Agent> Agent::start(const std::string& name, int rank, int world_size,
                                    std::shared_ptr<Store> store, const AgentOptions& options) {
  if (!store) throw DistInvalidArgument("rpc: init_rpc needs a store");
  // A forked child's copy does not shut the parent's agent down.
  return tdist::detail::owned_by_this_process(
      std::make_unique<detail::AgentImpl>(name, rank, world_size, std::move(store), options));
}

}  // namespace tdist::rpc
