// SIGUSR1 dumps the flight recorder (flight_recorder.h) into TDIST_TRACE_DIR
// or the default directory (common/signal_dump.h): a signal sent for
// evidence must never kill the job instead.

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
  if (installed_in == getpid() || !sigusr1_dumps_wanted()) return;
  // The recorder itself is made at the first dump or call, not here: the
  // Python package installs this at import, before a program may set
  // TDIST_TRACE_BUFFER_SIZE.
  installed_in = getpid();
  add_sigusr1_dump([] {
    if (!FlightRecorder::instance().enabled()) {
      TDIST_LOG(WARNING) << "flight recorder: SIGUSR1, but recording is off (TDIST_TRACE_BUFFER_SIZE=0)";
      return;
    }
    // A copy of tdist that never made a group (the Python package's in a
    // torch program, whose groups are the plugin's) has nothing to say, and
    // no rank to name its file by: every rank would write rank0.json.
    if (!FlightRecorder::instance().has_rank()) return;
    try {
      const bool chosen = env_string("TDIST_TRACE_DIR").has_value();
      const std::string path = FlightRecorder::instance().dump_to_dir("SIGUSR1", sigusr1_dump_dir());
      TDIST_LOG(WARNING) << "flight recorder written to " << path << " (SIGUSR1"
                         << (chosen ? ")" : "; TDIST_TRACE_DIR is not set, so into the default directory)");
    } catch (const std::exception& e) {
      TDIST_LOG(WARNING) << "flight recorder: SIGUSR1 dump failed: " << e.what();
    }
  });
}

}  // namespace tdist::detail
