// The RPC agent (rpc_agent_impl.h): receiving requests and responses on
// the loop thread, and serving requests on the pool.

#include "rpc/rpc_agent_impl.h"

namespace tdist::rpc::detail {

void AgentImpl::receive(uint64_t tag) {
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

bool AgentImpl::dispatch(uint64_t tag, transport::Request& r, const std::vector<uint8_t>& bytes) {
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

void AgentImpl::receive_tensors(int source, uint64_t tag, const std::vector<wire::TensorMeta>& metas,
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

void AgentImpl::on_request(int source, wire::Request request) {
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

void AgentImpl::serve(int source, const wire::Request& request, std::vector<Tensor> tensors,
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

void AgentImpl::answer_error(int to, uint64_t id, const std::string& type, const std::string& message,
                             const std::string& traceback) {
  wire::Response response;
  response.id = id;
  response.ok = false;
  response.error_type = type;
  response.error_message = message;
  response.error_traceback = traceback;
  answer(to, response, {});
}

void AgentImpl::answer(int to, wire::Response& response, std::vector<Tensor> tensors) {
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

void AgentImpl::on_response(int source, wire::Response response) {
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
        p->state->complete({}, std::make_exception_ptr(RpcError(what, name_of(source), body->error_type,
                                                                body->error_message, body->error_traceback)));
      });
}

}  // namespace tdist::rpc::detail
