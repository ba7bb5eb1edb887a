#pragma once

/// @file trace.h
/// The flight recorder (docs/debugging.md): every process keeps its last
/// TDIST_TRACE_BUFFER_SIZE calls (default 2000; 0 turns it off) of every
/// group, collectives and point-to-point alike, with their arguments, state
/// (queued, started, completed, failed), timestamps and, on shared memory,
/// which rank arrived last. With TDIST_TRACE_DIR set it is written there as
/// rank<R>.json when a call fails or times out and on SIGUSR1;
/// `tdist-trace DIR` merges the ranks' files and names the rank that is
/// behind.

#include <string>
#include <vector>

namespace tdist {

/// Writes the flight recorder as JSON to `path`, or, if empty, to
/// TDIST_TRACE_DIR/rank<R>.json (R: this process's global rank); returns the
/// file written. Raises DistError if neither is set or the file cannot be
/// written.
std::string dump_trace(const std::string& path = {});

/// Makes SIGUSR1 dump the flight recorder into TDIST_TRACE_DIR, else
/// ${TMPDIR:-/tmp}/tdist-trace-<parent pid>, instead of ending the process,
/// in a process a launcher started (RANK, LOCAL_RANK, or mpirun's, PMI's or
/// srun's rank variable set) or with TDIST_TRACE_DIR set. Process groups
/// do it as they are made; the Python package and the torch plugin do it
/// as they are imported. Once per process.
void handle_sigusr1();

/// The flight recorder as JSON text (what dump_trace writes).
std::string trace_json();

/// Names this copy of tdist in the files dump_trace writes without a path
/// (rank<R>.<name>.json). The torch plugin calls it with "torch": a torch
/// program may also load the Python package, which links its own copy.
void set_trace_component(const std::string& name);

/// What tdist-trace prints for the dumps of a job's ranks (their JSON
/// texts; `names[i]`, if given, names dump i in errors), per group: the last
/// call every rank completed, the first call where ranks disagree or one is
/// missing, the rank that is behind and its last call (from its own dump,
/// or from what its peers saw of it when it left none), each rank's first
/// failure, and which rank arrived last most often. Raises
/// DistInvalidArgument for text that is not a dump.
std::string summarize_traces(const std::vector<std::string>& dumps,
                             const std::vector<std::string>& names = {});

/// The dumps as one Chrome trace (JSON) that Perfetto and chrome://tracing
/// open: a process per rank, a track per group, a slice per call split into
/// "wait" (until the last rank arrived) and "transfer".
std::string chrome_trace(const std::vector<std::string>& dumps, const std::vector<std::string>& names = {});

}  // namespace tdist
