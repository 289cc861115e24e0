/*
 * Pieces shared by every Net back end.
 */
#include "transport/net.h"

#include "checks.h"

/* Ops-table members a back end does not implement point here (never NULL), so a caller that
 * reaches one gets a clear error instead of a crash. */
ncclResult_t mendNetNotSupported(void) {
  WARN("NET: operation not supported by this net");
  return ncclInternalError;
}
