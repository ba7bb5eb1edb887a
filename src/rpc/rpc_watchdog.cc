// The RPC agent (rpc_agent_impl.h): the calls waiting for an answer, the
// watchdog that fails them at their deadline or when their callee dies, and
// the rounds of a graceful shutdown.

#include "rpc/rpc_agent_impl.h"

namespace tdist::rpc::detail {

bool AgentImpl::is_pending(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_.count(id) != 0;
}

std::optional<Pending> AgentImpl::take(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return std::nullopt;
  Pending p = std::move(it->second);
  pending_.erase(it);
  if (pending_.empty()) idle_cv_.notify_all();
  return p;
}

void AgentImpl::fail(uint64_t id, const std::exception_ptr& error) {
  std::optional<Pending> p = take(id);
  if (!p) return;
  p->state->complete({}, std::make_exception_ptr(DistNetworkError(
                             "rpc: call of '" + p->function + "' on worker '" + name_of(p->callee) +
                             "' from '" + me().name + "' failed: " + exception_text(error))));
}

void AgentImpl::fail_all(const std::exception_ptr& error) {
  std::map<uint64_t, Pending> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    all.swap(pending_);
    idle_cv_.notify_all();
  }
  for (auto& [id, p] : all) p.state->complete({}, error);
}

void AgentImpl::watch() {
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
        error = std::make_exception_ptr(DistNetworkError(
            "rpc: call of '" + p.function + "' on worker '" + name_of(p.callee) + "' from '" + me().name +
            "' failed: worker '" + name_of(p.callee) + "' (rank " + std::to_string(p.callee) + ") is gone"));
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

void AgentImpl::quiesce() {
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
                           ms_text(options_.init_timeout) + " waiting for the functions it serves to return");
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

void AgentImpl::arrive_and_wait(const std::string& round) {
  store_->set(round + "/" + std::to_string(rank_), "1");
  const Clock::time_point deadline = Clock::now() + options_.init_timeout;
  std::vector<int> missing;
  missing.reserve(infos_.size());
  for (int r = 0; r < static_cast<int>(infos_.size()); ++r) missing.push_back(r);
  std::vector<std::string> dead;
  while (true) {
    missing.erase(std::remove_if(missing.begin(), missing.end(),
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

}  // namespace tdist::rpc::detail
