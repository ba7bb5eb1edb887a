#include "transport/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <random>

#include "common/error_text.h"
#include "tdist/errors.h"

namespace tdist::transport::shm {
namespace {

std::string next_name() {
  static std::atomic<uint64_t> counter{0};
  std::random_device device;
  return "/" + std::string(segment_prefix()) + std::to_string(getuid()) + "-" + std::to_string(getpid()) +
         "-" + std::to_string(counter++) + "-" + std::to_string(device());
}

uint8_t* map(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    throw DistBackendError("shared memory: cannot map " + std::to_string(bytes) + " bytes of " + name + ": " +
                           errno_text(errno));
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

const char* segment_prefix() {
  return "tdist-";
}

Segment Segment::create(size_t bytes) {
  sweep_stale_segments();
  std::string name = next_name();
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw DistBackendError("shared memory: cannot create " + name + ": " + errno_text(errno));
  // posix_fallocate reserves the pages now, so a full /dev/shm is an error
  // here rather than a SIGBUS in the middle of a collective.
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    close(fd);
    shm_unlink(name.c_str());
    throw DistBackendError("shared memory: cannot reserve " + std::to_string(bytes) + " bytes for " + name +
                           " (is /dev/shm full?): " + errno_text(rc));
  }
  uint8_t* data = nullptr;
  try {
    data = map(fd, bytes, name);
  } catch (...) {
    close(fd);
    shm_unlink(name.c_str());
    throw;
  }
  close(fd);
  return Segment(name, data, bytes, true);
}

Segment Segment::open(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) throw DistBackendError("shared memory: cannot open " + name + ": " + errno_text(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    throw DistBackendError("shared memory: " + name + " has " + std::to_string(st.st_size) +
                           " bytes, expected " + std::to_string(bytes));
  }
  uint8_t* data = nullptr;
  try {
    data = map(fd, bytes, name);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  return Segment(name, data, bytes, false);
}

Segment::~Segment() {
  release();
}

Segment::Segment(Segment&& other) noexcept
    : name_(std::move(other.name_)), data_(other.data_), size_(other.size_), owner_(other.owner_) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.owner_ = false;
}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    data_ = other.data_;
    size_ = other.size_;
    owner_ = other.owner_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.owner_ = false;
  }
  return *this;
}

void Segment::unlink() {
  if (owner_) shm_unlink(name_.c_str());
  owner_ = false;
}

void Segment::release() noexcept {
  unlink();
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
}

int sweep_stale_segments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  const std::string mine = std::string(segment_prefix()) + std::to_string(getuid()) + "-";
  int removed = 0;
  // readdir is safe on a stream no other thread uses (this one is local).
  while (dirent* entry = readdir(dir)) {  // NOLINT(concurrency-mt-unsafe)
    std::string name = entry->d_name;
    if (name.rfind(mine, 0) != 0) continue;
    pid_t pid = static_cast<pid_t>(std::strtol(name.c_str() + mine.size(), nullptr, 10));
    if (pid <= 0 || pid == getpid()) continue;
    if (kill(pid, 0) != 0 && errno == ESRCH && shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace tdist::transport::shm
