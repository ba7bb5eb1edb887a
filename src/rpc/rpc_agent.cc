// The RPC agent (include/tdist/rpc.h, docs/rpc.md): one TCP transport among
// the workers, whose event-loop thread receives every request and response
// header (any-source receives on two tags, reposted as each completes) and
// then each tensor straight into the buffer allocated for it; a serving pool
// runs the functions; a watchdog thread fails calls whose deadline passed or
// whose callee died.

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <thread>

#include "common/completion_thread.h"
#include "common/error_text.h"
#include "common/socket.h"
#include "rpc/rpc_future.h"
#include "rpc/rpc_pool.h"
#include "rpc/rpc_registry.h"
#include "rpc/rpc_wire.h"
#include "tdist/logging.h"
#include "tdist/rpc.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_wire.h"

namespace tdist::rpc {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// The deadline of the call this thread serves, if any: calls it makes
// inherit what is left of it.
thread_local const Clock::time_point* t_serving_deadline = nullptr;

// Sets t_serving_deadline while a function runs.
class ServingDeadline {
 public:
  explicit ServingDeadline(const Clock::time_point& deadline) : outer_(t_serving_deadline) {
    t_serving_deadline = &deadline;
  }
  ~ServingDeadline() { t_serving_deadline = outer_; }
  ServingDeadline(const ServingDeadline&) = delete;
  ServingDeadline& operator=(const ServingDeadline&) = delete;

 private:
  const Clock::time_point* outer_;
};

// How often the watchdog looks for callees that died, when no deadline is
// nearer: a caller learns of a dead callee within this.
constexpr milliseconds kWatchdogPeriod{100};
// Slices in which a graceful shutdown waits for the store, looking for
// workers that died in between.
constexpr milliseconds kShutdownSlice{200};

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
  for (const auto& m : metas) tensors.push_back(Tensor::empty(m.dtype, m.shape));
  return tensors;
}

std::vector<wire::TensorMeta> metas_of(const std::vector<Tensor>& tensors) {
  std::vector<wire::TensorMeta> metas;
  metas.reserve(tensors.size());
  for (const Tensor& t : tensors) metas.push_back({t.dtype(), t.shape()});
  return metas;
}

// A call this worker made that has no answer yet.
struct Pending {
  int callee = -1;
  std::string function;
  Clock::time_point start;
  Clock::time_point deadline;
  std::shared_ptr<detail::FutureState> state;
};

class AgentImpl final : public Agent {
 public:
  AgentImpl(const std::string& name, int rank, int world_size, std::shared_ptr<Store> store,
            const AgentOptions& options)
      : rank_(rank), options_(options), store_(std::make_shared<PrefixStore>("rpc", std::move(store))) {
    if (name.empty()) throw DistInvalidArgument("rpc: init_rpc needs a worker name");
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      throw DistInvalidArgument("rpc: rank " + std::to_string(rank) + " is not in a world of " +
                                std::to_string(world_size) + " workers");
    }
    store_->set("name/" + std::to_string(rank), name);
    transport::TcpOptions tcp;
    tcp.timeout = options.init_timeout;
    tcp.reach_host = options.reach_host;
    tcp.crash_breaks_group = false;  // one worker's death fails only the calls involving it
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
    pool_ = std::make_unique<detail::ServingPool>(options.num_worker_threads, options.max_queued_requests);
    receive(wire::kRequestTag);
    receive(wire::kResponseTag);
    watchdog_ = std::thread([this] { watch(); });
  }

  ~AgentImpl() override { shutdown(false); }

  Future call_async(const std::string& to, const std::string& function, Message args, milliseconds timeout,
                    const std::string& label) override {
    const int callee = worker_info(to).id;
    const std::string& shown = label.empty() ? function : label;
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
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_[id] = Pending{callee, shown, now, deadline, state};
    }
    watch_cv_.notify_all();
    wire::Request request;
    request.id = id;
    request.timeout_us = duration_cast<microseconds>(deadline - now).count();
    request.function = function;
    request.payload = std::move(args.payload);
    request.tensors = metas_of(args.tensors);
    auto header = std::make_shared<std::vector<uint8_t>>(wire::encode(request));
    auto tensors = std::make_shared<std::vector<Tensor>>(std::move(args.tensors));
    auto on_sent = [this, id, header, tensors](transport::Request& r) {
      if (auto error = r.error()) fail(id, error);
    };
    transport_->isend(callee, wire::kRequestTag, header->data(), header->size())->on_complete(on_sent);
    for (const Tensor& t : *tensors) {
      if (t.nbytes() > 0) {
        transport_->isend(callee, wire::data_tag(id, false), t.data(), t.nbytes())->on_complete(on_sent);
      }
    }
    return future;
  }

  void shutdown(bool graceful) override {
    std::lock_guard<std::mutex> once(shutdown_mutex_);
    if (shut_down_) return;
    shut_down_ = true;
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
    if (problem) std::rethrow_exception(problem);
  }

  const WorkerInfo& current_worker_info() const override { return me(); }

  const WorkerInfo& worker_info(const std::string& name) const override {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) throw DistInvalidArgument("rpc: no worker is named '" + name + "'; " + names());
    return infos_[static_cast<size_t>(it->second)];
  }

  const WorkerInfo& worker_info(int id) const override {
    if (id < 0 || id >= static_cast<int>(infos_.size())) {
      throw DistInvalidArgument("rpc: no worker has id " + std::to_string(id) + "; " + names());
    }
    return infos_[static_cast<size_t>(id)];
  }

  std::vector<WorkerInfo> all_worker_infos() const override { return infos_; }

  std::vector<std::string> pending_calls() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> lines;
    const Clock::time_point now = Clock::now();
    for (const auto& [id, p] : pending_) {
      lines.push_back("call " + std::to_string(id) + ": '" + me().name + "' -> '" + name_of(p.callee) + "' " +
                      p.function + ", waiting " + ms_text(now - p.start) + ", deadline in " +
                      ms_text(p.deadline - now));
    }
    return lines;
  }

 private:
  const WorkerInfo& me() const { return infos_[static_cast<size_t>(rank_)]; }
  const std::string& name_of(int id) const { return infos_[static_cast<size_t>(id)].name; }

  std::string names() const {
    std::string text = "the workers are";
    for (const WorkerInfo& info : infos_) text += " '" + info.name + "' (" + std::to_string(info.id) + ")";
    return text;
  }

  // The first address the worker's transport advertised.
  void address_of(int r, WorkerInfo& info) {
    const auto ad =
        transport::tcp::parse_advertisement(to_string(store_->get("tcp/addr/" + std::to_string(r))));
    if (!ad) return;
    const HostPort hp = parse_host_port(ad->addresses.substr(0, ad->addresses.find(',')));
    info.ip = hp.host;
    info.port = hp.port;
  }

  void check_names_unique() const {
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

  DistTimeoutError timeout_error(int callee, const std::string& function, Clock::time_point start,
                                 Clock::time_point deadline) const {
    return DistTimeoutError("rpc: call of '" + function + "' on worker '" + name_of(callee) + "' from '" +
                            me().name + "' timed out after " + ms_text(deadline - start));
  }

  // --- receiving -----------------------------------------------------------

  // An any-source receive on `tag`, reposted as each message completes it
  // -- after the message is dispatched: a receive posted first could take
  // the next message at once, on this thread, and dispatch it first (calls
  // would be served out of order). Messages already here are taken in a
  // loop, not by callbacks calling this again (which would nest as deep as
  // the backlog). It stops when the transport is destroyed (shutdown).
  void receive(uint64_t tag) {
    while (true) {
      auto bytes = std::make_shared<std::vector<uint8_t>>();
      auto request = net_->irecv_bytes(transport::kAnySource, tag, bytes);
      if (!request->done()) {
        request->on_complete([this, tag, bytes](transport::Request& r) {
          if (dispatch(tag, r, *bytes)) receive(tag);
        });
        return;
      }
      // A receive that fails at once: the transport takes no more (closed).
      if (request->error() || !dispatch(tag, *request, *bytes)) return;
    }
  }

  // Hands a received header on; false if the receive failed (shutdown).
  bool dispatch(uint64_t tag, transport::Request& r, const std::vector<uint8_t>& bytes) {
    if (closing_.load()) return false;
    if (r.error()) {
      // A worker died while its header was on the way: that header is lost,
      // the calls it concerns fail by the watchdog; the others go on.
      TDIST_LOG(WARNING) << "rpc: worker '" << me().name
                         << "' lost a message header: " << exception_text(r.error());
      return true;
    }
    const int source = r.source();
    try {
      if (tag == wire::kRequestTag) {
        on_request(source, wire::decode_request(bytes));
      } else {
        on_response(source, wire::decode_response(bytes));
      }
    } catch (const std::exception& e) {
      TDIST_LOG(WARNING) << "rpc: worker '" << me().name << "' dropped a message from worker '"
                         << name_of(source) << "': " << e.what();
    }
    return true;
  }

  // Receives the tensors of a header from `source` on `tag` into `tensors`,
  // then runs done(error) once (error: the first receive that failed).
  void receive_tensors(int source, uint64_t tag, const std::shared_ptr<std::vector<Tensor>>& tensors,
                       std::function<void(std::exception_ptr)> done) {
    struct Countdown {
      std::mutex mutex;
      size_t left;
      std::exception_ptr error;
      std::function<void(std::exception_ptr)> done;
    };
    size_t count = 0;
    for (const Tensor& t : *tensors) count += t.nbytes() > 0 ? 1 : 0;
    if (count == 0) return done(nullptr);
    auto countdown = std::make_shared<Countdown>();
    countdown->left = count;
    countdown->done = std::move(done);
    for (Tensor& t : *tensors) {
      if (t.nbytes() == 0) continue;
      net_->irecv(source, tag, t.data(), t.nbytes())
          ->on_complete([countdown, tensors](transport::Request& r) {
            std::exception_ptr error;
            {
              std::lock_guard<std::mutex> lock(countdown->mutex);
              if (r.error() && !countdown->error) countdown->error = r.error();
              if (--countdown->left > 0) return;
              error = countdown->error;
            }
            countdown->done(error);
          });
    }
  }

  void on_request(int source, wire::Request request) {
    auto args = std::make_shared<std::vector<Tensor>>(allocate(request.tensors));
    const Clock::time_point deadline = Clock::now() + microseconds(request.timeout_us);
    auto call = std::make_shared<wire::Request>(std::move(request));
    receive_tensors(source, wire::data_tag(call->id, false), args,
                    [this, source, call, args, deadline](const std::exception_ptr& error) {
                      if (error) return;  // the caller is gone: nobody to answer
                      std::lock_guard<std::mutex> lock(serving_mutex_);
                      if (!serving_) return;  // shutting down
                      const bool queued = pool_->try_post([this, source, call, args, deadline] {
                        serve(source, *call, std::move(*args), deadline);
                      });
                      if (!queued) {
                        answer_error(source, call->id, "tdist.rpc.Busy",
                                     "worker '" + me().name + "' is busy: all " +
                                         std::to_string(options_.num_worker_threads) +
                                         " serving threads are running and " +
                                         std::to_string(options_.max_queued_requests) + " requests wait; '" +
                                         call->function + "' was refused",
                                     "");
                      }
                    });
  }

  void serve(int source, const wire::Request& request, std::vector<Tensor> tensors,
             Clock::time_point deadline) {
    auto fn = detail::find_function(request.function);
    if (!fn) {
      return answer_error(
          source, request.id, "tdist.rpc.UnknownFunction",
          "no function named '" + request.function + "' is registered on worker '" + me().name + "'", "");
    }
    if (Clock::now() >= deadline) return;  // the caller has given up already
    CallInfo info{infos_[static_cast<size_t>(source)], request.function, deadline, this};
    Message result;
    try {
      ServingDeadline serving(deadline);
      result = (*fn)(Message{request.payload, std::move(tensors)}, info);
    } catch (const RemoteException& e) {
      return answer_error(source, request.id, e.type(), e.what(), e.traceback());
    } catch (const std::exception& e) {
      return answer_error(source, request.id, type_name(e), e.what(), "");
    } catch (...) {
      return answer_error(source, request.id, "unknown", "a non-standard exception", "");
    }
    wire::Response response;
    response.id = request.id;
    response.payload = std::move(result.payload);
    response.tensors = metas_of(result.tensors);
    answer(source, response, std::move(result.tensors));
  }

  void answer_error(int to, uint64_t id, const std::string& type, const std::string& message,
                    const std::string& traceback) {
    wire::Response response;
    response.id = id;
    response.ok = false;
    response.error_type = type;
    response.error_message = message;
    response.error_traceback = traceback;
    answer(to, response, {});
  }

  void answer(int to, const wire::Response& response, std::vector<Tensor> tensors) {
    auto header = std::make_shared<std::vector<uint8_t>>(wire::encode(response));
    auto keep = std::make_shared<std::vector<Tensor>>(std::move(tensors));
    // A caller that died or gave up misses its answer; nothing else to do.
    auto hold = [header, keep](transport::Request&) {};
    net_->isend(to, wire::kResponseTag, header->data(), header->size())->on_complete(hold);
    for (const Tensor& t : *keep) {
      if (t.nbytes() > 0)
        net_->isend(to, wire::data_tag(response.id, true), t.data(), t.nbytes())->on_complete(hold);
    }
  }

  void on_response(int source, wire::Response response) {
    auto tensors = std::make_shared<std::vector<Tensor>>(allocate(response.tensors));
    auto body = std::make_shared<wire::Response>(std::move(response));
    receive_tensors(source, wire::data_tag(body->id, true), tensors,
                    [this, source, body, tensors](const std::exception_ptr& error) {
                      if (error) return fail(body->id, error);
                      std::optional<Pending> p = take(body->id);
                      if (!p) return;  // it timed out meanwhile
                      if (p->callee != source) {
                        TDIST_LOG(WARNING) << "rpc: worker '" << name_of(source) << "' answered call "
                                           << body->id << " made to worker '" << name_of(p->callee) << "'";
                      }
                      if (body->ok) {
                        p->state->complete(Message{std::move(body->payload), std::move(*tensors)}, nullptr);
                        return;
                      }
                      std::string what = "rpc: '" + p->function + "' on worker '" + name_of(source) +
                                         "' raised " + body->error_type + ": " + body->error_message;
                      if (!body->error_traceback.empty()) {
                        what += "\nremote traceback (worker '" + name_of(source) + "'):\n" +
                                body->error_traceback;
                      }
                      p->state->complete(
                          {}, std::make_exception_ptr(RpcError(what, name_of(source), body->error_type,
                                                               body->error_message, body->error_traceback)));
                    });
  }

  // --- pending calls -------------------------------------------------------

  std::optional<Pending> take(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return std::nullopt;
    Pending p = std::move(it->second);
    pending_.erase(it);
    if (pending_.empty()) idle_cv_.notify_all();
    return p;
  }

  void fail(uint64_t id, const std::exception_ptr& error) {
    std::optional<Pending> p = take(id);
    if (!p) return;
    p->state->complete({}, std::make_exception_ptr(DistNetworkError(
                               "rpc: call of '" + p->function + "' on worker '" + name_of(p->callee) +
                               "' from '" + me().name + "' failed: " + exception_text(error))));
  }

  void fail_all(const std::exception_ptr& error) {
    std::map<uint64_t, Pending> all;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      all.swap(pending_);
      idle_cv_.notify_all();
    }
    for (auto& [id, p] : all) p.state->complete({}, error);
  }

  // Fails calls whose deadline passed, and calls to workers that died.
  void watch() {
    // Futures failed here run their callbacks on this thread: one that waits
    // for another call must raise, not block every timeout.
    tdist::detail::CompletionThreadScope scope(net_);
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      Clock::time_point wake = Clock::now() + kWatchdogPeriod;
      for (const auto& [id, p] : pending_) wake = std::min(wake, p.deadline);
      watch_cv_.wait_until(lock, wake);
      if (stopping_) break;
      const Clock::time_point now = Clock::now();
      std::vector<std::pair<Pending, std::exception_ptr>> failed;
      for (auto it = pending_.begin(); it != pending_.end();) {
        const Pending& p = it->second;
        std::exception_ptr error;
        if (p.deadline <= now) {
          error = std::make_exception_ptr(timeout_error(p.callee, p.function, p.start, p.deadline));
        } else if (net_->peer_failed(p.callee)) {
          error = std::make_exception_ptr(
              DistNetworkError("rpc: call of '" + p.function + "' on worker '" + name_of(p.callee) +
                               "' from '" + me().name + "' failed: worker '" + name_of(p.callee) +
                               "' (rank " + std::to_string(p.callee) + ") is gone"));
        }
        if (error) {
          failed.emplace_back(std::move(it->second), error);
          it = pending_.erase(it);
        } else {
          ++it;
        }
      }
      if (pending_.empty()) idle_cv_.notify_all();
      lock.unlock();
      for (auto& [p, error] : failed) p.state->complete({}, error);
      lock.lock();
    }
  }

  // --- graceful shutdown ---------------------------------------------------

  // Two rounds through the store. Round 1: every worker has called shutdown
  // (so no caller starts new calls) -- meanwhile all keep serving. Then each
  // waits until its own calls are answered and its pool is idle; round 2:
  // every worker is there, so no call is in flight anywhere and closing
  // cannot cut one off. Workers that died are named and not waited for.
  void quiesce() {
    arrive_and_wait("shutdown/1");
    const Clock::time_point deadline = Clock::now() + options_.init_timeout;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!idle_cv_.wait_until(lock, deadline, [&] { return pending_.empty(); })) {
        lock.unlock();
        std::string calls;
        for (const std::string& line : pending_calls()) calls += "\n  " + line;
        throw DistTimeoutError("rpc: graceful shutdown of worker '" + me().name + "' timed out after " +
                               ms_text(options_.init_timeout) +
                               " waiting for its calls to be answered:" + calls);
      }
    }
    if (!pool_->wait_idle_until(deadline)) {
      throw DistTimeoutError("rpc: graceful shutdown of worker '" + me().name + "' timed out after " +
                             ms_text(options_.init_timeout) +
                             " waiting for the functions it serves to return");
    }
    arrive_and_wait("shutdown/2");
    // Round 3: rank 0, which hosts the store under env:// and tcp://, leaves
    // last, so that no worker loses the store while it still reads round 2.
    if (rank_ == 0) {
      arrive_and_wait("shutdown/3");
    } else {
      store_->set("shutdown/3/" + std::to_string(rank_), "1");
    }
  }

  void arrive_and_wait(const std::string& round) {
    store_->set(round + "/" + std::to_string(rank_), "1");
    const Clock::time_point deadline = Clock::now() + options_.init_timeout;
    std::vector<int> missing;
    missing.reserve(infos_.size());
    for (int r = 0; r < static_cast<int>(infos_.size()); ++r) missing.push_back(r);
    std::vector<std::string> dead;
    while (true) {
      missing.erase(
          std::remove_if(missing.begin(), missing.end(),
                         [&](int r) {
                           if (store_->check({round + "/" + std::to_string(r)})) return true;
                           if (r != rank_ && net_->peer_failed(r)) {
                             dead.push_back("'" + name_of(r) + "' (rank " + std::to_string(r) + ")");
                             return true;
                           }
                           return false;
                         }),
          missing.end());
      if (missing.empty()) break;
      if (Clock::now() >= deadline) {
        std::string who;
        for (int r : missing) who += (who.empty() ? "'" : ", '") + name_of(r) + "'";
        throw DistTimeoutError("rpc: graceful shutdown of worker '" + me().name + "' timed out after " +
                               ms_text(options_.init_timeout) + " waiting for " + who + " to shut down too");
      }
      std::vector<std::string> keys;
      keys.reserve(missing.size());
      for (int r : missing) keys.push_back(round + "/" + std::to_string(r));
      try {
        store_->wait(keys, std::min(kShutdownSlice,
                                    duration_cast<milliseconds>(deadline - Clock::now()) + milliseconds(1)));
      } catch (const DistTimeoutError&) {
        // look for workers that died, then wait on
      }
    }
    for (const std::string& d : dead) {
      TDIST_LOG(WARNING) << "rpc: worker " << d << " is gone (it died or shut down at once); worker '"
                         << me().name << "' shuts down without it";
    }
  }

  const int rank_;
  const AgentOptions options_;
  std::shared_ptr<Store> store_;
  std::unique_ptr<transport::Transport> transport_;  // owns it; reset under use_mutex_ at shutdown
  // The same transport as a pointer that never changes, for the loop
  // thread's callbacks (they end inside the transport's destructor), the
  // serving pool and the watchdog (both joined before it goes): they must
  // not read transport_ while shutdown resets it.
  transport::Transport* net_ = nullptr;
  std::vector<WorkerInfo> infos_;
  std::map<std::string, int> by_name_;
  std::unique_ptr<detail::ServingPool> pool_;
  std::mutex serving_mutex_;
  bool serving_ = true;
  // Held while a caller's thread sends (shared) and while the transport is
  // destroyed (exclusive).
  std::shared_mutex use_mutex_;
  std::atomic<bool> closing_{false};

  mutable std::mutex mutex_;
  std::condition_variable watch_cv_;
  std::condition_variable idle_cv_;
  std::map<uint64_t, Pending> pending_;
  bool stopping_ = false;
  std::thread watchdog_;
  std::atomic<uint64_t> next_id_{0};
  std::atomic<bool> closed_{false};

  std::mutex shutdown_mutex_;
  bool shut_down_ = false;
};

}  // namespace

std::shared_ptr<Agent> Agent::start(const std::string& name, int rank, int world_size,
                                    std::shared_ptr<Store> store, const AgentOptions& options) {
  if (!store) throw DistInvalidArgument("rpc: init_rpc needs a store");
  return std::make_shared<AgentImpl>(name, rank, world_size, std::move(store), options);
}

}  // namespace tdist::rpc
