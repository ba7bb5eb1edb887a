#pragma once

// The end of the store that init_process_group made (env:// and tcp://,
// where rank 0 hosts it). Its host must outlive every other rank's last
// request: a rank may still be making a group whose members synchronize
// among themselves (new_group(..., use_local_synchronization=True), a
// DeviceMesh's dims) when rank 0 is done. So every other rank says it
// leaves the store when it destroys the default group, and rank 0 keeps the
// store serving after its own destroy_process_group() until they all have
// (or are gone, or a bound passed). It waits for that at exit or at its
// next init_process_group, never inside destroy_process_group(): another
// rank may be waiting for rank 0 to go on before it destroys anything.
// Internal to src/process_group.

#include <chrono>
#include <memory>
#include <string>

#include "tdist/tcp_store.h"

namespace tdist::detail {

// destroy_process_group()'s part (not called in a forked child's copy of
// the job, whose store is the parent's), for the store rank 0 hosts: a rank
// other than 0 leaves it at once, setting its key and this process's
// (rendezvous/left_store.h) within `limit`, at most 5 s (the host may be
// stopped or gone); rank 0 keeps it (serving) for release_kept_store().
void leave_made_store(std::shared_ptr<TCPStore> store, int rank, int size, std::chrono::milliseconds limit);

// Waits for the other ranks to leave the store rank 0 kept, if any, then
// closes it: until every other rank has set its key, or for about a second
// no other user has been connected (a killed rank's connection closes), or
// the limit passes (then a warning names the ranks it did not see leave).
// At exit, and before the next init_process_group (which may host a store
// on the same port). Never raises.
void release_kept_store() noexcept;

}  // namespace tdist::detail
