// Test harness for the transport layer: communicators built by hand (bootstrap, peer info, transport
// init) so a test chooses each rank's host identity, and producer/consumer loops that speak the
// connector FIFO protocol of src/transport/transport.h, checking order and content.
#ifndef MEND_TESTS_TRANSPORT_HARNESS_H_
#define MEND_TESTS_TRANSPORT_HARNESS_H_

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "mend_internal.h"
#include "unit_util.h"

namespace tt {

// Monotonic time in seconds.
inline double now() { return mendtest::nowMs() / 1e3; }

using mendtest::setEnv;

// A communicator through the public API (bootstrap, peer info, mendTransportInit).
inline ncclResult_t makeComm(int rank, int nRanks, const ncclUniqueId& id, ncclComm** out) {
  return ncclCommInitRank(out, nRanks, id, rank);
}

// Set the abort flag and wake every wait on the comm's bell (what ncclCommAbort does first).
inline void abortComm(ncclComm* c) {
  __atomic_store_n(&c->abortFlag, 1, __ATOMIC_RELEASE);
  if (c->bell) mendBellRing(c->bell);
}

inline void freeComm(ncclComm* c) {
  if (!c) return;
  if (__atomic_load_n(&c->abortFlag, __ATOMIC_ACQUIRE)) ncclCommAbort(c);
  else ncclCommDestroy(c);
}

// Wait until cond() holds, sleeping on the comm's bell.  False on abort, async error or timeout.
template <class F>
bool waitFor(ncclComm* c, F cond, double timeoutS) {
  double deadline = now() + timeoutS;
  for (;;) {
    uint32_t seen = mendBellRead(c->bell);
    if (cond()) return true;
    if (__atomic_load_n(&c->abortFlag, __ATOMIC_ACQUIRE)) return false;
    if (__atomic_load_n(&c->asyncResult, __ATOMIC_ACQUIRE) != ncclSuccess) return false;
    if (now() > deadline) return false;
    mendBellWait(c->bell, seen, 1000);
  }
}

// Size of slot message i: mostly varied, sometimes full, sometimes empty.
inline size_t msgSize(uint64_t i, size_t slotBytes) {
  if (i % 97 == 0) return slotBytes;
  if (i % 1009 == 1) return 0;
  return (size_t)((i * 2654435761u) % slotBytes) + 1;
}
inline uint8_t pat(uint64_t i, size_t k) { return (uint8_t)(i * 131 + k * 7 + (k >> 8)); }

// Producer side of the FIFO protocol: n messages; perf mode sends full slots stamped at both ends.
inline std::string produce(ncclComm* c, mendConnector* s, uint64_t n, bool perf, const char* src = nullptr) {
  mendFifo* f = s->fifo;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t tail = __atomic_load_n(&f->tail, __ATOMIC_RELAXED);
    if (!waitFor(c, [&] { return tail - __atomic_load_n(&f->head, __ATOMIC_ACQUIRE) < (uint64_t)s->nSlots; }, 30))
      return "producer: no free slot at message " + std::to_string(i);
    char* slot = s->buff + (tail % s->nSlots) * s->slotBytes;
    size_t sz = perf ? s->slotBytes : msgSize(i, s->slotBytes);
    if (perf) {
      memcpy(slot, src, sz);
      memcpy(slot, &i, sizeof(i));
      memcpy(slot + sz - sizeof(i), &i, sizeof(i));
    } else {
      for (size_t k = 0; k < sz; k++) slot[k] = (char)pat(i, k);
    }
    f->bytes[tail % s->nSlots] = sz;
    __atomic_store_n(&f->tail, tail + 1, __ATOMIC_RELEASE);
    mendBellRing(s->peerBell);
  }
  return "";
}

// Consumer side: checks sizes, order and content (perf mode: the stamps only).
inline std::string consume(ncclComm* c, mendConnector* r, uint64_t n, bool perf, char* dst = nullptr) {
  mendFifo* f = r->fifo;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t head = __atomic_load_n(&f->head, __ATOMIC_RELAXED);
    if (!waitFor(c, [&] { return __atomic_load_n(&f->tail, __ATOMIC_ACQUIRE) > head; }, 30))
      return "consumer: nothing arrived for message " + std::to_string(i);
    const char* slot = r->buff + (head % r->nSlots) * r->slotBytes;
    size_t want = perf ? r->slotBytes : msgSize(i, r->slotBytes), got = f->bytes[head % r->nSlots];
    if (got != want) return "message " + std::to_string(i) + ": " + std::to_string(got) + " bytes, expected " + std::to_string(want);
    if (perf) {
      uint64_t a, b;
      memcpy(dst, slot, got);
      memcpy(&a, slot, sizeof(a));
      memcpy(&b, slot + got - sizeof(b), sizeof(b));
      if (a != i || b != i) return "message " + std::to_string(i) + ": stamps " + std::to_string(a) + "/" + std::to_string(b);
    } else {
      for (size_t k = 0; k < got; k++)
        if ((uint8_t)slot[k] != pat(i, k)) return "message " + std::to_string(i) + ": byte " + std::to_string(k) + " differs";
    }
    __atomic_store_n(&f->head, head + 1, __ATOMIC_RELEASE);
    mendBellRing(r->peerBell);
  }
  return "";
}

// /dev/shm entries of the communicator with this hash (names start "mend-<hash>-").
inline int countDevShm(uint64_t commHash) {
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "mend-%016llx-", (unsigned long long)commHash);
  int n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    for (struct dirent* e; (e = readdir(d)) != NULL;)
      if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
  }
  return n;
}

}  // namespace tt

#endif
