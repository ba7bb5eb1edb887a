/* Peer benchmark for tools/compare: an MPI library (Debian's Open MPI, Intel
   MPI, MPICH: built with each one's mpicc).

   Measures each op the way tdist-bench does (same buffer sizes, warmup,
   `iters` back-to-back calls between two barriers, mean time on rank 0) and
   prints, on rank 0, one JSON object per row with tdist-bench's keys and
   "lib": NAME ("mpi" unless --lib says otherwise; tools/compare names Intel
   MPI's rows "impi" and MPICH's "mpich"); "errors" counts the wrong elements
   --check found over all ranks (0 without --check). float32 only.

   build: mpicc -O2 -o mpi_bench mpi_bench.c
   run:   mpirun -np N ./mpi_bench --ops all_reduce,all_gather --sizes 8,1048576
                                   [--iters N] [--warmup N] [--check] [--lib NAME] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ALL_REDUCE, BROADCAST, REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, GATHER, SCATTER, SENDRECV, BARRIER, NOPS };
static const char *kNames[NOPS] = {"all_reduce", "broadcast",  "reduce",  "all_gather", "reduce_scatter",
                                   "all_to_all", "gather",     "scatter", "sendrecv",   "barrier"};

static double bus_factor(int op, int p) {
  switch (op) {
    case ALL_REDUCE: return 2.0 * (p - 1) / p;
    case BROADCAST: case REDUCE: case SENDRECV: return 1.0;
    case BARRIER: return 0.0;
    default: return (double)(p - 1) / p;
  }
}

/* Ops whose buffer is split across ranks: the element count is rounded down
   to a multiple of the world size, as nccl-tests and tdist-bench do. */
static int is_split(int op) {
  return op == ALL_GATHER || op == REDUCE_SCATTER || op == ALL_TO_ALL || op == GATHER || op == SCATTER;
}

struct bench {
  int op, rank, p;
  long c; /* count: per rank for split ops, the whole buffer otherwise */
  float *in, *out;
};

static void run(const struct bench *b) {
  const int c = (int)b->c, next = (b->rank + 1) % b->p, prev = (b->rank + b->p - 1) % b->p;
  switch (b->op) {
    case ALL_REDUCE: MPI_Allreduce(MPI_IN_PLACE, b->in, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case BROADCAST: MPI_Bcast(b->in, c, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case REDUCE:
      /* In place on the root, as torch's and tdist's reduce are. */
      MPI_Reduce(b->rank == 0 ? MPI_IN_PLACE : b->in, b->in, c, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
      break;
    case ALL_GATHER: MPI_Allgather(b->in, c, MPI_FLOAT, b->out, c, MPI_FLOAT, MPI_COMM_WORLD); break;
    case REDUCE_SCATTER: MPI_Reduce_scatter_block(b->in, b->out, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case ALL_TO_ALL: MPI_Alltoall(b->in, c, MPI_FLOAT, b->out, c, MPI_FLOAT, MPI_COMM_WORLD); break;
    case GATHER: MPI_Gather(b->in, c, MPI_FLOAT, b->out, c, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case SCATTER: MPI_Scatter(b->in, c, MPI_FLOAT, b->out, c, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case SENDRECV:
      MPI_Sendrecv(b->in, c, MPI_FLOAT, next, 0, b->out, c, MPI_FLOAT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      break;
    case BARRIER: MPI_Barrier(MPI_COMM_WORLD); break;
  }
}

/* One run with small whole-number inputs (exact in float32 whatever the
   summation order); returns the wrong elements summed over ranks. */
static long check(const struct bench *b, long n_in, long n_out) {
  const long c = b->c, r = b->rank, p = b->p, prev = (r + p - 1) % p;
  const float tri = (float)(p * (p + 1) / 2);
  for (long k = 0; k < n_in; k++) {
    switch (b->op) {
      case ALL_REDUCE: case REDUCE: case REDUCE_SCATTER: b->in[k] = (float)((r + 1) * (k % 7 + 1)); break;
      case BROADCAST: b->in[k] = r == 0 ? (float)(k % 1000) : -1.0f; break;
      case SCATTER: b->in[k] = (float)(k / c * 1000 + k % c % 1000); break;
      case ALL_TO_ALL: b->in[k] = (float)((r * p + k / c) * 16 + k % c % 16); break;
      default: b->in[k] = (float)(r * 1000 + k % 1000); break;
    }
  }
  for (long k = 0; k < n_out; k++) b->out[k] = -1.0f;
  run(b);
  long wrong = 0;
  const float *got = b->out;
  long n = n_out;
  if (b->op == ALL_REDUCE || b->op == BROADCAST || (b->op == REDUCE && r == 0)) got = b->in, n = n_in;
  if (b->op == REDUCE && r != 0) n = 0;
  for (long k = 0; k < n; k++) {
    float want = 0;
    switch (b->op) {
      case ALL_REDUCE: case REDUCE: want = tri * (float)(k % 7 + 1); break;
      case REDUCE_SCATTER: want = tri * (float)((r * c + k) % 7 + 1); break;
      case BROADCAST: want = (float)(k % 1000); break;
      case ALL_GATHER: case GATHER: want = (float)(k / c * 1000 + k % c % 1000); break;
      case SCATTER: want = (float)(r * 1000 + k % 1000); break;
      case ALL_TO_ALL: want = (float)(((k / c) * p + r) * 16 + k % c % 16); break;
      case SENDRECV: want = (float)(prev * 1000 + k % 1000); break;
    }
    if (got[k] != want) wrong++;
  }
  memset(b->in, 0, sizeof(float) * (size_t)n_in);
  memset(b->out, 0, sizeof(float) * (size_t)n_out);
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return wrong;
}

static int find_op(const char *name) {
  for (int i = 0; i < NOPS; i++)
    if (!strcmp(name, kNames[i])) return i;
  return -1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  const char *ops = "all_reduce", *sizes = "8,1024,65536,1048576", *lib = "mpi";
  int iters = 20, warmup = 5, do_check = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ops") && i + 1 < argc) ops = argv[++i];
    else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--check")) do_check = 1;
    else if (!strcmp(argv[i], "--lib") && i + 1 < argc) lib = argv[++i];
    else {
      if (rank == 0) fprintf(stderr, "mpi_bench: unknown argument %s\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (iters < 1) iters = 1;
  char *op_list = strdup(ops), *save_op = NULL;
  for (char *name = strtok_r(op_list, ",", &save_op); name; name = strtok_r(NULL, ",", &save_op)) {
    const int op = find_op(name);
    if (op < 0) {
      if (rank == 0) fprintf(stderr, "mpi_bench: unknown op %s\n", name);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (op == SENDRECV && p < 2) continue;
    char *size_list = strdup(op == BARRIER ? "0" : sizes), *save_size = NULL;
    for (char *s = strtok_r(size_list, ",", &save_size); s; s = strtok_r(NULL, ",", &save_size)) {
      const long requested = atol(s);
      const long split = is_split(op) ? p : 1;
      struct bench b = {op, rank, p, requested / 4 / split, NULL, NULL};
      const long nbytes = b.c * 4 * split;
      if (op != BARRIER && nbytes == 0) continue;
      long n_in = b.c, n_out = 0;
      switch (op) {
        case ALL_GATHER: n_out = b.c * p; break;
        case GATHER: n_out = rank == 0 ? b.c * p : 0; break;
        case REDUCE_SCATTER: n_in = b.c * p; n_out = b.c; break;
        case SCATTER: n_in = rank == 0 ? b.c * p : 0; n_out = b.c; break;
        case ALL_TO_ALL: n_in = n_out = b.c * p; break;
        case SENDRECV: n_out = b.c; break;
      }
      /* calloc: zeroed and, once touched below, faulted in before timing. */
      b.in = calloc((size_t)n_in + 1, sizeof(float));
      b.out = calloc((size_t)n_out + 1, sizeof(float));
      memset(b.in, 0, sizeof(float) * (size_t)n_in);
      memset(b.out, 0, sizeof(float) * (size_t)n_out);
      /* 0 without --check, as tdist-bench prints (docs/benchmark.md). */
      const long errors = do_check ? check(&b, n_in, n_out) : 0;
      for (int i = 0; i < warmup; i++) run(&b);
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iters; i++) run(&b);
      MPI_Barrier(MPI_COMM_WORLD);
      const double dt = (MPI_Wtime() - t0) / iters, algbw = nbytes / dt / 1e9;
      if (rank == 0) {
        printf("{\"lib\": \"%s\", \"op\": \"%s\", \"dtype\": \"float32\", \"world_size\": %d, \"bytes\": %ld, "
               "\"time_us\": %.3f, \"algbw_GBps\": %.6g, \"busbw_GBps\": %.6g, \"errors\": %ld}\n",
               lib, kNames[op], p, nbytes, dt * 1e6, algbw, algbw * bus_factor(op, p), errors);
        fflush(stdout);
      }
      free(b.in);
      free(b.out);
    }
    free(size_list);
  }
  free(op_list);
  MPI_Finalize();
  return 0;
}
