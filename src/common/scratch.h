#pragma once

// Scratch memory, left uninitialized and recycled from one call to the next.
//
// Why recycle: malloc serves a block of a few hundred KiB or more with a
// fresh mmap, and every 4 KiB page of it then costs a page fault on first
// touch, which in a virtual machine is dear. A 2-rank 1 MiB all_reduce over
// TCP took 210 faults and 3-5 ms per call that way, against 0.4 ms with the
// memory reused. Why uninitialized: a std::vector would zero it first, a
// wasted pass over a buffer that is about to be overwritten.

#include <cstddef>
#include <cstdint>

namespace tdist::detail {

class Scratch {
 public:
  Scratch() = default;
  /// At least `bytes` bytes, from this thread's cache when one fits.
  explicit Scratch(size_t bytes);
  ~Scratch();
  Scratch(Scratch&& other) noexcept;
  Scratch& operator=(Scratch&& other) noexcept;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  uint8_t* get() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  void give_back() noexcept;
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

inline Scratch make_scratch(size_t bytes) {
  return Scratch(bytes);
}

}  // namespace tdist::detail
