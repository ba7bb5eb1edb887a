#pragma once

// A POSIX shared-memory segment shared by the ranks of one group on one
// host. Rank 0 of the group creates it under a unique name
// (/dev/shm/tdist-<uid>-<pid>-<n>-<random>), the others open it by name, and
// rank 0 unlinks the name as soon as every rank has mapped it: from then on
// the memory lives only as long as some process maps it, so a SIGKILL leaves
// nothing behind. The window between create and unlink is closed by
// sweep_stale_segments(), which removes names whose creating process is gone.

#include <cstddef>
#include <cstdint>
#include <string>

namespace tdist::transport::shm {

class Segment {
 public:
  /// Creates and maps a new zero-filled segment of `bytes`.
  static Segment create(size_t bytes);
  /// Maps the segment `name` created by another process; its size must be `bytes`.
  static Segment open(const std::string& name, size_t bytes);

  Segment() = default;
  ~Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  /// Removes the name (idempotent); the mapping stays valid.
  void unlink();

 private:
  Segment(std::string name, uint8_t* data, size_t size, bool owner)
      : name_(std::move(name)), data_(data), size_(size), owner_(owner) {}
  void release() noexcept;

  std::string name_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;  // unlinks the name on destruction if still linked
};

/// Removes /dev/shm/tdist-<uid>-<pid>-* names of this user whose creating
/// process no longer exists. Returns how many it removed.
int sweep_stale_segments();

/// The prefix of every segment name tdist creates ("tdist-"), for tests.
const char* segment_prefix();

}  // namespace tdist::transport::shm
