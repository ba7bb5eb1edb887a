#pragma once

// Which transport a tdist group uses for its collectives: shared memory when
// every rank runs on this host (decided from host identities exchanged
// through the store, never guessed from LOCAL_WORLD_SIZE), else TCP.
// TDIST_TRANSPORT=auto|tcp|shm overrides (docs/environment.md).

#include <chrono>
#include <memory>

#include "tdist/store.h"
#include "transport/shm/shm_group.h"

namespace tdist {

enum class TransportMode { kAuto, kTcp, kShm };

/// TDIST_TRANSPORT, parsed; raises DistInvalidArgument on anything else.
TransportMode transport_mode();

/// Every rank must call it. Returns the group's shared-memory domain, or
/// null when the group uses TCP for its collectives (mode tcp, or ranks on
/// several hosts in mode auto). Mode shm with ranks on several hosts raises
/// DistInvalidArgument naming a rank that is elsewhere.
std::unique_ptr<transport::shm::ShmGroup> connect_shm_if_local(Store& store, int rank, int size,
                                                               std::chrono::milliseconds timeout);

}  // namespace tdist
