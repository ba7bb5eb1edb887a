#pragma once

// Objects that run threads and talk to peers belong to the process that made
// them. A child forked after they were made (a test's rank, a DataLoader
// worker, a Python multiprocessing pool) has a copy of their memory but none
// of their threads: destroying the copy would wait forever (joining a thread
// that is not there, destroying a condition variable a parent's thread was
// waiting on), and its sockets and shared memory are the parent's, which the
// copy's goodbyes and unlinks would break. So a copy in another process is
// left alone: never destroyed, its memory and descriptors go with the
// child's exit.

#include <sys/types.h>

#include <memory>
#include <string>

namespace tdist::detail {

/// getpid(), without a system call: read from memory, refreshed in every
/// child that fork() makes (by a pthread_atfork handler, registered on the
/// first call; so call it once before forking, as an owner's constructor
/// does).
pid_t this_process_id();

/// "this <what> belongs to process <owner>; this is a child forked from it":
/// how the errors of a forked child's copy begin.
std::string forked_copy_text(const std::string& what, pid_t owner);

/// `object` in a shared_ptr that destroys it only in the process that calls
/// this; in a forked child the last owner's release leaves it be.
template <typename T>
std::shared_ptr<T> owned_by_this_process(std::unique_ptr<T> object) {
  const pid_t owner = this_process_id();
  return std::shared_ptr<T>(object.release(), [owner](T* made) {
    if (this_process_id() == owner)
      delete made;  // NOLINT(cppcoreguidelines-owning-memory): the deleter owns it
  });
}

}  // namespace tdist::detail
