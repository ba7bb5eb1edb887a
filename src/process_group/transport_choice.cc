#include "transport_choice.h"

#include <map>
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

CollectiveDomains connect_collective_domains(Store& store, transport::Transport& tcp,
                                             std::chrono::milliseconds timeout) {
  const int rank = tcp.rank();
  const int size = tcp.size();
  TransportMode mode = transport_mode();
  // Every rank takes part in the exchange whatever its mode; a rank set to
  // tcp claims a host of its own, so its peers fall back to TCP with it
  // instead of waiting for it in shared memory.
  std::string mine =
      mode == TransportMode::kTcp ? "tcp:" + std::to_string(rank) : transport::shm::host_identity();
  store.set("shm/host/" + std::to_string(rank), to_bytes(mine));
  std::vector<std::string> hosts(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    hosts[static_cast<size_t>(r)] = to_string(store.get("shm/host/" + std::to_string(r)));

  // Hosts in order of their lowest rank; each host's ranks in rank order.
  std::vector<std::vector<int>> by_host;
  std::map<std::string, size_t> index;
  for (int r = 0; r < size; ++r) {
    auto [it, added] = index.emplace(hosts[static_cast<size_t>(r)], by_host.size());
    if (added) by_host.emplace_back();
    by_host[it->second].push_back(r);
  }
  CollectiveDomains domains;
  if (by_host.size() > 1 && mode == TransportMode::kShm) {
    int other = by_host[1][0];
    throw DistInvalidArgument("TDIST_TRANSPORT=shm: rank " + std::to_string(other) +
                              " is not on the host of rank 0 (" + hosts[static_cast<size_t>(other)] + " vs " +
                              hosts[0] + "); shared memory needs every rank of the group on one host");
  }
  if (mode == TransportMode::kTcp || size == 1) return domains;
  if (by_host.size() == 1) {
    domains.shm = transport::shm::ShmGroup::connect(store, rank, size, timeout);
    domains.domain = algorithms::make_shm_domain(*domains.shm);
    return domains;
  }
  // The hierarchy needs the same number (> 1) of ranks on every host, so
  // that local index i has one peer on each host.
  const size_t per_host = by_host[0].size();
  for (const auto& ranks : by_host) {
    if (ranks.size() != per_host) return domains;
  }
  if (per_host < 2) return domains;
  const size_t host = index[hosts[static_cast<size_t>(rank)]];
  const auto& local = by_host[host];
  const size_t local_index = static_cast<size_t>(std::find(local.begin(), local.end(), rank) - local.begin());
  std::vector<int> cross;
  cross.reserve(by_host.size());
  for (const auto& ranks : by_host) cross.push_back(ranks[local_index]);
  domains.local =
      transport::shm::ShmGroup::connect(store, static_cast<int>(local_index), static_cast<int>(per_host),
                                        timeout, "shm/host" + std::to_string(host) + "/", local);
  // Every rank must cut the message into the same chunks: rank 0 decides.
  if (rank == 0) {
    const auto chunk = env_int("TDIST_HIER_CHUNK_BYTES", 64, int64_t{1} << 40).value_or(int64_t{2} << 20);
    store.set("shm/hier_chunk", to_bytes(std::to_string(chunk)));
  }
  domains.hierarchy_chunk_bytes =
      static_cast<size_t>(parse_int(to_string(store.get("shm/hier_chunk")), "shm/hier_chunk", 64));
  domains.local_ranks = std::make_unique<transport::SubsetTransport>(tcp, local);
  domains.cross_ranks = std::make_unique<transport::SubsetTransport>(tcp, cross);
  domains.by_host = std::move(by_host);
  algorithms::Hierarchy hierarchy;
  hierarchy.local = domains.local.get();
  hierarchy.local_ranks = domains.local_ranks.get();
  hierarchy.cross_ranks = domains.cross_ranks.get();
  hierarchy.by_host = domains.by_host;
  hierarchy.chunk_bytes = domains.hierarchy_chunk_bytes;
  domains.domain = algorithms::make_hierarchical_domain(hierarchy);
  return domains;
}

}  // namespace tdist
