/*
 * ABI probe: compiled against NVIDIA's nccl.h (from the CUDA toolkit: 2.28, 80-byte config) and
 * against Mend's own nccl.h (2.30, 96-byte config), linked with -lnccl and run against Mend's
 * libnccl.so.2.  Proves that a program built for NVIDIA's NCCL runs on Mend: the config from the
 * header's initializer is accepted (and configs laid out as older and newer headers do), the library
 * is at least the header's version, and calls made with the header's types and enums give the right
 * results; built on a 2.30 header it also calls the 2.29/2.30 entry points.  Prints TAP lines.
 */
#include <nccl.h>
#include <stdio.h>
#include <string.h>

static int failures;
static void check(int ok, const char* name) {
  printf("%s %s\n", ok ? "ok" : "not ok", name);
  if (!ok) failures++;
}

/* Configs as older and newer headers lay them out, built from this (NVIDIA's) initializer: a 2.27
 * header (72 bytes, no 2.28 fields: garbage there must be ignored), a 2.18-2.26 header (48 bytes),
 * and a newer header with fields Mend does not know (they are ignored). */
static void olderAndNewerConfigs(const ncclUniqueId* uid) {
  union {
    ncclConfig_t cfg;
    unsigned char bytes[128];
  } u;
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  const struct { size_t size; unsigned version; const char* name; } cases[] = {
      {72, NCCL_VERSION(2, 27, 7), "abi_config_from_2_27_header"},
      {48, NCCL_VERSION(2, 23, 4), "abi_config_from_2_23_header"},
      {96, NCCL_VERSION(2, 30, 0), "abi_config_from_2_30_header"},
      {112, NCCL_VERSION(2, 32, 0), "abi_config_from_newer_header"},
  };
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) id = *uid;
    memset(u.bytes, 0x7f, sizeof(u.bytes)); /* invalid values everywhere the caller's header ends */
    memcpy(u.bytes, &init, cases[k].size < sizeof(init) ? cases[k].size : sizeof(init));
    u.cfg.size = cases[k].size;
    u.cfg.version = cases[k].version;
    u.cfg.blocking = 1;
    ncclComm_t comm = NULL;
    ncclResult_t res = ncclCommInitRankConfig(&comm, 1, id, 0, &u.cfg);
    check(res == ncclSuccess && comm != NULL, cases[k].name);
    if (comm) ncclCommDestroy(comm);
  }
}

/* Two ranks of this process, driven with NVIDIA's types and enums: AllReduce, PreMulSum, split with
 * an 80-byte config, and ncclGroupSimulateEnd with NVIDIA's ncclSimInfo_t. */
static void twoRanks(void) {
  ncclComm_t comms[2] = {NULL, NULL};
  check(ncclCommInitAll(comms, 2, NULL) == ncclSuccess, "abi_init_all");
  if (!comms[0] || !comms[1]) return;
  float in[2][64], out[2][64];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 64; i++) in[r][i] = (float)(r * 64 + i);
  int ok = ncclGroupStart() == ncclSuccess;
  for (int r = 0; r < 2; r++) ok &= ncclAllReduce(in[r], out[r], 64, ncclFloat32, ncclSum, comms[r], 0) == ncclSuccess;
  ok &= ncclGroupEnd() == ncclSuccess;
  for (int i = 0; ok && i < 64; i++) ok = out[0][i] == (float)(64 + 2 * i) && out[1][i] == out[0][i];
  check(ok, "abi_allreduce_results");
  ncclRedOp_t ops[2];
  double half = 0.5;
  ok = 1;
  for (int r = 0; r < 2; r++)
    ok &= ncclRedOpCreatePreMulSum(&ops[r], &half, ncclFloat64, ncclScalarHostImmediate, comms[r]) == ncclSuccess;
  double din[2] = {4, 8}, dout[2] = {0, 0};
  ok &= ncclGroupStart() == ncclSuccess;
  for (int r = 0; r < 2; r++) ok &= ncclAllReduce(&din[r], &dout[r], 1, ncclFloat64, ops[r], comms[r], 0) == ncclSuccess;
  ok &= ncclGroupEnd() == ncclSuccess;
  for (int r = 0; r < 2; r++) ok &= ncclRedOpDestroy(ops[r], comms[r]) == ncclSuccess;
  check(ok && dout[0] == 6 && dout[1] == 6, "abi_premulsum");
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  ok = ncclGroupStart() == ncclSuccess;
  for (int r = 0; r < 2; r++) ok &= ncclAllReduce(in[r], out[r], 64, ncclFloat32, ncclSum, comms[r], 0) == ncclSuccess;
  ok &= ncclGroupSimulateEnd(&sim) == ncclSuccess;
  check(ok && sim.estimatedTime > 0, "abi_group_simulate_end");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  ncclComm_t child[2] = {NULL, NULL};
  ok = ncclGroupStart() == ncclSuccess;
  for (int r = 0; r < 2; r++) ok &= ncclCommSplit(comms[r], 0, 1 - r, &child[r], &cfg) == ncclSuccess;
  ok &= ncclGroupEnd() == ncclSuccess;
  int rank0 = -1;
  if (ok && child[0]) ok = ncclCommUserRank(child[0], &rank0) == ncclSuccess;
  check(ok && child[0] && child[1] && rank0 == 1, "abi_split_with_nvidia_config");
  for (int r = 0; r < 2; r++) {
    if (child[r]) ncclCommDestroy(child[r]);
    ncclCommDestroy(comms[r]);
  }
}

#if NCCL_VERSION_CODE >= 23000
/* Built on a 2.30 header: the new entry points resolve and answer (Mend refuses what it does not do). */
static void api230(void) {
  ncclComm_t comm = NULL;
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  check(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess, "abi230_init");
  if (comm == NULL) return;
  uint64_t total = 1, flag = 1;
  check(ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclSuccess && ncclCommMemStats(comm, ncclStatGpuMemSuspended,
        &flag) == ncclSuccess && flag == 1 && ncclCommResume(comm) == ncclSuccess, "abi230_suspend_resume");
  check(ncclCommMemStats(comm, ncclStatGpuMemTotal, &total) == ncclSuccess, "abi230_mem_stats");
  ncclParamHandle_t h = NULL;
  int64_t buffsize = 0;
  check(ncclParamBind(&h, "NCCL_BUFFSIZE") == ncclSuccess && ncclParamGetI64(h, &buffsize) == ncclSuccess &&
        buffsize > 0, "abi230_param_by_handle");
  ncclComm_t grown = NULL;
  check(ncclCommGrow(comm, 2, NULL, -1, &grown, NULL) == ncclInvalidUsage && grown == NULL, "abi230_grow_refused");
  check(strlen(ncclGetErrorString(ncclTimeout)) > 0, "abi230_timeout_string");
  ncclCommDestroy(comm);
}
#endif

int main(void) {
  int version = 0;
  check(ncclGetVersion(&version) == ncclSuccess && version >= NCCL_VERSION_CODE, "abi_version_code_at_least_header");
  check(sizeof(ncclConfig_t) == (NCCL_VERSION_CODE >= 23000 ? 96 : 80), "abi_config_size_of_header");

  ncclUniqueId id;
  check(ncclGetUniqueId(&id) == ncclSuccess, "abi_get_unique_id");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  ncclComm_t comm = NULL;
  ncclResult_t res = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  check(res == ncclSuccess && comm != NULL, "abi_init_with_nvidia_config");
  if (comm) {
    int count = 0, rank = -1;
    check(ncclCommCount(comm, &count) == ncclSuccess && count == 1, "abi_comm_count");
    check(ncclCommUserRank(comm, &rank) == ncclSuccess && rank == 0, "abi_comm_user_rank");
    check(ncclCommDestroy(comm) == ncclSuccess, "abi_comm_destroy");
  }
  /* A config with a wrong magic must be refused, not crash. */
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  comm = NULL;
  check(ncclCommInitRankConfig(&comm, 1, id, 0, &bad) == ncclInvalidArgument, "abi_bad_magic_rejected");
  check(strlen(ncclGetErrorString(ncclInvalidArgument)) > 0, "abi_error_string");
  const char* last = ncclGetLastError(NULL);
  check(last != NULL && strstr(last, "NCCL_CONFIG_INITIALIZER") != NULL, "abi_last_error_names_the_problem");
  olderAndNewerConfigs(&id);
  twoRanks();
#if NCCL_VERSION_CODE >= 23000
  api230();
#endif
  return failures ? 1 : 0;
}
