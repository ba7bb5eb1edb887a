#pragma once

// Building blocks shared by the shared-memory collectives, one header per
// concern:
//   shm_call.h            a call on a group: waits, signature checks, peer
//                         memory, abort (run_guarded)
//   shm_handoff.h         how chunks pass between ranks: stores, probes, the
//                         ring of slots
//   shm_slicing.h         cutting bytes into rounds, sections and tiles
//   shm_reduce_sources.h  the reduction over every rank's contribution

#include "algorithms/shm/shm_call.h"
#include "algorithms/shm/shm_handoff.h"
#include "algorithms/shm/shm_reduce_sources.h"
#include "algorithms/shm/shm_slicing.h"
