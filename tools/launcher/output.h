#pragma once

// One output stream (stdout or stderr) of one rank: split into lines,
// prefixed with "[rank N]: " on the console, copied raw to a log file, and
// its last lines kept for the failure report.

#include <deque>
#include <string>
#include <string_view>

namespace tdist::launcher {

/// The prefix of every console line of rank `rank`.
std::string rank_prefix(int rank);

/// Writes whole lines to the launcher's stdout (1) or stderr (2). After a
/// write fails (EPIPE: the reader went away) that fd is left alone; the job
/// goes on.
void console_write(int fd, std::string_view text);

class RankStream {
 public:
  /// Lines longer than this are cut into pieces of this size.
  static constexpr size_t kMaxLine = size_t{64} * 1024;

  /// `console_fd` 1 or 2, or -1 for no console copy; `log_path` empty for no
  /// log file (raises DistError if it cannot be created); keeps the last
  /// `tail_lines` lines.
  RankStream(int rank, int console_fd, const std::string& log_path, size_t tail_lines);
  ~RankStream();
  RankStream(const RankStream&) = delete;
  RankStream& operator=(const RankStream&) = delete;

  /// Bytes read from the rank's pipe.
  void feed(const char* data, size_t size);
  /// The stream ended: a last line without its newline is written too.
  void finish();
  /// The last lines, oldest first, without prefix or newline.
  const std::deque<std::string>& tail() const { return tail_; }

 private:
  void emit(std::string_view line);

  std::string prefix_;
  int console_fd_;
  int log_fd_ = -1;
  size_t tail_lines_;
  std::string partial_;
  std::deque<std::string> tail_;
};

}  // namespace tdist::launcher
