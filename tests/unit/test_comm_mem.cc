// ncclCommMemStats over the accounting hook (src/comm_suspend.c): bytes a layer reports through
// mendCommMemAccount are counted (connector memory is counted from the connectors; a communicator
// fresh from mendCommAlloc has none), and they are persistent: suspend releases connectors only.
#include <gtest/gtest.h>

#include "mend_internal.h"

namespace {

TEST(CommMem, AccountingHookIsCounted) {
  struct mendConfig cfg;
  ASSERT_EQ(mendConfigParse(nullptr, nullptr, &cfg), ncclSuccess);
  struct ncclComm* comm = nullptr;
  ASSERT_EQ(mendCommAlloc(&comm, 1, 0, &cfg), ncclSuccess);
  uint64_t v = 1;
  ASSERT_EQ(ncclCommMemStats(comm, ncclStatGpuMemTotal, &v), ncclSuccess);
  EXPECT_EQ(v, 0u);
  mendCommMemAccount(comm, 4096);
  mendCommMemAccount(comm, 1024);
  ASSERT_EQ(ncclCommMemStats(comm, ncclStatGpuMemTotal, &v), ncclSuccess);
  EXPECT_EQ(v, 5120u);
  ASSERT_EQ(ncclCommMemStats(comm, ncclStatGpuMemPersist, &v), ncclSuccess);
  EXPECT_EQ(v, 5120u);
  ASSERT_EQ(ncclCommMemStats(comm, ncclStatGpuMemSuspend, &v), ncclSuccess);
  EXPECT_EQ(v, 0u);  // no connectors: nothing is releasable
  mendCommMemAccount(comm, -4096);
  ASSERT_EQ(ncclCommMemStats(comm, ncclStatGpuMemTotal, &v), ncclSuccess);
  EXPECT_EQ(v, 1024u);
  mendCommMemAccount(nullptr, 1);  // harmless
  mendCommFree(comm);
}

}  // namespace
