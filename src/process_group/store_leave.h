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

// The key rank `rank` sets as its last request.
std::string left_key(int rank);

// Rank `rank` of `size` is done with `store`. A rank other than 0 sets its
// key, and this process's (rendezvous/left_store.h), within `limit`, at
// most 5 s (the host may be stopped or gone). The host (the store's master)
// waits until every other rank has set its key, or for about a second no
// other user has been connected (a killed rank's connection closes), or
// `limit` passes: then it logs the ranks it did not see leave. Never
// raises: leaving is all that is left to do.
void leave_store(TCPStore& store, int rank, int size, std::chrono::milliseconds limit) noexcept;

// destroy_process_group()'s part (not called in a forked child's copy of
// the job, whose store is the parent's): a rank other than 0 leaves `store`
// at once; rank 0 keeps it (serving) for release_kept_store().
void leave_made_store(std::shared_ptr<TCPStore> store, int rank, int size, std::chrono::milliseconds limit);

// Waits for the other ranks to leave the store rank 0 kept, if any (as
// leave_store), then closes it. At exit, and before the next
// init_process_group (which may host a store on the same port).
void release_kept_store() noexcept;

}  // namespace tdist::detail
