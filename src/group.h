/*
 * Groups (ncclGroupStart/End).  Collectives and send/recv issued inside a group are planned and run
 * together at ncclGroupEnd; communicator creation inside a group (several ncclCommInitRank from one
 * thread) is deferred to ncclGroupEnd and run as jobs, one thread each, so the inits meet.
 */
#ifndef MEND_GROUP_H_
#define MEND_GROUP_H_

#include "nccl.h"

struct ncclComm;

/* Depth of the calling thread's group nesting (0: not in a group). */
int mendGroupDepth(void);
/* Run fn(arg) for `comm` at the end of the current group, in its own thread, together with the
 * other jobs of the group.  Outside a group the caller runs it directly.  The job's result becomes
 * comm->asyncResult; ncclGroupEnd returns the first failure (or ncclInProgress for a non-blocking
 * comm whose job still runs). freeArg (may be NULL) releases arg after the job. */
ncclResult_t mendGroupAddJob(struct ncclComm* comm, ncclResult_t (*fn)(void* arg), void* arg,
                             void (*freeArg)(void* arg));

/* ---- collectives and send/recv (group.c) ---- */
struct mendOp;
/* Queue a checked operation: inside a group it runs at the outermost ncclGroupEnd (with every
 * other op of the group, all communicators together), outside it runs now as a group of one. */
ncclResult_t mendGroupEnqueue(const struct mendOp* op);
/* An API call inside a group failed: ncclGroupEnd returns this error and drops the group's
 * operations (as NCCL does).  Outside a group it does nothing. */
void mendGroupSetError(ncclResult_t res);
/* ncclCommAbort inside a group: drop the operations this thread's open group queued on comm (they
 * would run on a freed communicator) and make the outermost ncclGroupEnd report ncclInvalidUsage
 * after running the other communicators' operations.  Returns how many were dropped. */
int mendGroupDropComm(struct ncclComm* comm);

#endif
