#pragma once

// What SIGUSR1 runs: the flight recorder's dump, each RPC agent's list of
// pending calls (docs/debugging.md). A signal handler may not allocate or
// lock, so it only writes a byte to a pipe; a thread of its own waits on the
// pipe and runs every dump registered in this process. The handler then
// passes the signal on to whatever handler was installed before (another
// copy of tdist in the process, such as the torch plugin's, or the
// program's). Installed with the first dump, once per process; a forked
// child gets its own thread when it registers, and never runs dumps its
// parent registered.

#include <cstdint>
#include <functional>
#include <string>

namespace tdist::detail {

/// Runs `dump` (on the signal thread; it must not throw) at every SIGUSR1
/// until remove_sigusr1_dump(id).
uint64_t add_sigusr1_dump(std::function<void()> dump);
void remove_sigusr1_dump(uint64_t id);

/// Whether SIGUSR1 should dump in this process: with TDIST_TRACE_DIR set,
/// or when a launcher started it (RANK, LOCAL_RANK, or mpirun's, PMI's or
/// srun's rank variable is set): there one signal to the launcher reaches
/// every rank. Elsewhere no dump thread is started: a process that forks
/// after making a group (the tests' ranks) stays single-threaded.
bool sigusr1_dumps_wanted();

/// Where SIGUSR1's dumps go: TDIST_TRACE_DIR, else
/// ${TMPDIR:-/tmp}/tdist-trace-<parent pid>. The ranks a launcher started
/// (tdistrun, torchrun) share a parent, so one node's dumps land together;
/// without the default a signal sent for evidence would find no place to
/// write it.
std::string sigusr1_dump_dir();

}  // namespace tdist::detail
