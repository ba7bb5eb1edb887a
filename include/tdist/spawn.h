#pragma once

/// @file spawn.h
/// The spec's spawn utility, and the launch environment a process was started
/// with.
///
///     tdist::spawn([](int rank) {
///       auto pg = tdist::init_process_group("tdist", "env://");
///       ...
///     }, 4);
///
/// spawn() forks: call it before the process starts threads of its own (as
/// with any fork), and keep in mind that each rank begins with a copy of the
/// caller's memory.

#include <chrono>
#include <functional>
#include <string>

namespace tdist {

/// Options of spawn().
struct SpawnOptions {
  /// MASTER_ADDR given to every rank.
  std::string master_addr = "127.0.0.1";
  /// MASTER_PORT given to every rank; 0 picks a free port.
  int master_port = 0;
  /// The whole run may take at most this long; 0 means no limit. Ranks still
  /// running at the deadline are killed and DistTimeoutError is raised.
  std::chrono::milliseconds timeout{0};
  /// After the first failure the other ranks get SIGTERM, and SIGKILL if they
  /// are still running this long afterwards.
  std::chrono::milliseconds grace_period{5000};
};

/// Runs fn(rank) for rank in [0, nprocs) in nprocs forked child processes and
/// waits for all of them. Each child sees MASTER_ADDR, MASTER_PORT, RANK,
/// WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE in its environment, so
/// env:// rendezvous works inside fn. A child that returns exits 0; one that
/// throws exits 1 after sending what() to the parent.
///
/// When a rank fails (throws, exits non-zero or dies of a signal) the others
/// are stopped (SIGTERM, then SIGKILL after options.grace_period) and
/// DistError is raised naming every rank that failed on its own, how (exit
/// code or signal name) and its exception message. DistTimeoutError if
/// options.timeout passes first; DistInvalidArgument if nprocs < 1.
void spawn(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& options = {});

/// Where this process sits in its job, as the launcher that started it tells
/// it through the environment. Each field is read from the first variable
/// that is set, in this order:
///
/// - rank: RANK (tdistrun, torchrun), OMPI_COMM_WORLD_RANK (Open MPI),
///   PMI_RANK (MPICH/PMI), SLURM_PROCID (srun);
/// - world_size: WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE,
///   SLURM_STEP_NUM_TASKS, SLURM_NTASKS;
/// - local_rank: LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
///   SLURM_LOCALID;
/// - local_world_size: LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE,
///   MPI_LOCALNRANKS; under srun (rank from SLURM_PROCID), this node's entry
///   of SLURM_STEP_TASKS_PER_NODE (else SLURM_TASKS_PER_NODE), "2(x3),1"
///   meaning nodes of 2, 2, 2 and 1 tasks, picked by SLURM_NODEID (a list
///   not in that form leaves it -1).
///
/// env:// rendezvous reads rank and world size in the same order. Fields no
/// variable gives are -1. A variable that is set but not a valid number
/// raises DistInvalidArgument naming it.
struct LaunchEnvironment {
  int rank = -1;
  int world_size = -1;
  int local_rank = -1;
  int local_world_size = -1;
  /// The variable the rank came from ("RANK", "OMPI_COMM_WORLD_RANK", ...),
  /// or empty if none is set.
  std::string rank_source;
};

/// Reads the launch environment of this process (see LaunchEnvironment).
LaunchEnvironment launch_environment();

}  // namespace tdist
