#include "transport_choice.h"

#include <string>
#include <vector>

#include "common/env.h"
#include "tdist/errors.h"

namespace tdist {

TransportMode transport_mode() {
  auto value = env_string("TDIST_TRANSPORT");
  if (!value || *value == "auto") return TransportMode::kAuto;
  if (*value == "tcp") return TransportMode::kTcp;
  if (*value == "shm") return TransportMode::kShm;
  throw DistInvalidArgument("TDIST_TRANSPORT must be auto, tcp or shm, got '" + *value + "'");
}

std::unique_ptr<transport::shm::ShmGroup> connect_shm_if_local(Store& store, int rank, int size,
                                                               std::chrono::milliseconds timeout) {
  TransportMode mode = transport_mode();
  // Every rank reads its own environment; they all take part in the host
  // exchange whatever their mode, so a rank set to tcp among ranks set to
  // auto makes everyone fall back to TCP instead of hanging.
  store.set("shm/host/" + std::to_string(rank), to_bytes(mode == TransportMode::kTcp ? std::string("tcp:") +
                                                             std::to_string(rank) : transport::shm::host_identity()));
  std::vector<std::string> hosts(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) hosts[static_cast<size_t>(r)] = to_string(store.get("shm/host/" + std::to_string(r)));
  for (int r = 0; r < size; ++r) {
    if (hosts[static_cast<size_t>(r)] == hosts[0]) continue;
    if (mode == TransportMode::kShm) {
      throw DistInvalidArgument("TDIST_TRANSPORT=shm: rank " + std::to_string(r) + " is not on the host of rank 0 (" +
                                hosts[static_cast<size_t>(r)] + " vs " + hosts[0] +
                                "); shared memory needs every rank of the group on one host");
    }
    return nullptr;
  }
  if (mode == TransportMode::kTcp || size == 1) return nullptr;
  return transport::shm::ShmGroup::connect(store, rank, size, timeout);
}

}  // namespace tdist
