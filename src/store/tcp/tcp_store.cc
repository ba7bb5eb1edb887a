#include "tdist/tcp_store.h"

#include <utility>

#include "common/auth.h"
#include "common/env.h"
#include "store/tcp/client.h"
#include "store/tcp/server.h"
#include "tdist/errors.h"

namespace tdist {

TCPStore::TCPStore(std::string host_name, const TCPStoreOptions& options)
    : Store(options.timeout),
      host_(std::move(host_name)),
      port_(options.port),
      world_size_(options.world_size) {
  if (host_.empty()) throw DistInvalidArgument("TCPStore: host_name is empty");
  if (world_size_ && *world_size_ < 1) {
    throw DistInvalidArgument("TCPStore: world_size must be at least 1 (or unset), got " +
                              std::to_string(*world_size_));
  }
  if (options.timeout.count() < 0) {
    throw DistInvalidArgument("TCPStore: timeout must not be negative, got " +
                              std::to_string(options.timeout.count()) + " ms");
  }
  std::optional<std::string> token = options.auth_token ? options.auth_token : auth::token_from_env();
  if (token && token->empty()) token.reset();
  if (options.is_master) {
    TCPServerOptions server_options;
    server_options.port = options.port;
    server_options.host = options.listen_host.value_or(env_string("TDIST_STORE_LISTEN_HOST").value_or(host_));
    server_options.listen_fd = options.master_listen_fd;
    server_options.auth_token = token;
    server_ =
        options.multi_tenant ? TCPServer::start_shared(server_options) : TCPServer::start(server_options);
    port_ = server_->port();
  } else {
    if (options.master_listen_fd >= 0) {
      throw DistInvalidArgument("TCPStore: master_listen_fd is only for the master (is_master=true)");
    }
    if (options.port == 0) {
      throw DistInvalidArgument(
          "TCPStore: a client needs the server's port; port 0 only means 'pick one' on the "
          "master (read it back with port())");
    }
  }
  client_ = std::make_unique<TCPStoreClient>(host_, port_, options.timeout, token);
  if (world_size_) {
    client_->add(kInitKey, 1, options.timeout);
    if (options.is_master && options.wait_for_workers) wait_for_all_workers(options.timeout);
  }
}

TCPStore::TCPStore(std::string host_name, uint16_t port, std::optional<int> world_size, bool is_master,
                   Duration timeout, bool wait_for_workers, bool multi_tenant, int master_listen_fd)
    : TCPStore(std::move(host_name),
               TCPStoreOptions{port, world_size, is_master, timeout, wait_for_workers, multi_tenant,
                               master_listen_fd, std::nullopt, std::nullopt}) {}

// The client goes first (declared after the server), so the server, if this
// store runs it and nobody shares it, stops after our connection is closed.
TCPStore::~TCPStore() = default;

void TCPStore::wait_for_all_workers(Duration timeout) {
  int64_t joined = 0;
  // The server answers when the counter reaches world_size: no polling.
  if (!client_->wait_count(kInitKey, *world_size_, timeout, &joined)) {
    throw DistStoreTimeoutError("TCPStore: timed out after " + std::to_string(timeout.count()) +
                                " ms waiting for workers to join: " + std::to_string(joined) + " of " +
                                std::to_string(*world_size_) + " joined (server " + client_->address() + ")");
  }
}

int64_t TCPStore::others_connected() const {
  if (!server_) return -1;
  return static_cast<int64_t>(server_->stats().connections_open) - client_->open_connections();
}

void TCPStore::set(const std::string& key, const Bytes& value) {
  client_->set(key, value, timeout());
}

Bytes TCPStore::get(const std::string& key) {
  return client_->get(key, timeout());
}

int64_t TCPStore::add(const std::string& key, int64_t amount) {
  return client_->add(key, amount, timeout());
}

Bytes TCPStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return client_->compare_set(key, expected, desired, timeout());
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  return client_->check(keys, timeout());
}

void TCPStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  client_->wait(keys, timeout);
}

int64_t TCPStore::num_keys() {
  return client_->num_keys(timeout());
}

bool TCPStore::delete_key(const std::string& key) {
  return client_->delete_key(key, timeout());
}

}  // namespace tdist
