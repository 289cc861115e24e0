/*
 * ABI probe: compiled against NVIDIA's nccl.h (from the CUDA toolkit), linked with -lnccl and run
 * against Mend's libnccl.so.2.  Proves that a program built for NVIDIA's NCCL runs on Mend:
 * the 80-byte config from NVIDIA's initializer is accepted, the version matches, and calls work.
 * Prints TAP lines.
 */
#include <nccl.h>
#include <stdio.h>
#include <string.h>

static int failures;
static void check(int ok, const char* name) {
  printf("%s %s\n", ok ? "ok" : "not ok", name);
  if (!ok) failures++;
}

int main(void) {
  int version = 0;
  check(ncclGetVersion(&version) == ncclSuccess && version == NCCL_VERSION_CODE, "abi_version_code_matches");
  check(sizeof(ncclConfig_t) == 80, "abi_nvidia_config_is_80_bytes");

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
  return failures ? 1 : 0;
}
