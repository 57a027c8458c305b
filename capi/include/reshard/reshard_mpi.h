/*
 * reshard_mpi.h — executors over MPI (C ABI 1.1). Optional: include it
 * beside reshard.h to execute plans across the ranks of an MPI
 * communicator, on host memory. Plain C11; it does not include mpi.h, and
 * libreshard.so.1 does not link MPI: the MPI backend (libreshard_mpi.so.1,
 * built against Open MPI) is loaded on first use.
 *
 *   #include <mpi.h>
 *   #include <reshard/reshard.h>
 *   #include <reshard/reshard_mpi.h>
 *
 *   reshard_mpi_executor_options_t o = RESHARD_MPI_EXECUTOR_OPTIONS_INIT;
 *   o.comm_kind = RESHARD_MPI_COMM_FORTRAN;
 *   o.comm = MPI_Comm_c2f(my_comm);          // an MPI_Fint: a plain int
 *   reshard_executor_t* ex;
 *   reshard_mpi_executor_create(&o, &ex);    // collective over my_comm
 *   // plan process p = rank p of my_comm; plan each rank's part:
 *   //   request.scope = RESHARD_PLAN_SCOPE_PROCESS; request.process = rank;
 *   reshard_executor_execute(ex, plan, buffers, n);  // collective
 *   reshard_executor_destroy(ex);            // before MPI_Finalize
 *
 * HOW THE COMMUNICATOR CROSSES. The caller passes MPI_Comm_c2f(comm), the
 * communicator's Fortran handle (MPI_Fint), not the MPI_Comm itself:
 *  - MPI_Comm's type differs between MPI implementations (a pointer to a
 *    struct in Open MPI, an int in MPICH and its derivatives) and this
 *    header cannot name it without mpi.h; MPI_Fint is an int in both, so
 *    the options struct has one layout everywhere;
 *  - the conversion back (MPI_Comm_f2c) happens inside reshard with the
 *    MPI library loaded in the process, the one whose communicators the
 *    handle refers to; a handle that names no live communicator is an
 *    error, never a dereference of caller memory (a pointer to an MPI_Comm
 *    of another implementation would be);
 *  - a process holds one MPI library: the caller's MPI and the backend's
 *    must be the same (Open MPI, for the Debian build). When they differ,
 *    the backend's MPI is not initialised even though the caller's is, and
 *    creation fails with INVALID_ARGUMENT saying so instead of mixing two
 *    MPI libraries.
 *
 * The executor duplicates the communicator (MPI_Comm_idup under the
 * deadline), so reshard's messages never mix with the caller's; the caller
 * may free its communicator after creation. Destroy the executor before
 * MPI_Finalize.
 *
 * Errors, ownership and struct rules are those of reshard.h.
 */
#ifndef RESHARD_RESHARD_MPI_H_
#define RESHARD_RESHARD_MPI_H_

#include "reshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which communicator an MPI executor runs on. */
typedef int32_t reshard_mpi_comm_kind_t;
enum {
  /* MPI_COMM_WORLD. If MPI is not initialised, reshard initialises it
   * (MPI_Init_thread, MPI_THREAD_SERIALIZED) unless `initialize` is 0, and
   * finalises it at process exit. */
  RESHARD_MPI_COMM_WORLD = 0,
  /* The communicator whose Fortran handle (MPI_Comm_c2f) is in `comm`. MPI
   * must be initialised by the caller. */
  RESHARD_MPI_COMM_FORTRAN = 1
};

/* Options of reshard_mpi_executor_create. */
typedef struct reshard_mpi_executor_options {
  size_t struct_size;
  reshard_mpi_comm_kind_t comm_kind; /* default RESHARD_MPI_COMM_WORLD */
  /* MPI_Comm_c2f(comm) when comm_kind is RESHARD_MPI_COMM_FORTRAN (an
   * MPI_Fint: an int in Open MPI and MPICH); ignored otherwise. */
  int32_t comm;
  /* Non-zero (default): with RESHARD_MPI_COMM_WORLD, initialise MPI if the
   * caller has not. 0: an uninitialised MPI is INVALID_ARGUMENT. */
  int32_t initialize;
  /* Batches (one round's messages with at most two peers) in flight at
   * once, >= 1; default 8. */
  int32_t max_batches_in_flight;
  /* The longest wait for any one step, in seconds (> 0, default 300):
   * duplicating the communicator at creation; in execute, the agreement,
   * one batch of transfers, the final flush. On expiry: TIMEOUT naming the
   * ranks still missing. */
  double timeout_seconds;
  reshard_agreement_t agreement; /* default RESHARD_AGREEMENT_FIRST_USE */
  reshard_packing_t packing;     /* default RESHARD_PACKING_AUTO (gathers) */
  /* Non-zero (default): rounds and stages overlap: a batch starts once
   * what it reads has arrived and its staging is free (a relay forwards
   * round r while it receives round r+1; round r+1 is packed while round r
   * is in flight, when both fit the plan's staging budget,
   * reshard_plan_options_t). Zero: each round starts after the previous
   * one (of every stage) completed. */
  int32_t overlap;
  int32_t reserved0; /* set to 0; keeps the struct free of tail padding */
  /* The backend library to load: a file name or path (copied). NULL: the
   * default search ($RESHARD_BACKEND_DIR, next to libreshard.so.1 and its
   * ../lib, next to the executable and its ../lib, the dynamic linker's
   * path). */
  const char* library;
} reshard_mpi_executor_options_t;

#define RESHARD_MPI_EXECUTOR_OPTIONS_INIT                                           \
  {                                                                                 \
    sizeof(reshard_mpi_executor_options_t), RESHARD_MPI_COMM_WORLD, 0, 1, 8, 300.0, \
        RESHARD_AGREEMENT_FIRST_USE, RESHARD_PACKING_AUTO, 1, 0, NULL               \
  }

/* Creates an executor over MPI (RESHARD_TRANSPORT_MPI; NULL options:
 * defaults, MPI_COMM_WORLD). Collective over the communicator: every rank
 * calls it. The executor's rank and size are the communicator's
 * (reshard_executor_info); plan process p is rank p. Execute with
 * reshard_executor_execute (reshard.h: distributed executors).
 * Errors: INVALID_ARGUMENT naming the field ("options->struct_size: ...",
 * "options->comm_kind: invalid value 7", "options->comm: 2 is not a live
 * communicator (MPI_Comm_f2c gives MPI_COMM_NULL)", "options->comm: MPI is
 * not initialised", "options->timeout_seconds: ..."), UNSUPPORTED (the
 * backend or Open MPI's run-time libraries cannot be loaded: the message
 * says what to install; reshard_transport_available asks beforehand),
 * TIMEOUT (not every rank created the executor in time), TRANSPORT (MPI
 * reported an error), OUT_OF_MEMORY. */
RESHARD_API reshard_error_t* reshard_mpi_executor_create(
    const reshard_mpi_executor_options_t* options, reshard_executor_t** out_executor);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RESHARD_RESHARD_MPI_H_ */
