#pragma once

// Child-process helpers shared by spawn() and the tdistrun launcher: naming
// how a process ended, pidfds, free ports.

#include <sys/types.h>

#include <string>

namespace tdist::launcher {

/// "SIGKILL" for 9; "signal 77" for a number without a name.
std::string signal_name(int signal);

/// How a wait status ended: "exited with code 3", "was killed by signal
/// SIGKILL (9)".
std::string describe_wait_status(int status);

/// True if the wait status means a clean exit (code 0).
bool wait_status_ok(int status);

/// A pidfd for `pid` (close-on-exec), readable once the process has ended.
/// Raises DistError naming the pid if the kernel refuses.
int open_pidfd(pid_t pid);

/// Waits for `pid` without blocking: true and *status filled if it has ended
/// (and is now reaped), false if it is still running.
bool try_reap(pid_t pid, int* status);

/// The first port of the range the kernel takes the local ports of outgoing
/// connections (and of bind to port 0) from.
int ephemeral_port_low();

/// A TCP port that was free on every interface a moment ago (listened on at
/// the dual-stack wildcard address, then closed), picked at random below the
/// kernel's ephemeral range when there is room.
int pick_free_port();

/// Writes all of `text` to `fd`, retrying on EINTR and partial writes; false
/// if the fd refuses (EPIPE, ...).
bool write_all(int fd, const char* data, size_t size);
inline bool write_all(int fd, const std::string& text) {
  return write_all(fd, text.data(), text.size());
}

}  // namespace tdist::launcher
