/*
 * Doorbells: a 32-bit futex word a waiter sleeps on and a producer rings after it advanced a
 * counter the waiter cares about.  Shared (not PRIVATE) futexes, so a bell in a shared-memory
 * segment wakes a waiter in another process.  Waits spin briefly, then block with a time bound:
 * 8 ranks on 2 cores still progress, and no wait can outlive an abort.
 */
#ifndef MEND_MISC_BELL_H_
#define MEND_MISC_BELL_H_

#include <stdatomic.h>
#include <stdint.h>

typedef _Atomic uint32_t mendBell_t;

#define MEND_BELL_COUNT 0x7fffffffu  /* the ring count: the low 31 bits of the word */
#define MEND_BELL_WAITER 0x80000000u /* set by a waiter before it sleeps: the next ring must wake */
/* A bell page (transport.c) also holds, one cache line after the word, the CPU its owner's engine last
 * ran on, plus one (0: not known; transport/spread.c). */
#define MEND_BELL_CPU_OFFSET 64

/* Bump the bell and wake every waiter on it (no system call when nobody sleeps on it). */
void mendBellRing(mendBell_t* bell);
/* Sleep while *bell == seen, at most timeoutUs microseconds (0: do not sleep). */
void mendBellWait(mendBell_t* bell, uint32_t seen, int64_t timeoutUs);
/* The ring count now, to pass to mendBellWait as `seen` after looking at what the bell guards. */
static inline uint32_t mendBellRead(mendBell_t* bell) {
  return atomic_load_explicit(bell, memory_order_acquire) & MEND_BELL_COUNT;
}

#endif
