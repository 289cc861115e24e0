#include "misc/bell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void mendBellRing(mendBell_t* bell) {
  atomic_fetch_add_explicit(bell, 1, memory_order_acq_rel);
  syscall(SYS_futex, (uint32_t*)bell, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

void mendBellWait(mendBell_t* bell, uint32_t seen, int64_t timeoutUs) {
  if (timeoutUs <= 0 || atomic_load_explicit(bell, memory_order_acquire) != seen) return;
  struct timespec ts = { .tv_sec = timeoutUs / 1000000, .tv_nsec = (timeoutUs % 1000000) * 1000 };
  /* EAGAIN (value changed), EINTR and ETIMEDOUT all mean "look again". */
  syscall(SYS_futex, (uint32_t*)bell, FUTEX_WAIT, seen, &ts, NULL, 0);
}
