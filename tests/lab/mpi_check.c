/* The project's own MPI program, run by tests/lab/hpc_test.cpp over vfab's drop-in
 * libibverbs under Open MPI (pml ucx) and MPICH (ch4:ucx): unlike the vendors' benchmarks it
 * checks every result (each byte of each ping-pong message, collectives, one-sided), so a
 * transport that moves the wrong bytes fails instead of just being fast. It prints one line per
 * measurement or check that a test can parse:
 *   mpi_check ranks=N library=...           (rank 0)    rank R host=H pid=P   (every rank)
 *   pingpong size=B iters=N latency_us=L bandwidth_MBps=W                       (rank 0)
 *   check NAME ok (rank 0, once all ranks passed) | check NAME FAILED: WHAT (any rank, then
 *   MPI_Abort(1))                                  mpi_check: all checks passed  (rank 0)
 * Ping-pong runs between rank 0 and the last rank. --fail-rank R --fail-after S has rank R
 * SIGKILL itself after S seconds of ring traffic, for the test that the job then ends.
 *   mpi_check [--sizes MAX] [--iters N] [--only-pingpong] [--fail-rank R --fail-after S] */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, nranks;

/* MPI_Abort is not declared noreturn; exit() makes these so for the compiler. */
static _Noreturn void failed(const char *name, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("check %s FAILED: rank %d: ", name, rank);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

/* Every rank got here without failing (a failing rank aborts before the barrier). */
static void passed(const char *name) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    printf("check %s ok\n", name);
    fflush(stdout);
  }
}

/* Every rank sees the same arguments; rank 0 reports and aborts, the others wait for that
 * (so that their own abort does not end the job before rank 0's message is out). */
static _Noreturn void usage_exit(const char *why) {
  if (rank != 0) MPI_Barrier(MPI_COMM_WORLD);
  fprintf(stderr, "mpi_check: %s\nusage: mpi_check [--sizes MAX] [--iters N] [--only-pingpong] "
                  "[--fail-rank R --fail-after S]\n", why);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

static long parse_long(const char *opt, const char *s, long min, long max) {
  char *end;
  long v;
  if (!s) usage_exit("option needs a value");
  v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < min || v > max) {
    if (rank == 0) fprintf(stderr, "mpi_check: bad value for %s: %s\n", opt, s);
    usage_exit("bad option value");
  }
  return v;
}

static unsigned char pattern(size_t size, int iter, int r, size_t k) {
  return (unsigned char)(k * 131u + (k >> 8) + size * 7u + (unsigned)iter * 17u + (unsigned)r * 29u);
}

static void fill(unsigned char *buf, size_t size, int iter, int r) {
  for (size_t k = 0; k < size; k++) buf[k] = pattern(size, iter, r, k);
}

static void verify(const char *name, const unsigned char *buf, size_t size, int iter, int r) {
  for (size_t k = 0; k < size; k++)
    if (buf[k] != pattern(size, iter, r, k))
      failed(name, "size=%zu iter=%d from rank %d: byte %zu is 0x%02x, want 0x%02x", size, iter,
             r, k, buf[k], pattern(size, iter, r, k));
}

/* Rank 0 <-> the last rank; iteration 0 is an untimed warm-up. Each side fills its next
 * message before the timed part and verifies the received one after it. */
static void pingpong(size_t max, int iters_arg) {
  const int peer = nranks - 1;
  unsigned char *sbuf = malloc(max), *rbuf = malloc(max);
  if (!sbuf || !rbuf) failed("pingpong", "out of memory for %zu bytes", max);
  for (size_t size = 1; size <= max; size = (size < max && size * 2 > max) ? max : size * 2) {
    int iters = iters_arg;
    if (size >= 16384) {
      int fewer = iters_arg / 10 > 5 ? iters_arg / 10 : 5;
      if (fewer < iters) iters = fewer;
    }
    double total = 0;
    if (rank == 0 || rank == peer) {
      for (int it = 0; it <= iters; it++) {
        fill(sbuf, size, it, rank);
        double t0 = MPI_Wtime();
        if (rank == 0) {
          MPI_Send(sbuf, (int)size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
          MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(rbuf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(sbuf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD);
        }
        if (it > 0) total += MPI_Wtime() - t0;
        verify("pingpong", rbuf, size, it, rank == 0 ? peer : 0);
      }
    }
    if (rank == 0) {
      double lat_us = total / iters / 2 * 1e6;
      printf("pingpong size=%zu iters=%d latency_us=%.2f bandwidth_MBps=%.2f\n", size, iters,
             lat_us, lat_us > 0 ? (double)size / lat_us : 0.0);
      fflush(stdout);
    }
    if (size == max) break;
  }
  free(sbuf);
  free(rbuf);
  passed("pingpong");
}

static void allreduce(void) {
  enum { N = 1000 };
  int64_t in[N], out[N];
  double din[N], dout[N];
  for (int i = 0; i < N; i++) in[i] = (int64_t)rank * 1000 + i;
  MPI_Allreduce(in, out, N, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < N; i++) {
    int64_t want = (int64_t)1000 * nranks * (nranks - 1) / 2 + (int64_t)nranks * i;
    if (out[i] != want)
      failed("allreduce_sum_int64", "element %d is %lld, want %lld", i, (long long)out[i],
             (long long)want);
  }
  passed("allreduce_sum_int64");
  /* The largest value of each element comes from a different rank. */
  for (int i = 0; i < N; i++) din[i] = ((rank + i) % nranks) * 1.5 + i;
  MPI_Allreduce(din, dout, N, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  for (int i = 0; i < N; i++) {
    double want = (nranks - 1) * 1.5 + i;
    if (dout[i] != want) failed("allreduce_max_double", "element %d is %g, want %g", i, dout[i], want);
  }
  passed("allreduce_max_double");
}

static void alltoall(void) {
  enum { PER = 256 };
  int32_t *s = malloc(sizeof(int32_t) * PER * nranks), *r = malloc(sizeof(int32_t) * PER * nranks);
  if (!s || !r) failed("alltoall_int32", "out of memory");
  for (int p = 0; p < nranks; p++)
    for (int j = 0; j < PER; j++) {
      s[p * PER + j] = rank * 1000000 + p * 1000 + j;
      r[p * PER + j] = -1;
    }
  MPI_Alltoall(s, PER, MPI_INT32_T, r, PER, MPI_INT32_T, MPI_COMM_WORLD);
  for (int q = 0; q < nranks; q++)
    for (int j = 0; j < PER; j++) {
      int32_t want = q * 1000000 + rank * 1000 + j;
      if (r[q * PER + j] != want)
        failed("alltoall_int32", "element %d from rank %d is %d, want %d", j, q,
               (int)r[q * PER + j], (int)want);
    }
  free(s);
  free(r);
  passed("alltoall_int32");
}

static void bcast(void) {
  const size_t size = 1u << 20;
  unsigned char *buf = malloc(size);
  if (!buf) failed("bcast_1MiB", "out of memory");
  if (rank == 0) fill(buf, size, 0, 0);
  else memset(buf, 0xee, size);
  MPI_Bcast(buf, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
  verify("bcast_1MiB", buf, size, 0, 0);
  free(buf);
  passed("bcast_1MiB");
}

/* Window of 1024 int32: element 0 takes the accumulates, 64..127 the neighbour's put. */
static void one_sided(void) {
  enum { WIN = 1024, PUT = 64, AT = 64 };
  static int32_t win_buf[WIN];
  int32_t origin[PUT], one = 1;
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  MPI_Win win;
  memset(win_buf, 0, sizeof win_buf);
  MPI_Win_create(win_buf, sizeof win_buf, sizeof(int32_t), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  for (int k = 0; k < PUT; k++) origin[k] = rank * 10000 + k;
  MPI_Win_fence(0, win);
  MPI_Put(origin, PUT, MPI_INT32_T, next, AT, PUT, MPI_INT32_T, win);
  MPI_Win_fence(0, win);
  for (int k = 0; k < WIN; k++) {
    int32_t want = (k >= AT && k < AT + PUT) ? prev * 10000 + (k - AT) : 0;
    if (win_buf[k] != want)
      failed("put", "window element %d is %d, want %d (put from rank %d)", k, (int)win_buf[k],
             (int)want, prev);
  }
  passed("put");
  MPI_Accumulate(&one, 1, MPI_INT32_T, 0, 0, 1, MPI_INT32_T, MPI_SUM, win);
  MPI_Win_fence(0, win);
  if (rank == 0 && win_buf[0] != nranks)
    failed("accumulate", "element 0 of rank 0's window is %d, want %d", (int)win_buf[0], nranks);
  passed("accumulate");
  MPI_Win_free(&win);
}

/* Ring traffic (each rank exchanges with both neighbours, data checked) until fail_rank kills
 * itself after `after` seconds; the MPI runtime must then end the job. */
static void fail_run(int fail_rank, double after) {
  enum { SIZE = 4096 };
  static unsigned char s[SIZE], r[SIZE];
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  const double start = MPI_Wtime();
  if (rank == fail_rank) {
    printf("rank %d will kill itself after %.0f s\n", rank, after);
    fflush(stdout);
  }
  for (int it = 0;; it++) {
    if (rank == fail_rank && MPI_Wtime() - start >= after) {
      printf("rank %d: raising SIGKILL after %d exchanges\n", rank, it);
      fflush(stdout);
      raise(SIGKILL);
    }
    if (MPI_Wtime() - start > after + 600) {
      fprintf(stderr, "mpi_check: rank %d still running %.0f s after rank %d was to die\n", rank,
              MPI_Wtime() - start - after, fail_rank);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    fill(s, SIZE, it & 0xffff, rank);
    MPI_Sendrecv(s, SIZE, MPI_BYTE, next, 7, r, SIZE, MPI_BYTE, prev, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    verify("fail_traffic", r, SIZE, it & 0xffff, prev);
  }
}

int main(int argc, char **argv) {
  long max = 65536, iters = 100, fail_rank = -1;
  double fail_after = -1;
  int only_pingpong = 0, len;
  char lib[MPI_MAX_LIBRARY_VERSION_STRING], host[MPI_MAX_PROCESSOR_NAME];

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sizes")) max = parse_long(argv[i], argv[i + 1], 1, 1L << 30), i++;
    else if (!strcmp(argv[i], "--iters")) iters = parse_long(argv[i], argv[i + 1], 1, 1L << 24), i++;
    else if (!strcmp(argv[i], "--only-pingpong")) only_pingpong = 1;
    else if (!strcmp(argv[i], "--fail-rank")) fail_rank = parse_long(argv[i], argv[i + 1], 0, 1L << 20), i++;
    else if (!strcmp(argv[i], "--fail-after")) fail_after = (double)parse_long(argv[i], argv[i + 1], 0, 3600), i++;
    else {
      if (rank == 0) fprintf(stderr, "mpi_check: unknown argument %s\n", argv[i]);
      usage_exit("unknown argument");
    }
  }
  if (nranks < 2) {
    fprintf(stderr, "mpi_check: needs at least 2 ranks, got %d\n", nranks);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if ((fail_rank >= 0) != (fail_after >= 0)) usage_exit("--fail-rank and --fail-after go together");
  if (fail_rank >= nranks) usage_exit("--fail-rank is not a rank of this job");

  MPI_Get_library_version(lib, &len);
  lib[strcspn(lib, "\n")] = '\0';
  for (char *c = lib; *c; c++)
    if (*c == '\t' || *c == '\r') *c = ' ';
  MPI_Get_processor_name(host, &len);
  if (rank == 0) {
    printf("mpi_check ranks=%d library=%s\n", nranks, lib);
    fflush(stdout);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  printf("rank %d host=%s pid=%ld\n", rank, host, (long)getpid());
  fflush(stdout);
  MPI_Barrier(MPI_COMM_WORLD);

  if (fail_rank >= 0) fail_run((int)fail_rank, fail_after);   /* does not return */

  pingpong((size_t)max, (int)iters);
  if (!only_pingpong) {
    allreduce();
    alltoall();
    bcast();
    one_sided();
  }
  if (rank == 0) {
    printf("mpi_check: all checks passed\n");
    fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
