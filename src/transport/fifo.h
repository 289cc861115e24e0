/*
 * The FIFO counters shared by the two ends of a connector, in a layout that C, C++ and CUDA all
 * read: plain 64-bit words (no C11 _Atomic), each counter on its own cache line, accessed only
 * through the accessors below (GCC atomics on the host; the CUDA kernel has its own, with system
 * scope, in device/kernel_sync.h).  See transport.h for the protocol.
 */
#ifndef MEND_TRANSPORT_FIFO_H_
#define MEND_TRANSPORT_FIFO_H_

#include <stdint.h>

#define MEND_FIFO_SLOTS 8 /* slots per connector (NCCL_STEPS) */

/* A latency line (host engine, p2p and shm): a copy of a small slot's posted bytes in one cache line,
 * written before the slot's counters, with seq = the slot's tail + 1 written last (release).  A
 * consumer that sees seq == head + 1 has the slot's bytes with one cache miss instead of three (tail,
 * bytes[], the slot); one that does not look (the CUDA kernel, the proxy) reads the slot as always. */
#define MEND_FIFO_LINE_BYTES 48
struct mendFifoLine {
  uint64_t seq;                        /* tail + 1 of the slot it holds; 0: none yet */
  uint64_t bytes;                      /* its posted bytes, at most MEND_FIFO_LINE_BYTES */
  char data[MEND_FIFO_LINE_BYTES];     /* a copy of them */
};

/* Single copy (host engine, p2p and shm, host mode): a slot whose bytes[] word has MEND_FIFO_DIRECT
 * set holds a struct mendFifoDirect instead of data; the consumer reads the producer's memory itself
 * (the same process: a copy; another one: process_vm_readv) and then moves head as for any slot, and
 * the producer's work completes only once head has passed it (the data stays where the user put it
 * until then).  A producer posts one only after the consumer set directOk to 1, which it does after
 * reading, through the producer's pid, the token the producer left at directAt (device/host_direct.c). */
#define MEND_FIFO_DIRECT (1ull << 63)
struct mendFifoDirect {
  uint64_t addr;  /* where the data is in the producer's memory */
  uint64_t bytes; /* how much: the slot's byte count without the flag */
};

struct mendFifo {
  uint64_t tail;                   /* slots posted by the producer */
  char pad0[64 - sizeof(uint64_t)];
  uint64_t head;                   /* slots consumed by the consumer */
  char pad1[64 - sizeof(uint64_t)];
  uint64_t bytes[MEND_FIFO_SLOTS]; /* valid bytes in each posted slot */
  char pad2[64 - (MEND_FIFO_SLOTS * sizeof(uint64_t)) % 64];
  uint64_t want[4];                /* the consumer's signature (struct mendOpSig) of the work waiting for
                                      its first slot: where both ends share the FIFO (p2p, shm), a stalled
                                      producer that runs another operation sees the mismatch */
  uint64_t directPid;              /* producer: its process id (set before its first direct-eligible slot) */
  uint64_t directToken;            /* producer: its process's random token... */
  uint64_t directAt;               /* ...and the token's address in the producer's memory */
  uint64_t directOk;               /* consumer: 0 not probed, 1 direct slots welcome, 2 never */
  struct mendFifoLine line[MEND_FIFO_SLOTS]; /* latency lines, one per slot (cache-line aligned) */
};

#if !defined(__CUDA_ARCH__)
/* Acquire load / release store / relaxed load of a counter (host side). */
static inline uint64_t mendFifoLoad(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline uint64_t mendFifoPeek(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
static inline void mendFifoStore(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
#endif

#endif
