/*
 * Communicator lifecycle internals, shared by the init phase files (init.c, init_config.c,
 * init_peers.c, comm.c, comm_split.c, comm_destroy.c).  C only; no _Atomic fields here, so C++
 * unit tests can include it.
 *
 * Creation runs as a job: validate arguments -> allocate the comm (state INITIALIZING) -> [job:
 * bootstrap -> peer info and host layout -> transports -> READY].  The job runs inline (blocking),
 * in a thread of its own (non-blocking), or at ncclGroupEnd (inside a group).
 */
#ifndef MEND_INIT_H_
#define MEND_INIT_H_

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ncclComm;
struct mendConfig;
struct mendBootstrap;

/* init_config.c: ncclConfig_t acceptance (ABI facts 3.3).  user == NULL: inherit `parent` when
 * non-NULL, else defaults with environment overrides.  WARN + ncclInvalidArgument on bad input. */
ncclResult_t mendConfigParse(const ncclConfig_t* user, const struct mendConfig* parent, struct mendConfig* out);

/* comm.c */
/* A communicator shell: magic, rank, nRanks, config, state INITIALIZING, asyncResult ncclInProgress. */
ncclResult_t mendCommAlloc(struct ncclComm** out, int nRanks, int rank, const struct mendConfig* config);
/* Free the memory of a communicator whose layers are already down. */
void mendCommFree(struct ncclComm* comm);
/* Run a creation job for `comm` as its config and the group depth say; takes ownership of arg.
 * Returns what the caller of the API returns (ncclInProgress for a non-blocking comm). */
ncclResult_t mendCommLaunchJob(struct ncclComm* comm, ncclResult_t (*fn)(void* arg), void* arg,
                               void (*freeArg)(void* arg));
/* Wait (bounded by `ms`, < 0: no bound) for a non-blocking creation thread; 1 when joined. */
int mendCommJoinInitThread(struct ncclComm* comm, int64_t ms);

/* init_peers.c */
/* Host-mode device detection: cudaDev = -1, hostMode = 1 (CUDA detection will live here). */
ncclResult_t mendInitDetectDevice(struct ncclComm* comm);
/* After the bootstrap: allgather peer info, host layout (node, localRank...), commHash, transports,
 * state READY.  Used by init, split and shrink alike. */
ncclResult_t mendInitFinish(struct ncclComm* comm);
/* init_links.c: a bootstrap link between every pair of ranks (up to 512 ranks), so that every rank
 * sees a lost process at once, not only the ranks its bootstrap happened to connect. */
ncclResult_t mendInitLinkAll(struct ncclComm* comm);
/* Mark a creation job's outcome: READY + ncclSuccess, or FAILED + the error. */
void mendInitSetOutcome(struct ncclComm* comm, ncclResult_t res);

/* comm_grow.c: retire the unused grow id of a communicator being torn down (its root stops). */
void mendCommGrowRelease(struct ncclComm* comm);

/* init.c: once per process, before the first communicator (version banner, unknown variables). */
void mendInitOnce(void);
/* init.c: n host-mode ranks of a communicator of the library's own (ncclCommInitAll's way: one
 * thread each), which measure no cost-model constants at their init (calib_measure.c uses them). */
ncclResult_t mendCommInitInner(ncclComm_t* comms, int n);

/* comm_destroy.c */
/* Release every layer: orderly (abort == 0) or at once (abort == 1), then the memory. */
ncclResult_t mendCommTeardown(struct ncclComm* comm, int abort);

/* Stop in-flight work for good (ncclCommRevoke, ncclCommShrink with NCCL_SHRINK_ABORT): set the abort
 * flag, wait (bounded) until operations on other threads returned, then keep the bootstrap usable for
 * split and shrink. */
void mendCommStopInflight(struct ncclComm* comm, const char* api);

/* mem.c: registrations left by a communicator being destroyed. */
void mendMemReleaseComm(struct ncclComm* comm);

/* For unit tests (C++ cannot read struct ncclComm's atomics). */
struct mendBootstrap* mendCommBootstrap(struct ncclComm* comm);
void mendCommSetAbortFlag(struct ncclComm* comm, int value);
/* Wait for comm's kernels (device mode) to finish: MEND_ABORT_TIMEOUT when aborting (they stop at
 * the flag), MEND_DRAIN_TIMEOUT_MS otherwise.  0 (with a WARN) when some still run. */
int mendCommQuiesce(struct ncclComm* comm, int abort);
int mendCommState(struct ncclComm* comm);

#ifdef __cplusplus
}
#endif

#endif
