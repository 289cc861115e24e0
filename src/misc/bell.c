#include "misc/bell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* A ring bumps the count and clears the waiter bit in one compare-and-swap; only a ring that found
 * the bit set pays for the wake system call.  Most rings find nobody asleep (the peer is spinning or
 * busy), so a hop costs a few atomics instead of a syscall. */
void mendBellRing(mendBell_t* bell) {
  uint32_t old = atomic_load_explicit(bell, memory_order_relaxed), next;
  do {
    next = (old + 1) & MEND_BELL_COUNT;
  } while (!atomic_compare_exchange_weak_explicit(bell, &old, next, memory_order_acq_rel, memory_order_relaxed));
  if (old & MEND_BELL_WAITER) syscall(SYS_futex, (uint32_t*)bell, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* The waiter publishes the waiter bit before it sleeps and sleeps only on the word it published, so a
 * ring between the two makes the futex return at once (the word changed): no wake is lost. */
void mendBellWait(mendBell_t* bell, uint32_t seen, int64_t timeoutUs) {
  if (timeoutUs <= 0) return;
  uint32_t cur = atomic_load_explicit(bell, memory_order_acquire);
  for (;;) {
    if ((cur & MEND_BELL_COUNT) != (seen & MEND_BELL_COUNT)) return;
    if (cur & MEND_BELL_WAITER) break;
    if (atomic_compare_exchange_weak_explicit(bell, &cur, cur | MEND_BELL_WAITER, memory_order_acq_rel,
                                              memory_order_acquire)) {
      cur |= MEND_BELL_WAITER;
      break;
    }
  }
  struct timespec ts = { .tv_sec = timeoutUs / 1000000, .tv_nsec = (timeoutUs % 1000000) * 1000 };
  /* EAGAIN (value changed), EINTR and ETIMEDOUT all mean "look again". */
  syscall(SYS_futex, (uint32_t*)bell, FUTEX_WAIT, cur, &ts, NULL, 0);
}
