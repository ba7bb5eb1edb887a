#include "output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "common/error_text.h"
#include "launcher/process_util.h"
#include "tdist/errors.h"

namespace tdist::launcher {
namespace {

bool console_broken[3] = {false, false, false};

}  // namespace

std::string rank_prefix(int rank) {
  return "[rank " + std::to_string(rank) + "]: ";
}

void console_write(int fd, std::string_view text) {
  if (fd < 1 || fd > 2 || console_broken[fd]) return;
  if (!write_all(fd, text.data(), text.size())) console_broken[fd] = true;
}

RankStream::RankStream(int rank, int console_fd, const std::string& log_path, size_t tail_lines)
    : prefix_(rank_prefix(rank)), console_fd_(console_fd), tail_lines_(tail_lines) {
  if (!log_path.empty()) {
    log_fd_ = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd_ < 0)
      throw DistError("tdistrun: cannot create log file " + log_path + ": " + errno_text(errno));
  }
}

RankStream::~RankStream() {
  if (log_fd_ >= 0) close(log_fd_);
}

void RankStream::feed(const char* data, size_t size) {
  if (log_fd_ >= 0 && !write_all(log_fd_, data, size)) {
    close(log_fd_);  // disk full or similar: keep the console going
    log_fd_ = -1;
  }
  std::string_view chunk(data, size);
  while (!chunk.empty()) {
    size_t newline = chunk.find('\n');
    if (newline == std::string_view::npos) {
      partial_.append(chunk);
      while (partial_.size() >= kMaxLine) {
        emit(std::string_view(partial_).substr(0, kMaxLine));
        partial_.erase(0, kMaxLine);
      }
      return;
    }
    if (partial_.empty()) {
      emit(chunk.substr(0, newline));
    } else {
      partial_.append(chunk.substr(0, newline));
      emit(partial_);
      partial_.clear();
    }
    chunk.remove_prefix(newline + 1);
  }
}

void RankStream::finish() {
  if (!partial_.empty()) {
    emit(partial_);
    partial_.clear();
  }
}

void RankStream::emit(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (console_fd_ > 0) {
    std::string out;
    out.reserve(prefix_.size() + line.size() + 1);
    out.append(prefix_).append(line).push_back('\n');
    console_write(console_fd_, out);
  }
  if (tail_lines_ > 0) {
    tail_.emplace_back(line);
    if (tail_.size() > tail_lines_) tail_.pop_front();
  }
}

}  // namespace tdist::launcher
