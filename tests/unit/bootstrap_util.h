// Helpers shared by the bootstrap unit tests (test_bootstrap.cc, test_bootstrap_abuse.cc): comms
// bootstrapped on threads, one per rank, and closed again; a free loopback port; a checked allgather.
#ifndef MEND_TESTS_UNIT_BOOTSTRAP_UTIL_H_
#define MEND_TESTS_UNIT_BOOTSTRAP_UTIL_H_

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "mend_internal.h"

namespace mendtest {

inline ncclComm* newComm(int rank, int nRanks) {
  struct mendConfig cfg;
  EXPECT_EQ(mendConfigParse(nullptr, nullptr, &cfg), ncclSuccess);
  ncclComm* c = nullptr;
  EXPECT_EQ(mendCommAlloc(&c, nRanks, rank, &cfg), ncclSuccess);
  return c;
}

inline void closeComm(ncclComm* c, bool abort = false) {
  if (c->bootstrap) {
    if (abort) mendBootstrapAbort(c->bootstrap);
    else EXPECT_EQ(mendBootstrapClose(c->bootstrap), ncclSuccess);
  }
  c->bootstrap = nullptr;
  mendCommFree(c);
}

// Run fn(rank) on n threads and wait for all.
inline void runRanks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < n; r++) t.emplace_back(fn, r);
  for (auto& th : t) th.join();
}

// On a thread per rank: comms[r] becomes a new comm of rank r (of comms.size()) bootstrapped on the
// nIds ids, then then(r, comms[r]) runs (when given).
inline void initRanks(std::vector<ncclComm*>& comms, int nIds, const ncclUniqueId* ids,
                      const std::function<void(int, ncclComm*)>& then = nullptr) {
  int n = (int)comms.size();
  runRanks(n, [&](int r) {
    comms[r] = newComm(r, n);
    ASSERT_EQ(mendBootstrapInit(comms[r], nIds, ids), ncclSuccess) << "rank " << r;
    if (then) then(r, comms[r]);
  });
}

// Close every comm, each from its own thread (an orderly close waits for the peers' BYE).
inline void closeRanks(std::vector<ncclComm*>& comms) {
  runRanks((int)comms.size(), [&](int r) { closeComm(comms[r]); });
}

inline int freePort(const char* host) {
  union mendSocketAddr a, b;
  std::string s = std::string(host) + ":0";
  if (mendSocketParseAddr(s.c_str(), &a) != ncclSuccess) return -1;
  int fd;
  if (mendSocketListen(&a, &fd, &b) != ncclSuccess) return -1;
  mendSocketClose(fd);
  return ntohs(b.sa.sa_family == AF_INET ? b.sin.sin_port : b.sin6.sin6_port);
}

inline void checkAllGather(ncclComm* c) {
  int n = c->nRanks;
  std::vector<int> data(3 * n, -1);
  for (int i = 0; i < 3; i++) data[3 * c->rank + i] = c->rank * 1000 + i;
  ASSERT_EQ(mendBootstrapAllGather(c->bootstrap, data.data(), 3 * sizeof(int)), ncclSuccess);
  for (int r = 0; r < n; r++)
    for (int i = 0; i < 3; i++) ASSERT_EQ(data[3 * r + i], r * 1000 + i) << "rank " << c->rank << " block " << r;
}

}  // namespace mendtest

#endif
