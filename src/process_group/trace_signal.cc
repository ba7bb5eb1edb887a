// SIGUSR1 dumps the flight recorder (flight_recorder.h) when TDIST_TRACE_DIR
// is set, through common/signal_dump.h.

#include <unistd.h>

#include <mutex>

#include "common/env.h"
#include "common/signal_dump.h"
#include "flight_recorder.h"
#include "tdist/logging.h"

namespace tdist::detail {

void install_trace_signal_handler() {
  // Once per process; a forked child (the tests' ranks) registers its own.
  static std::mutex mutex;
  static pid_t installed_in = 0;
  std::lock_guard<std::mutex> lock(mutex);
  if (installed_in == getpid()) return;
  const auto dir = env_string("TDIST_TRACE_DIR");
  if (!dir || dir->empty() || !FlightRecorder::instance().enabled()) return;
  installed_in = getpid();
  add_sigusr1_dump([] {
    try {
      const std::string path = FlightRecorder::instance().dump("SIGUSR1");
      TDIST_LOG(WARNING) << "flight recorder written to " << path << " (SIGUSR1)";
    } catch (const std::exception& e) {
      TDIST_LOG(WARNING) << "flight recorder: SIGUSR1 dump failed: " << e.what();
    }
  });
}

}  // namespace tdist::detail
