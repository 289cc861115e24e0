/*
 * Single copy for send/recv and ring AllGather between ranks of one host (transport/fifo.h,
 * MEND_FIFO_DIRECT; which steps: host_engine.c, directSend): the producer leaves a large chunk where
 * it is and posts its address; the consumer copies it into place itself.  Through a FIFO a chunk
 * costs two copies (into the slot, out of it), this way one.
 *
 * Who may read whom is settled per connector, once, by the consumer: the producer writes its pid,
 * a random token of its process and the token's address into the FIFO header before its first
 * direct-eligible slot; the consumer reads that address in the producer's process (process_vm_readv, or
 * its own memory when it is the same process) and welcomes direct slots (directOk = 1) only when
 * the token is there.  A read the kernel refuses (ptrace rules: Yama's ptrace_scope, other users,
 * other PID namespaces) or a token that does not match (a pid that names another process) leaves
 * directOk = 2 and the copies as before.
 */
#include "device/host_direct.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "misc/debug.h"
#include "misc/fault.h"
#include "misc/mac.h"
#include "misc/param.h"

static uint64_t token; /* this process's token; its address goes to consumers */
static pthread_once_t tokenOnce = PTHREAD_ONCE_INIT;

static void tokenInit(void) {
  uint64_t t = 0;
  (void)mendRandomBytes(&t, sizeof t); /* its fallback (time and pid) still tells processes apart */
  __atomic_store_n(&token, t ? t : 0x6d656e64646972ull, __ATOMIC_RELEASE);
}

void mendDirectIntroduce(struct mendFifo* f) {
  if (mendFifoPeek(&f->directPid) != 0) return;
  pthread_once(&tokenOnce, tokenInit);
  f->directToken = token;
  f->directAt = (uint64_t)(uintptr_t)&token;
  mendFifoStore(&f->directPid, (uint64_t)getpid()); /* last: the consumer reads the others after it */
}

/* Read `bytes` at `addr` in process `pid` into dst: 0, or -1 with errno.  The kernel may move fewer
 * bytes than asked (it stops at a fault or after a large transfer): go on from there. */
static int readFrom(pid_t pid, void* dst, uint64_t addr, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    struct iovec local = {.iov_base = (char*)dst + done, .iov_len = bytes - done};
    struct iovec remote = {.iov_base = (void*)(uintptr_t)(addr + done), .iov_len = bytes - done};
    ssize_t got = mendFaultCheck("shm.direct") ? (errno = EPERM, -1) : process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = EFAULT;
      return -1;
    }
    done += (size_t)got;
  }
  return 0;
}

/* The producer is this process: its pid, and the token at the address it gave. */
static int sameProcess(const struct mendFifo* f) {
  pthread_once(&tokenOnce, tokenInit);
  return f->directPid == (uint64_t)getpid() && f->directAt == (uint64_t)(uintptr_t)&token && f->directToken == token;
}

void mendDirectProbe(struct mendFifo* f, int rank, int peer) {
  if (mendFifoPeek(&f->directOk) != 0) return;
  uint64_t pid = mendFifoLoad(&f->directPid);
  if (pid == 0) return; /* the producer has sent nothing large yet */
  if (!mendParamShmDirect()) {
    mendFifoStore(&f->directOk, 2);
    return;
  }
  uint64_t theirs = 0;
  int ok = sameProcess(f);
  if (!ok && pid <= (uint64_t)INT32_MAX) {
    if (readFrom((pid_t)pid, &theirs, f->directAt, sizeof theirs) == 0) {
      ok = theirs == f->directToken;
    } else {
      INFO(NCCL_SHM | NCCL_P2P, "Rank %d: cannot read rank %d's memory (pid %lu): %s; its sends come through the FIFO",
           rank, peer, (unsigned long)pid, strerror(errno));
    }
  }
  if (!ok && theirs != 0)
    INFO(NCCL_SHM | NCCL_P2P, "Rank %d: pid %lu is not rank %d's process here (another PID namespace?); its sends come "
         "through the FIFO", rank, (unsigned long)pid, peer);
  if (ok)
    INFO(NCCL_SHM | NCCL_P2P, "Rank %d: reads rank %d's large sends from its memory (single copy, %s)", rank, peer,
         sameProcess(f) ? "same process" : "process_vm_readv");
  mendFifoStore(&f->directOk, ok ? 1 : 2);
}

int mendDirectRead(const struct mendFifo* f, void* dst, const struct mendFifoDirect* d) {
  if (sameProcess(f)) {
    memcpy(dst, (const void*)(uintptr_t)d->addr, (size_t)d->bytes);
    return 0;
  }
  return readFrom((pid_t)f->directPid, dst, d->addr, (size_t)d->bytes);
}
