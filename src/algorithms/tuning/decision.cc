#include <utility>

#include "algorithms/tuning/tuning.h"

namespace tdist::algorithms {
namespace {

// The last choice of this thread, for the flight recorder (a name with
// static storage, so that keeping it costs one store).
thread_local const char* t_chosen = nullptr;

}  // namespace

const char* take_chosen_algorithm() {
  return std::exchange(t_chosen, nullptr);
}

void note_chosen_algorithm(const char* name) {
  t_chosen = name;
}

}  // namespace tdist::algorithms
