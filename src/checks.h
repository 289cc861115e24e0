/*
 * One status type (ncclResult_t) inside and out, one family of check macros.
 * The function that first sees an error logs it (WARN with the cause); callers pass the code up
 * silently with MENDCHECK / MENDCHECKGOTO.
 */
#ifndef MEND_CHECKS_H_
#define MEND_CHECKS_H_

#include <errno.h>
#include "nccl.h"
#include "misc/debug.h"

/* Propagate a failure to the caller. */
#define MENDCHECK(call) do {                                   \
    ncclResult_t mendRes_ = (call);                            \
    if (mendRes_ != ncclSuccess) return mendRes_;              \
  } while (0)

/* Record the failure in `res` and jump to a cleanup label named for what it undoes. */
#define MENDCHECKGOTO(call, res, label) do {                   \
    (res) = (call);                                            \
    if ((res) != ncclSuccess) goto label;                      \
  } while (0)

/* A syscall returning -1 on error (retried on EINTR); logs errno and returns ncclSystemError. */
#define SYSCHECK(call, name) do {                              \
    int sysRes_;                                               \
    do { sysRes_ = (int)(call); } while (sysRes_ == -1 && errno == EINTR); \
    if (sysRes_ == -1) {                                       \
      WARN("Call to " name " failed: %m");                     \
      return ncclSystemError;                                  \
    }                                                          \
  } while (0)

#define SYSCHECKGOTO(call, name, res, label) do {              \
    int sysRes_;                                               \
    do { sysRes_ = (int)(call); } while (sysRes_ == -1 && errno == EINTR); \
    if (sysRes_ == -1) {                                       \
      WARN("Call to " name " failed: %m");                     \
      (res) = ncclSystemError;                                 \
      goto label;                                              \
    }                                                          \
  } while (0)

/* A pthread_* call returning an error number. */
#define PTHREADCHECK(call, name) do {                          \
    int ptRes_ = (call);                                       \
    if (ptRes_ != 0) {                                         \
      errno = ptRes_;                                          \
      WARN("Call to " name " failed: %m");                     \
      return ncclSystemError;                                  \
    }                                                          \
  } while (0)

/* Argument checks at the API boundary: WARN naming the problem, return the code. */
#define MENDARGCHECK(cond, code, ...) do {                     \
    if (!(cond)) { WARN(__VA_ARGS__); return (code); }         \
  } while (0)

#endif
