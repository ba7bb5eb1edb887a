#pragma once

// Running tdist-bench without a launcher: start N copies of this program as
// the ranks of an env:// job on 127.0.0.1, the way tdistrun or torchrun would.

namespace tdist::bench {

/// Forks `nproc` children that exec `argv` again with RANK, WORLD_SIZE,
/// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
/// MASTER_PORT set, and waits for them. If one rank fails (not by reporting
/// wrong results) the others get a few seconds and are then stopped, instead
/// of waiting for a dead peer until their timeout. Returns the exit code:
/// 0 if every rank succeeded, else the first non-zero code (1 for wrong
/// results, 2 for a failure, 128 + signal for a killed rank).
int launch_local(int nproc, char** argv);

}  // namespace tdist::bench
