/* A rank for launcher_test.py (scripts/mpirun_bounded.py):
 *   launcher_rank MODE VICTIM SECONDS DIR
 * ok           every rank: MPI_Init, a barrier, MPI_Finalize
 * stall        rank VICTIM sleeps SECONDS before MPI_Init (started, never
 *              initialised); the others as `ok`
 * exit0        rank VICTIM exits 0 before MPI_Init; the others as `ok`
 * sleep        every rank: MPI_Init, then sleeps SECONDS
 * ignore_term  as `sleep`, and rank VICTIM ignores SIGTERM
 * After MPI_Init each rank creates DIR/init.<rank>. */
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int env_rank(void) {
  const char* r = getenv("OMPI_COMM_WORLD_RANK");
  if (r == NULL) r = getenv("PMIX_RANK");
  return r == NULL ? -1 : atoi(r);
}

int main(int argc, char** argv) {
  const char* mode;
  int victim, seconds, rank, fd;
  char path[4096];
  if (argc != 5) {
    fprintf(stderr, "usage: %s MODE VICTIM SECONDS DIR\n", argv[0]);
    return 2;
  }
  mode = argv[1];
  victim = atoi(argv[2]);
  seconds = atoi(argv[3]);
  if (env_rank() == victim) {
    if (strcmp(mode, "stall") == 0) {
      sleep((unsigned)seconds);
      return 0;
    }
    if (strcmp(mode, "exit0") == 0) return 0;
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  snprintf(path, sizeof path, "%s/init.%d", argv[4], rank);
  fd = open(path, O_WRONLY | O_CREAT, 0600);
  if (fd >= 0) close(fd);
  if (strcmp(mode, "sleep") == 0 || strcmp(mode, "ignore_term") == 0) {
    if (strcmp(mode, "ignore_term") == 0 && rank == victim) signal(SIGTERM, SIG_IGN);
    sleep((unsigned)seconds);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Finalize();
  return 0;
}
