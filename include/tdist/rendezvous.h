#pragma once

/// @file rendezvous.h
/// Rendezvous (the spec's "Initialization"): turns an init_method URL, or an
/// explicit store, into the store, rank and world size a process group is
/// built from.
///
///   env://                 MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
///   tcp://host:port        rank and world_size given as arguments or as
///   tcp://[::1]:port       ?rank=R&world_size=N in the URL
///   file:///path/to/file   a FileStore shared by all ranks
///
/// Arguments win over the URL's query, and the URL's query over the
/// environment. Rank 0 hosts the TCPStore server for env:// and tcp://.

#include <memory>
#include <string>

#include "tdist/store.h"

namespace tdist {

/// What rendezvous produces.
struct RendezvousResult {
  std::shared_ptr<Store> store;
  int rank = -1;
  int world_size = -1;
  /// True when rank 0 runs the store's server (env:// and tcp://, unless
  /// the launcher hosts it: TORCHELASTIC_USE_AGENT_STORE=True).
  bool rank_0_hosts_store = false;
};

/// Parses `init_method` and connects. `rank` and `world_size` of -1 mean
/// "take them from the URL or the environment". `timeout` bounds the whole
/// rendezvous and becomes the store's default timeout. Raises
/// DistInvalidArgument naming the missing or invalid variable or parameter,
/// DistStoreError if the store cannot be reached in time. A rank other than
/// 0 that reaches a store this process left (rank 0 keeps it after
/// destroy_process_group until the other ranks left it) tries again until
/// the next one is up.
RendezvousResult rendezvous(const std::string& init_method, int rank = -1, int world_size = -1,
                            Store::Duration timeout = Store::kDefaultTimeout);

/// Checks an explicit store, rank and world size (the spec's third way) and
/// returns them as a RendezvousResult.
RendezvousResult rendezvous(std::shared_ptr<Store> store, int rank, int world_size);

/// The parts of an init_method URL; exposed for tests.
struct InitMethodUrl {
  std::string scheme;   // "env", "tcp", "file"
  std::string host;     // without brackets, for tcp://
  int port = -1;        // for tcp://
  std::string path;     // for file://
  int rank = -1;        // from ?rank=
  int world_size = -1;  // from ?world_size=
};

/// Splits an init_method URL; raises DistInvalidArgument saying what is wrong.
InitMethodUrl parse_init_method(const std::string& init_method);

}  // namespace tdist
