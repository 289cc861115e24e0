/*
 * Single copy for send/recv and ring AllGather between ranks of one host (host engine only; transport/fifo.h,
 * MEND_FIFO_DIRECT; host_direct.c says how the two ends agree).
 */
#ifndef MEND_DEVICE_HOST_DIRECT_H_
#define MEND_DEVICE_HOST_DIRECT_H_

#include "transport/fifo.h"

/* Producer: leave this process's pid and token in f's header (once; before posting the slot). */
void mendDirectIntroduce(struct mendFifo* f);
/* Consumer: once the producer has introduced itself, check that its memory can be read and set
 * f->directOk (1: it can, 2: not, or MEND_SHM_DIRECT=0).  rank and peer are for the log. */
void mendDirectProbe(struct mendFifo* f, int rank, int peer);
/* Consumer: copy the chunk d describes from the producer of f into dst.  0, or -1 with errno. */
int mendDirectRead(const struct mendFifo* f, void* dst, const struct mendFifoDirect* d);

#endif
