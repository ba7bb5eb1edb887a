// The RPC agent (include/tdist/rpc.h, docs/rpc.md): one TCP transport among
// the workers, whose event-loop thread receives every request and response
// header (any-source receives on two tags, reposted as each completes) and
// then each tensor straight into the buffer allocated for it -- or, from a
// worker of this host, copies it out of that worker's memory (rpc_direct.h);
// a serving pool runs the functions; a watchdog thread fails calls whose
// deadline passed or whose callee died.

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <thread>

#include "common/completion_thread.h"
#include "common/env.h"
#include "common/error_text.h"
#include "common/signal_dump.h"
#include "common/socket.h"
#include "rpc/rpc_buffers.h"
#include "rpc/rpc_direct.h"
#include "rpc/rpc_future.h"
#include "rpc/rpc_pool.h"
#include "rpc/rpc_registry.h"
#include "rpc/rpc_spin.h"
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
// Timeouts dump the pending calls at most this often (a burst of them dumps once).
constexpr milliseconds kDumpInterval{1000};

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

// A call this worker made that has no answer yet.
struct Pending {
  int callee = -1;
  std::string function;
  Clock::time_point start;
  Clock::time_point deadline;
  std::shared_ptr<detail::FutureState> state;
};

// A tensor offered to a peer for a direct read, kept until it has read it.
struct Offer {
  Tensor tensor;
  detail::Hold hold;
};

// Whose offers: the peer, the call and whether they are its answer's.
using OfferKey = std::tuple<int, uint64_t, bool>;

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

  void shutdown(bool graceful) override {
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
    for (const auto& [id, p] : pending_)
      lines.push_back(describe_call(id, p, now, "deadline in " + ms_text(p.deadline - now)));
    return lines;
  }

 private:
  const WorkerInfo& me() const { return infos_[static_cast<size_t>(rank_)]; }

  const std::string& name_of(int id) const { return infos_[static_cast<size_t>(id)].name; }

  std::string describe_call(uint64_t id, const Pending& p, Clock::time_point now,
                            const std::string& state) const {
    return "call " + std::to_string(id) + ": '" + me().name + "' -> '" + name_of(p.callee) + "' " +
           p.function + ", waiting " + ms_text(now - p.start) + ", " + state;
  }

  // The flight recorder's counterpart for calls: every call this worker
  // waits for, to the log and, with TDIST_TRACE_DIR set, to
  // rpc<rank>.txt there; `also` are calls that just failed.
  void dump_pending(const std::string& reason, const std::vector<std::string>& also) const noexcept {
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
      } else if (tag == wire::kResponseTag) {
        on_response(source, wire::decode_response(bytes));
      } else {
        const wire::Release release = wire::decode_release(bytes);
        drop_offer(OfferKey{source, release.id, release.response});
      }
    } catch (const std::exception& e) {
      TDIST_LOG(WARNING) << "rpc: worker '" << me().name << "' dropped a message from worker '"
                         << name_of(source) << "': " << e.what();
    }
    return true;
  }

  // Receives the tensors of a header from `source` on `tag` into `tensors`
  // (those `metas` does not offer for a direct read), then runs done(error)
  // once (error: the first receive that failed).
  void receive_tensors(int source, uint64_t tag, const std::vector<wire::TensorMeta>& metas,
                       const std::shared_ptr<std::vector<Tensor>>& tensors,
                       std::function<void(std::exception_ptr)> done) {
    struct Countdown {
      std::mutex mutex;
      size_t left;
      std::exception_ptr error;
      std::function<void(std::exception_ptr)> done;
    };
    // Where each receive goes, taken before the first is posted: once the
    // last one completes (possibly at once), `done` may hand the tensors on
    // to another thread, which may move them.
    std::vector<std::pair<void*, size_t>> targets;
    for (size_t i = 0; i < tensors->size(); ++i) {
      Tensor& t = (*tensors)[i];
      if (t.nbytes() > 0 && !metas[i].direct && !metas[i].bytes) targets.emplace_back(t.data(), t.nbytes());
    }
    if (targets.empty()) return done(nullptr);
    auto countdown = std::make_shared<Countdown>();
    countdown->left = targets.size();
    countdown->done = std::move(done);
    for (const auto& [data, nbytes] : targets) {
      net_->irecv(source, tag, data, nbytes)->on_complete([countdown, tensors](transport::Request& r) {
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
    receive_tensors(source, wire::data_tag(call->id, false), call->tensors, args,
                    [this, source, call, args, deadline](const std::exception_ptr& error) {
                      bool queued = false;
                      if (!error) {
                        std::lock_guard<std::mutex> lock(serving_mutex_);
                        if (!serving_) return;  // shutting down: this worker's goodbye tells the caller
                        queued = pool_->try_post([this, source, call, args, deadline] {
                          serve(source, *call, std::move(*args), deadline);
                        });
                      }
                      if (queued) return;
                      release_offers(source, call->id, false, call->tensors);  // never to be read
                      if (error) return;  // the caller is gone: nobody to answer
                      answer_error(source, call->id, "tdist.rpc.Busy",
                                   "worker '" + me().name + "' is busy: all " +
                                       std::to_string(options_.num_worker_threads) +
                                       " serving threads are running and " +
                                       std::to_string(options_.max_queued_requests) + " requests wait; '" +
                                       call->function + "' was refused",
                                   "");
                    });
  }

  void serve(int source, const wire::Request& request, std::vector<Tensor> tensors,
             Clock::time_point deadline) {
    auto fn = detail::find_function(request.function);
    if (!fn || Clock::now() >= deadline) {
      release_offers(source, request.id, false, request.tensors);  // never to be read
      if (!fn) {
        return answer_error(
            source, request.id, "tdist.rpc.UnknownFunction",
            "no function named '" + request.function + "' is registered on worker '" + me().name + "'", "");
      }
      return;  // the caller has given up already
    }
    std::string read_error;
    try {
      read_direct(source, request.tensors, tensors);
    } catch (const std::exception& e) {
      read_error = e.what();
    }
    release_offers(source, request.id, false, request.tensors);
    if (!read_error.empty()) {
      return answer_error(source, request.id, "tdist.rpc.TransferError",
                          "worker '" + me().name + "' could not take the arguments of '" + request.function +
                              "': " + read_error,
                          "");
    }
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

  void answer(int to, wire::Response& response, std::vector<Tensor> tensors) {
    response.tensors = describe(to, response.id, true, tensors);
    auto header = std::make_shared<std::vector<uint8_t>>(wire::encode(response));
    auto keep = std::make_shared<std::vector<Tensor>>(std::move(tensors));
    // A caller that died or gave up misses its answer; nothing else to do.
    auto hold = [header, keep](transport::Request&) {};
    net_->isend(to, wire::kResponseTag, header->data(), header->size())->on_complete(hold);
    for (size_t i = 0; i < keep->size(); ++i) {
      const Tensor& t = (*keep)[i];
      if (t.nbytes() > 0 && !response.tensors[i].direct && !response.tensors[i].bytes)
        net_->isend(to, wire::data_tag(response.id, true), t.data(), t.nbytes())->on_complete(hold);
    }
  }

  void on_response(int source, wire::Response response) {
    auto tensors = std::make_shared<std::vector<Tensor>>(allocate(response.tensors));
    auto body = std::make_shared<wire::Response>(std::move(response));
    receive_tensors(
        source, wire::data_tag(body->id, true), body->tensors, tensors,
        [this, source, body, tensors](const std::exception_ptr& error) {
          // The callee has read what this worker offered with the call
          // (before it answered): those tensors may go.
          drop_offer(OfferKey{source, body->id, false});
          if (error) {
            release_offers(source, body->id, true, body->tensors);
            return fail(body->id, error);
          }
          // Read while the call is still pending: a graceful shutdown waits
          // for pending calls, so the callee keeps its offer until then.
          std::string read_error;
          if (is_pending(body->id)) {
            try {
              read_direct(source, body->tensors, *tensors);
            } catch (const std::exception& e) {
              read_error = e.what();
            }
          }
          release_offers(source, body->id, true, body->tensors);
          std::optional<Pending> p = take(body->id);
          if (!p) return;  // it timed out meanwhile
          if (!read_error.empty()) {
            p->state->complete(
                {}, std::make_exception_ptr(DistNetworkError(
                        "rpc: call of '" + p->function + "' on worker '" + name_of(source) + "' from '" +
                        me().name + "' failed: its answer could not be taken: " + read_error)));
            return;
          }
          if (p->callee != source) {
            TDIST_LOG(WARNING) << "rpc: worker '" << name_of(source) << "' answered call " << body->id
                               << " made to worker '" << name_of(p->callee) << "'";
          }
          if (body->ok) {
            p->state->complete(Message{std::move(body->payload), std::move(*tensors)}, nullptr);
            return;
          }
          std::string what = "rpc: '" + p->function + "' on worker '" + name_of(source) + "' raised " +
                             body->error_type + ": " + body->error_message;
          if (!body->error_traceback.empty()) {
            what += "\nremote traceback (worker '" + name_of(source) + "'):\n" + body->error_traceback;
          }
          p->state->complete({},
                             std::make_exception_ptr(RpcError(what, name_of(source), body->error_type,
                                                              body->error_message, body->error_traceback)));
        });
  }

  // --- direct reads between workers of one host (rpc_direct.h) -------------

  // Every worker probes which others it can read and publishes the answer;
  // this worker offers tensors to those that can read it.
  void probe_direct_reads() {
    const int world = static_cast<int>(infos_.size());
    std::string readable(static_cast<size_t>(world), '0');
    pids_.assign(static_cast<size_t>(world), 0);
    for (int r = 0; r < world; ++r) {
      if (r == rank_) continue;
      const std::string card = to_string(store_->get("direct/card/" + std::to_string(r)));
      pids_[static_cast<size_t>(r)] = detail::card_pid(card);
      if (direct_min_bytes_ > 0 && detail::can_read_directly(card)) readable[static_cast<size_t>(r)] = '1';
    }
    store_->set("direct/readable/" + std::to_string(rank_), readable);
    offer_to_.assign(static_cast<size_t>(world), false);
    if (direct_min_bytes_ == 0) return;
    for (int r = 0; r < world; ++r) {
      if (r == rank_) continue;
      const std::string theirs = to_string(store_->get("direct/readable/" + std::to_string(r)));
      offer_to_[static_cast<size_t>(r)] = theirs.size() == static_cast<size_t>(world) && theirs[rank_] == '1';
    }
  }

  // The descriptions of `tensors` going to `peer` with call `id`: those
  // the peer can read directly are offered (and kept until it has).
  std::vector<wire::TensorMeta> describe(int peer, uint64_t id, bool response,
                                         const std::vector<Tensor>& tensors) {
    std::vector<wire::TensorMeta> metas;
    metas.reserve(tensors.size());
    std::vector<Offer> offers;
    const bool may_offer = !offer_to_.empty() && offer_to_[static_cast<size_t>(peer)];
    for (const Tensor& t : tensors) {
      wire::TensorMeta m{t.dtype(), t.shape(), std::nullopt, std::nullopt};
      if (t.nbytes() <= wire::kInlineMaxBytes) {
        const auto* p = static_cast<const uint8_t*>(t.data());
        m.bytes.emplace(p, p + t.nbytes());
      } else if (may_offer && t.nbytes() >= direct_min_bytes_) {
        if (auto hold = detail::acquire_hold()) {
          m.direct = wire::DirectSource{reinterpret_cast<uint64_t>(t.data()),
                                        reinterpret_cast<uint64_t>(hold->word), hold->token};
          offers.push_back(Offer{t, *hold});
        }
      }
      metas.push_back(std::move(m));
    }
    if (!offers.empty()) {
      std::lock_guard<std::mutex> lock(offers_mutex_);
      offers_[OfferKey{peer, id, response}] = std::move(offers);
    }
    return metas;
  }

  // Copies the tensors `metas` offers for a direct read out of `source`.
  void read_direct(int source, const std::vector<wire::TensorMeta>& metas, std::vector<Tensor>& tensors) {
    for (size_t i = 0; i < metas.size(); ++i) {
      if (!metas[i].direct || tensors[i].nbytes() == 0) continue;
      const wire::DirectSource& d = *metas[i].direct;
      detail::read_offer(pids_[static_cast<size_t>(source)], name_of(source), tensors[i].data(),
                         tensors[i].nbytes(), d.address, d.hold_word, d.token);
    }
  }

  // Tells `source` this worker is done with what it offered for call `id`.
  void release_offers(int source, uint64_t id, bool response, const std::vector<wire::TensorMeta>& metas) {
    if (std::none_of(metas.begin(), metas.end(),
                     [](const wire::TensorMeta& m) { return m.direct.has_value(); }))
      return;
    auto bytes = std::make_shared<std::vector<uint8_t>>(wire::encode(wire::Release{id, response}));
    net_->isend(source, wire::kReleaseTag, bytes->data(), bytes->size())
        ->on_complete([bytes](transport::Request&) {});
  }

  // Lets go of the offers of one call's request or answer.
  void drop_offer(const OfferKey& key) {
    std::vector<Offer> dropped;
    {
      std::lock_guard<std::mutex> lock(offers_mutex_);
      auto it = offers_.find(key);
      if (it == offers_.end()) return;
      dropped = std::move(it->second);
      offers_.erase(it);
    }
    for (const Offer& o : dropped) detail::release_hold(o.hold);  // before the tensors go
  }

  // Lets go of the offers `which` picks (a dead peer's, or all at shutdown).
  void drop_offers(const std::function<bool(const OfferKey&)>& which) {
    std::vector<Offer> dropped;
    {
      std::lock_guard<std::mutex> lock(offers_mutex_);
      for (auto it = offers_.begin(); it != offers_.end();) {
        if (!which(it->first)) {
          ++it;
          continue;
        }
        for (Offer& o : it->second) dropped.push_back(std::move(o));
        it = offers_.erase(it);
      }
    }
    for (const Offer& o : dropped) detail::release_hold(o.hold);  // before the tensors go
  }

  // --- pending calls -------------------------------------------------------

  bool is_pending(uint64_t id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pending_.count(id) != 0;
  }

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
      watch_wake_ = wake;
      watch_cv_.wait_until(lock, wake);
      watch_wake_ = Clock::time_point::min();  // awake: nobody needs to wake it
      if (stopping_) break;
      const Clock::time_point now = Clock::now();
      std::vector<std::pair<Pending, std::exception_ptr>> failed;
      std::vector<std::string> timed_out;
      for (auto it = pending_.begin(); it != pending_.end();) {
        const Pending& p = it->second;
        std::exception_ptr error;
        if (p.deadline <= now) {
          error = std::make_exception_ptr(timeout_error(p.callee, p.function, p.start, p.deadline));
          timed_out.push_back(describe_call(it->first, p, now, "timed out"));
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
      if (!timed_out.empty() && now - last_dump_ >= kDumpInterval) {
        last_dump_ = now;
        dump_pending("a call timed out", timed_out);
      }
      for (auto& [p, error] : failed) p.state->complete({}, error);
      // What a dead worker was offered, it will never read.
      drop_offers([this](const OfferKey& key) { return net_->peer_failed(std::get<0>(key)); });
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
  // Direct reads: the workers' processes, and whom this worker offers
  // tensors to (empty: nobody).
  size_t direct_min_bytes_ = 0;  // 0: no direct reads
  std::vector<pid_t> pids_;
  std::vector<bool> offer_to_;
  std::mutex offers_mutex_;
  std::map<OfferKey, std::vector<Offer>> offers_;
  std::unique_ptr<detail::ServingPool> pool_;
  std::mutex serving_mutex_;
  bool serving_ = true;
  // Held while a caller's thread sends (shared) and while the transport is
  // destroyed (exclusive).
  std::shared_mutex use_mutex_;
  std::atomic<bool> closing_{false};

  mutable std::mutex mutex_;
  std::condition_variable watch_cv_;
  Clock::time_point watch_wake_ = Clock::time_point::min();  // when the sleeping watchdog wakes
  std::condition_variable idle_cv_;
  std::map<uint64_t, Pending> pending_;
  bool stopping_ = false;
  std::thread watchdog_;
  Clock::time_point last_dump_{};  // the watchdog's last dump of pending calls
  uint64_t signal_dump_ = 0;       // its SIGUSR1 registration (0: none)
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
