/*
 * Bad inputs to the collective, send/recv and group calls: each returns the documented code
 * (ncclInvalidArgument / ncclInvalidUsage) with a WARN that names the problem (read back with
 * ncclGetLastError), and nothing crashes or hangs.  Valid edge cases (count 0, NULL buffers with
 * count 0) succeed.  The same for communicator creation, queries, split/shrink/revoke, memory,
 * registration, windows and user ops, plus the host-mode successes of those calls and the device
 * API's refusal.  Two host-mode communicators from ncclCommInitAll are used.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mendtest.h"
#include "nccl.h"

static ncclComm_t comms[2];

/* The call returned `want` and the last WARN mentions `word` (case-sensitive substring). */
static void expect(const char* name, ncclResult_t got, ncclResult_t want, const char* word) {
  const char* last = ncclGetLastError(comms[0]);
  int ok = got == want && (word == NULL || (last && strstr(last, word)));
  mtResult(ok, name, "returned %d (%s), want %d; last error \"%s\", want it to mention \"%s\"", got,
           ncclGetErrorString(got), want, last ? last : "(null)", word ? word : "");
}

/* Communicator creation with bad arguments (no peer is ever contacted). */
static void initErrors(void) {
  const ncclResult_t IA = ncclInvalidArgument;
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  ncclComm_t nc = (ncclComm_t)0x1;
  expect("api_errors_uniqueid_null", ncclGetUniqueId(NULL), IA, "uniqueId");
  expect("api_errors_version_null", ncclGetVersion(NULL), IA, "version");
  expect("api_errors_init_null_comm", ncclCommInitRank(NULL, 2, id, 0), IA, "comm pointer");
  expect("api_errors_init_nranks0", ncclCommInitRank(&nc, 0, id, 0), IA, "nranks");
  mtResult(nc == NULL, "api_errors_init_fail_sets_null", "*comm is %p after a failed init", (void*)nc);
  expect("api_errors_init_rank_neg", ncclCommInitRank(&nc, 2, id, -1), IA, "rank");
  expect("api_errors_init_rank_too_big", ncclCommInitRank(&nc, 2, id, 2), IA, "rank");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0;
  expect("api_errors_config_magic", ncclCommInitRankConfig(&nc, 1, id, 0, &cfg), IA, "NCCL_CONFIG_INITIALIZER");
  ncclConfig_t cfg2 = NCCL_CONFIG_INITIALIZER;
  cfg2.blocking = 2;
  expect("api_errors_config_blocking", ncclCommInitRankConfig(&nc, 1, id, 0, &cfg2), IA, "blocking");
  ncclConfig_t cfg3 = NCCL_CONFIG_INITIALIZER;
  cfg3.minCTAs = 8;
  cfg3.maxCTAs = 4;
  expect("api_errors_config_ctas", ncclCommInitRankConfig(&nc, 1, id, 0, &cfg3), IA, "minCTAs");
  expect("api_errors_scalable_nid0", ncclCommInitRankScalable(&nc, 2, 0, 0, &id, NULL), IA, "nId");
  expect("api_errors_scalable_ids_null", ncclCommInitRankScalable(&nc, 2, 0, 1, NULL, NULL), IA, "commIds");
  ncclComm_t all[2];
  expect("api_errors_initall_ndev", ncclCommInitAll(all, -1, NULL), IA, "device count");
  int dup[2] = {0, 0};
  expect("api_errors_initall_dup", ncclCommInitAll(all, 2, dup), IA, "duplicate");
  expect("api_errors_initall_null", ncclCommInitAll(NULL, 2, NULL), IA, "comms");
}

/* Queries, split, shrink, revoke, finalize and abort with bad arguments. */
static void queryAndSplitErrors(ncclComm_t c) {
  const ncclResult_t IA = ncclInvalidArgument;
  ncclComm_t nc = NULL;
  /* queries */
  int v;
  expect("api_errors_count_null_comm", ncclCommCount(NULL, &v), IA, "communicator");
  expect("api_errors_count_null_out", ncclCommCount(c, NULL), IA, "output");
  expect("api_errors_rank_null_out", ncclCommUserRank(c, NULL), IA, "output");
  expect("api_errors_cudev_null_out", ncclCommCuDevice(c, NULL), IA, "output");
  expect("api_errors_async_null_out", ncclCommGetAsyncError(c, NULL), IA, "asyncError");
  expect("api_errors_async_null_comm", ncclCommGetAsyncError(NULL, (ncclResult_t*)&v), IA, "communicator");
  /* split, shrink, revoke, finalize, abort */
  expect("api_errors_split_color", ncclCommSplit(c, -5, 0, &nc, NULL), IA, "color");
  expect("api_errors_split_newcomm_null", ncclCommSplit(c, 0, 0, NULL, NULL), IA, "newcomm");
  expect("api_errors_split_null_comm", ncclCommSplit(NULL, 0, 0, &nc, NULL), IA, "communicator");
  int excl[2] = {1, 5};
  expect("api_errors_shrink_list_null", ncclCommShrink(c, NULL, 1, &nc, NULL, 0), IA, "excludeRanksList");
  expect("api_errors_shrink_count0", ncclCommShrink(c, excl, 0, &nc, NULL, 0), IA, "excludeRanksCount");
  expect("api_errors_shrink_flags", ncclCommShrink(c, excl, 1, &nc, NULL, 7), IA, "shrinkFlags");
  expect("api_errors_shrink_range", ncclCommShrink(c, excl, 2, &nc, NULL, 0), IA, "out of range");
  int self[1] = {0};
  expect("api_errors_shrink_self", ncclCommShrink(c, self, 1, &nc, NULL, 0), IA, "exclude list");
  expect("api_errors_revoke_flags", ncclCommRevoke(c, 3), IA, "revokeFlags");
  expect("api_errors_revoke_null", ncclCommRevoke(NULL, 0), IA, "communicator");
  expect("api_errors_finalize_null", ncclCommFinalize(NULL), IA, "communicator");
  expect("api_errors_destroy_null_ok", ncclCommDestroy(NULL), ncclSuccess, NULL);
  expect("api_errors_abort_null_ok", ncclCommAbort(NULL), ncclSuccess, NULL);
  int garbage[32] = {0};
  expect("api_errors_not_a_comm", ncclCommCount((ncclComm_t)garbage, &v), IA, "bad magic");
}

/* Memory, registration and window calls with bad arguments. */
static void memoryErrors(ncclComm_t c) {
  const ncclResult_t IA = ncclInvalidArgument;
  /* memory and registration */
  expect("api_errors_memalloc_null", ncclMemAlloc(NULL, 64), IA, "ptr");
  void* h = (void*)0x1;
  char area[256];
  expect("api_errors_register_handle_null", ncclCommRegister(c, area, sizeof area, NULL), IA, "handle");
  expect("api_errors_register_buff_null", ncclCommRegister(c, NULL, sizeof area, &h), IA, "buff");
  expect("api_errors_register_size0", ncclCommRegister(c, area, 0, &h), IA, "size");
  expect("api_errors_register_size_max", ncclCommRegister(c, area, SIZE_MAX, &h), IA, "wraps");
  expect("api_errors_register_wraps", ncclCommRegister(c, (void*)(UINTPTR_MAX - 4095), 8192, &h), IA, "wraps");
  expect("api_errors_deregister_bogus", ncclCommDeregister(c, area), IA, "not a live registration");
  ncclWindow_t win;
  expect("api_errors_window_null", ncclCommWindowRegister(c, area, sizeof area, NULL, 0), IA, "win");
  expect("api_errors_window_flags", ncclCommWindowRegister(c, area, sizeof area, &win, 0x10), IA, "winFlags");
  expect("api_errors_window_dereg_bogus", ncclCommWindowDeregister(c, (ncclWindow_t)area), IA, "window");
}

/* User reduction ops with bad arguments. */
static void redOpErrors(ncclComm_t c) {
  const ncclResult_t IA = ncclInvalidArgument;
  ncclRedOp_t op;
  float scalar = 1;
  expect("api_errors_premulsum_null_op", ncclRedOpCreatePreMulSum(NULL, &scalar, ncclFloat, ncclScalarHostImmediate, c),
         IA, "op");
  expect("api_errors_premulsum_null_scalar", ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat, ncclScalarHostImmediate, c),
         IA, "scalar");
  expect("api_errors_premulsum_bad_type", ncclRedOpCreatePreMulSum(&op, &scalar, (ncclDataType_t)12,
         ncclScalarHostImmediate, c), IA, "datatype");
  expect("api_errors_premulsum_bad_residence", ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat,
         (ncclScalarResidence_t)9, c), IA, "residence");
  expect("api_errors_premulsum_null_comm", ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate,
         NULL), IA, "communicator");
  expect("api_errors_redop_destroy_builtin", ncclRedOpDestroy(ncclSum, c), IA, "builtin");
  expect("api_errors_redop_destroy_unknown", ncclRedOpDestroy((ncclRedOp_t)(ncclNumOps + 7), c), IA, "not alive");
}

/* The memory, registration, query and user-op calls that succeed in host mode. */
static void hostModeCalls(ncclComm_t c) {
  int dev = 7;
  expect("api_host_cudevice", ncclCommCuDevice(c, &dev), ncclSuccess, NULL);
  mtResult(dev == -1, "api_host_cudevice_is_minus_1", "device %d", dev);
  void* p = NULL;
  expect("api_host_memalloc", ncclMemAlloc(&p, 10000), ncclSuccess, NULL);
  mtResult(p != NULL && ((uintptr_t)p % 4096) == 0, "api_host_memalloc_aligned", "%p", p);
  if (p) memset(p, 0x5a, 10000);
  expect("api_host_memfree", ncclMemFree(p), ncclSuccess, NULL);
  p = (void*)0x1;
  expect("api_host_memalloc0", ncclMemAlloc(&p, 0), ncclSuccess, NULL);
  mtResult(p == NULL, "api_host_memalloc0_null", "%p", p);
  expect("api_host_memfree_null", ncclMemFree(NULL), ncclSuccess, NULL);
  static char area[8192];
  void* h1 = NULL;
  void* h2 = NULL;
  expect("api_host_register", ncclCommRegister(c, area, sizeof area, &h1), ncclSuccess, NULL);
  expect("api_host_register2", ncclCommRegister(c, area + 100, 100, &h2), ncclSuccess, NULL);
  mtResult(h1 != NULL && h2 != NULL && h1 != h2, "api_host_register_handles", "%p %p", h1, h2);
  expect("api_host_deregister", ncclCommDeregister(c, h1), ncclSuccess, NULL);
  expect("api_host_deregister_twice", ncclCommDeregister(c, h1), ncclInvalidArgument, "not a live registration");
  /* h2 stays registered: destroy releases it */
  /* Window registration is collective: both ranks, in a group from this one thread. */
  ncclWindow_t win[2] = {NULL, NULL};
  ncclGroupStart();
  for (int r = 0; r < 2; r++) ncclCommWindowRegister(comms[r], area, sizeof area, &win[r], NCCL_WIN_COLL_SYMMETRIC);
  expect("api_host_window_register", ncclGroupEnd(), ncclSuccess, NULL);
  mtResult(win[0] != NULL && win[1] != NULL && win[0] != win[1], "api_host_window_handles", "windows %p %p",
           (void*)win[0], (void*)win[1]);
  for (int r = 0; r < 2; r++)
    expect("api_host_window_deregister", ncclCommWindowDeregister(comms[r], win[r]), ncclSuccess, NULL);
  ncclRedOp_t ops[2];
  double dscalar = 0.25;
  expect("api_host_premulsum_host", ncclRedOpCreatePreMulSum(&ops[0], &dscalar, ncclDouble, ncclScalarHostImmediate, c),
         ncclSuccess, NULL);
  expect("api_host_premulsum_dev", ncclRedOpCreatePreMulSum(&ops[1], &dscalar, ncclDouble, ncclScalarDevice, c),
         ncclSuccess, NULL);
  mtResult(ops[0] >= ncclNumOps && ops[1] >= ncclNumOps && ops[0] != ops[1], "api_host_premulsum_values", "%d %d",
           (int)ops[0], (int)ops[1]);
  expect("api_host_redop_destroy", ncclRedOpDestroy(ops[0], c), ncclSuccess, NULL);
  expect("api_host_redop_destroy2", ncclRedOpDestroy(ops[1], c), ncclSuccess, NULL);
  expect("api_host_redop_destroy_twice", ncclRedOpDestroy(ops[1], c), ncclInvalidArgument, "not alive");
}

/* NCCL 2.28's device API host functions are exported and refuse with a clear warning. */
typedef ncclResult_t (*devCommCreate_t)(ncclComm_t, const void*, void*);
static void deviceApi(ncclComm_t c) {
  devCommCreate_t create = (devCommCreate_t)dlsym(RTLD_DEFAULT, "ncclDevCommCreate");
  mtResult(create != NULL, "api_device_api_exported", "ncclDevCommCreate not found");
  char req[256] = {0}, out[256];
  if (create) expect("api_device_api_unsupported", create(c, req, out), ncclInvalidUsage, "device API");
}

/* Bad communicator, stream, datatype and reduction op in a collective. */
static void collArgErrors(ncclComm_t c, float* buf, float* out) {
  const ncclResult_t IA = ncclInvalidArgument;
  /* communicator */
  expect("api_errors_null_comm", ncclAllReduce(buf, out, 4, ncclFloat, ncclSum, NULL, NULL), IA, "communicator");
  expect("api_errors_null_comm_send", ncclSend(buf, 4, ncclFloat, 1, NULL, NULL), IA, "communicator");
  /* stream in host mode */
  expect("api_errors_stream", ncclAllReduce(buf, out, 4, ncclFloat, ncclSum, c, (cudaStream_t)0x10), IA, "stream");
  /* datatype and op */
  expect("api_errors_datatype", ncclAllReduce(buf, out, 4, (ncclDataType_t)ncclNumTypes, ncclSum, c, NULL), IA,
         "datatype");
  expect("api_errors_datatype_neg", ncclAllGather(buf, out, 4, (ncclDataType_t)-2, c, NULL), IA, "datatype");
  expect("api_errors_op", ncclAllReduce(buf, out, 4, ncclFloat, (ncclRedOp_t)1000, c, NULL), IA, "reduction");
  expect("api_errors_op_neg", ncclReduce(buf, out, 4, ncclFloat, (ncclRedOp_t)-1, 0, c, NULL), IA, "reduction");
  ncclRedOp_t op;
  float scalar = 3;
  ncclResult_t res = ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, c);
  mtResult(res == ncclSuccess, "api_errors_premulsum_create", "%s", ncclGetErrorString(res));
  expect("api_errors_premulsum_type", ncclAllReduce(buf, out, 4, ncclInt32, op, c, NULL), IA, "reduction");
  expect("api_errors_premulsum_other_comm", ncclAllReduce(buf, out, 4, ncclFloat, op, comms[1], NULL), IA,
         "reduction");
  ncclRedOpDestroy(op, c);
  expect("api_errors_premulsum_destroyed", ncclAllReduce(buf, out, 4, ncclFloat, op, c, NULL), IA, "reduction");
}

/* Roots, peers and buffers out of range or NULL; count 0 is valid. */
static void rootAndBufferErrors(ncclComm_t c, float* buf, float* out) {
  const ncclResult_t IA = ncclInvalidArgument;
  /* roots and peers */
  expect("api_errors_bcast_root", ncclBcast(buf, 4, ncclFloat, 2, c, NULL), IA, "root");
  expect("api_errors_broadcast_root", ncclBroadcast(buf, out, 4, ncclFloat, -1, c, NULL), IA, "root");
  expect("api_errors_reduce_root", ncclReduce(buf, out, 4, ncclFloat, ncclSum, 7, c, NULL), IA, "root");
  expect("api_errors_gather_root", ncclGather(buf, out, 4, ncclFloat, 2, c, NULL), IA, "root");
  expect("api_errors_scatter_root", ncclScatter(buf, out, 4, ncclFloat, -5, c, NULL), IA, "root");
  expect("api_errors_send_peer", ncclSend(buf, 4, ncclFloat, 2, c, NULL), IA, "peer");
  expect("api_errors_recv_peer", ncclRecv(buf, 4, ncclFloat, -1, c, NULL), IA, "peer");
  /* buffers */
  expect("api_errors_null_send", ncclAllReduce(NULL, out, 4, ncclFloat, ncclSum, c, NULL), IA, "sendbuff");
  expect("api_errors_null_recv", ncclAllGather(buf, NULL, 4, ncclFloat, c, NULL), IA, "recvbuff");
  expect("api_errors_null_rs", ncclReduceScatter(NULL, out, 4, ncclFloat, ncclSum, c, NULL), IA, "sendbuff");
  expect("api_errors_null_a2a", ncclAlltoAll(buf, NULL, 4, ncclFloat, c, NULL), IA, "recvbuff");
  expect("api_errors_null_sendp2p", ncclSend(NULL, 4, ncclFloat, 1, c, NULL), IA, "sendbuff");
  expect("api_errors_null_recvp2p", ncclRecv(NULL, 4, ncclFloat, 1, c, NULL), IA, "recvbuff");
  expect("api_errors_null_gather_root", ncclGather(buf, NULL, 4, ncclFloat, 0, c, NULL), IA, "recvbuff");
  expect("api_errors_null_scatter_root", ncclScatter(NULL, out, 4, ncclFloat, 0, c, NULL), IA, "sendbuff");
  /* count 0 is a valid no-op, NULL buffers included */
  expect("api_errors_count0_allreduce", ncclAllReduce(NULL, NULL, 0, ncclFloat, ncclSum, c, NULL), ncclSuccess, NULL);
  expect("api_errors_count0_bcast", ncclBroadcast(NULL, NULL, 0, ncclFloat, 1, c, NULL), ncclSuccess, NULL);
  expect("api_errors_count0_send", ncclSend(NULL, 0, ncclFloat, 1, c, NULL), ncclSuccess, NULL);
  expect("api_errors_count0_a2a", ncclAlltoAll(NULL, NULL, 0, ncclInt8, c, NULL), ncclSuccess, NULL);
}

/* Out-of-place buffers that partially overlap are refused; NCCL's in-place layouts are not (checked
 * on comms[0], rank 0 of 2: AllGather's input is its block of the output, ReduceScatter's output its
 * block of the input, Gather's and Scatter's the root's block). */
static void overlapErrors(ncclComm_t c) {
  const ncclResult_t IA = ncclInvalidArgument;
  static float b[64];
  float* o = b + 16;
  expect("api_errors_overlap_allreduce", ncclAllReduce(o, o + 1, 8, ncclFloat, ncclSum, c, NULL), IA, "overlap");
  expect("api_errors_overlap_allreduce_before", ncclAllReduce(o + 1, o, 8, ncclFloat, ncclSum, c, NULL), IA,
         "overlap");
  expect("api_errors_overlap_broadcast", ncclBroadcast(o, o + 7, 8, ncclFloat, 0, c, NULL), IA, "overlap");
  expect("api_errors_overlap_reduce", ncclReduce(o, o + 3, 8, ncclFloat, ncclSum, 0, c, NULL), IA, "overlap");
  expect("api_errors_overlap_allgather", ncclAllGather(o + 1, o, 4, ncclFloat, c, NULL), IA, "overlap");
  expect("api_errors_overlap_allgather_rank1_block", ncclAllGather(o + 4, o, 4, ncclFloat, c, NULL), IA, "overlap");
  expect("api_errors_overlap_reducescatter", ncclReduceScatter(o, o + 2, 4, ncclFloat, ncclSum, c, NULL), IA,
         "overlap");
  expect("api_errors_overlap_alltoall", ncclAlltoAll(o, o + 4, 4, ncclFloat, c, NULL), IA, "overlap");
  expect("api_errors_overlap_gather_root", ncclGather(o + 2, o, 4, ncclFloat, 0, c, NULL), IA, "overlap");
  expect("api_errors_overlap_scatter_root", ncclScatter(o, o + 6, 4, ncclFloat, 0, c, NULL), IA, "overlap");
  /* Adjacent, not overlapping: fine (both ranks of a fresh pair run it, in a group; comms[0] ran
   * count-0 collectives the other rank did not). */
  ncclComm_t pr[2];
  ncclResult_t res = ncclCommInitAll(pr, 2, NULL);
  mtResult(res == ncclSuccess, "api_errors_overlap_pair", "ncclCommInitAll: %s", ncclGetErrorString(res));
  if (res != ncclSuccess) return;
  float in[2][8], out[2][8];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 8; i++) in[r][i] = (float)(r + i);
  ncclGroupStart();
  for (int r = 0; r < 2; r++) ncclAllReduce(in[r], out[r], 8, ncclFloat, ncclSum, pr[r], NULL);
  res = ncclGroupEnd();
  int ok = res == ncclSuccess;
  for (int r = 0; ok && r < 2; r++)
    for (int i = 0; i < 8; i++) ok = ok && out[r][i] == (float)(1 + 2 * i);
  mtResult(ok, "api_errors_overlap_separate_ok", "group end %s", ncclGetErrorString(res));
  /* NCCL's in-place layouts on both ranks: AllGather (input at rank * count), ReduceScatter (output at
   * rank * recvcount), AllReduce (the same buffer); results exact. */
  float g[2][8];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 4; i++) g[r][r * 4 + i] = (float)(10 * r + i);
  ncclGroupStart();
  for (int r = 0; r < 2; r++) ncclAllGather(g[r] + r * 4, g[r], 4, ncclFloat, pr[r], NULL);
  res = ncclGroupEnd();
  ok = res == ncclSuccess;
  for (int r = 0; ok && r < 2; r++)
    for (int i = 0; i < 8; i++) ok = ok && g[r][i] == (float)(10 * (i / 4) + i % 4);
  mtResult(ok, "api_errors_inplace_allgather_ok", "group end %s", ncclGetErrorString(res));
  float rs[2][8];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 8; i++) rs[r][i] = (float)(r + i);
  ncclGroupStart();
  for (int r = 0; r < 2; r++) ncclReduceScatter(rs[r], rs[r] + r * 4, 4, ncclFloat, ncclSum, pr[r], NULL);
  res = ncclGroupEnd();
  ok = res == ncclSuccess;
  for (int r = 0; ok && r < 2; r++)
    for (int i = 0; i < 4; i++) ok = ok && rs[r][r * 4 + i] == (float)(1 + 2 * (r * 4 + i));
  mtResult(ok, "api_errors_inplace_reducescatter_ok", "group end %s", ncclGetErrorString(res));
  for (int r = 0; r < 2; r++) ncclCommDestroy(pr[r]);
}

/* Group calls out of order, errors reported at group end, simulation arguments. */
static void groupErrors(ncclComm_t c, float* buf, float* out) {
  const ncclResult_t IA = ncclInvalidArgument, IU = ncclInvalidUsage;
  /* groups */
  expect("api_errors_groupend_without_start", ncclGroupEnd(), IU, "group");
  ncclGroupStart();
  ncclResult_t inGroup = ncclAllReduce(buf, out, 4, (ncclDataType_t)99, ncclSum, c, NULL);
  expect("api_errors_group_call", inGroup, IA, "datatype");
  expect("api_errors_group_end_reports", ncclGroupEnd(), IA, NULL);
  ncclGroupStart();
  ncclSend(buf, 4, ncclFloat, 0, c, NULL); /* to self, never received */
  expect("api_errors_self_send_unmatched", ncclGroupEnd(), IU, "self");
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  expect("api_errors_simulate_not_in_group", ncclGroupSimulateEnd(&info), IU, "group");
  ncclGroupStart();
  expect("api_errors_simulate_null", ncclGroupSimulateEnd(NULL), IA, "simInfo");
  info.magic = 0x1234;
  expect("api_errors_simulate_magic", ncclGroupSimulateEnd(&info), IA, "magic");
  info.magic = 0x74685283;
  expect("api_errors_simulate_ok", ncclGroupSimulateEnd(&info), ncclSuccess, NULL);
  mtResult(info.estimatedTime >= 0, "api_errors_simulate_time", "estimatedTime %g", info.estimatedTime);
}

/* Destroy inside an open group: refused while the group holds the communicator (operations queued on
 * it, or its init), without waiting and without freeing it; ncclGroupEnd reports it; the communicator
 * is destroyed cleanly after the group.  A grouped destroy of communicators the group does not hold
 * works, as in NCCL. */
static void destroyInGroup(void) {
  const ncclResult_t IU = ncclInvalidUsage;
  ncclComm_t pair[2];
  ncclResult_t res = ncclCommInitAll(pair, 2, NULL);
  mtResult(res == ncclSuccess, "api_destroy_in_group_init", "ncclCommInitAll: %s", ncclGetErrorString(res));
  if (res != ncclSuccess) return;
  float in[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}}, out[2][4];
  double t0 = mtNow();
  ncclGroupStart();
  for (int r = 0; r < 2; r++) ncclAllReduce(in[r], out[r], 4, ncclFloat, ncclSum, pair[r], NULL);
  expect("api_errors_destroy_with_queued_ops", ncclCommDestroy(pair[0]), IU, "ncclGroupEnd first");
  expect("api_errors_destroy_in_group_reported", ncclGroupEnd(), IU, NULL);
  mtResult(mtNow() - t0 < 1.0, "api_errors_destroy_in_group_no_wait", "%.3f s", mtNow() - t0);
  int n = 0;
  expect("api_errors_destroy_in_group_comm_alive", ncclCommCount(pair[0], &n), ncclSuccess, NULL);
  ncclUniqueId id;
  ncclComm_t fresh = NULL;
  ncclGetUniqueId(&id);
  ncclGroupStart();
  ncclCommInitRank(&fresh, 1, id, 0);
  expect("api_errors_destroy_queued_init", ncclCommDestroy(fresh), IU, "ncclGroupEnd first");
  expect("api_errors_destroy_queued_init_reported", ncclGroupEnd(), IU, NULL);
  expect("api_errors_destroy_after_group", ncclCommDestroy(fresh), ncclSuccess, NULL);
  ncclGroupStart();
  ncclResult_t d0 = ncclCommDestroy(pair[0]), d1 = ncclCommDestroy(pair[1]);
  res = ncclGroupEnd();
  mtResult(d0 == ncclSuccess && d1 == ncclSuccess && res == ncclSuccess, "api_destroy_grouped_idle_comms",
           "destroys %d %d, group end %d", d0, d1, res);
}

/* ncclCommAbort between ncclGroupStart and ncclGroupEnd with operations queued on that communicator
 * and on another one: the abort returns at once, the aborted one's operations are dropped, the other's
 * run (exact results), and ncclGroupEnd reports the drop with ncclInvalidUsage. */
static void abortInGroup(void) {
  ncclComm_t a[2], b[2];
  ncclResult_t ra = ncclCommInitAll(a, 2, NULL), rb = ncclCommInitAll(b, 2, NULL);
  mtResult(ra == ncclSuccess && rb == ncclSuccess, "api_abort_in_group_init", "%d %d", ra, rb);
  if (ra != ncclSuccess || rb != ncclSuccess) return;
  float ain[4] = {1, 2, 3, 4}, aout[4] = {0}, bin[2][4], bout[2][4];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 4; i++) bin[r][i] = (float)(10 * r + i);
  double t0 = mtNow();
  ncclGroupStart();
  ncclAllReduce(ain, aout, 4, ncclFloat, ncclSum, a[0], NULL);
  ncclBroadcast(ain, aout, 4, ncclFloat, 0, a[0], NULL);
  for (int r = 0; r < 2; r++) ncclAllReduce(bin[r], bout[r], 4, ncclFloat, ncclSum, b[r], NULL);
  ncclResult_t ab = ncclCommAbort(a[0]);
  double abortTook = mtNow() - t0;
  ncclResult_t e = ncclGroupEnd();
  mtResult(ab == ncclSuccess && abortTook < 1.0, "api_abort_in_group_returns", "abort %d after %.3f s", ab, abortTook);
  expect("api_abort_in_group_end_reports", e, ncclInvalidUsage, "aborted communicator");
  int ok = 1;
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 4; i++) ok = ok && bout[r][i] == (float)(10 + 2 * i);
  mtResult(ok, "api_abort_in_group_other_comm_ran", "b's AllReduce results %s", ok ? "exact" : "wrong");
  mtResult(aout[0] == 0, "api_abort_in_group_dropped_not_run", "aout[0] = %g", aout[0]);
  mtResult(mtNow() - t0 < 2.0, "api_abort_in_group_no_wait", "%.3f s", mtNow() - t0);
  ncclResult_t a1 = ncclCommAbort(a[1]), d0 = ncclCommDestroy(b[0]), d1 = ncclCommDestroy(b[1]);
  mtResult(a1 == ncclSuccess && d0 == ncclSuccess && d1 == ncclSuccess, "api_abort_in_group_cleanup", "%d %d %d", a1,
           d0, d1);
}

/* A finalized communicator takes no more work; fresh communicators still work after all of this. */
static void stillWorks(float* buf, float* out) {
  expect("api_errors_finalize", ncclCommFinalize(comms[1]), ncclSuccess, NULL);
  expect("api_errors_after_finalize", ncclAllReduce(buf, out, 4, ncclFloat, ncclSum, comms[1], NULL),
         ncclInvalidUsage, "finalized");
  /* the communicators still work after all of this: a real two-rank AllReduce */
  for (int i = 0; i < 64; i++) buf[i] = (float)i;
  float out1[64];
  ncclComm_t pair[2];
  ncclResult_t res = ncclCommInitAll(pair, 2, NULL);
  if (res == ncclSuccess) {
    ncclGroupStart();
    ncclAllReduce(buf, out, 64, ncclFloat, ncclSum, pair[0], NULL);
    ncclAllReduce(buf, out1, 64, ncclFloat, ncclSum, pair[1], NULL);
    res = ncclGroupEnd();
    int ok = res == ncclSuccess;
    for (int i = 0; ok && i < 64; i++) ok = out[i] == 2.0f * i && out1[i] == 2.0f * i;
    mtResult(ok, "api_errors_still_works", "group end %s", ncclGetErrorString(res));
    /* Aborts wrapped in a group, as PyTorch does with NCCL >= 2.22. */
    double t0 = mtNow();
    ncclResult_t g = ncclGroupStart();
    ncclResult_t a0 = ncclCommAbort(pair[0]), a1 = ncclCommAbort(pair[1]);
    ncclResult_t e = ncclGroupEnd();
    mtResult(g == ncclSuccess && a0 == ncclSuccess && a1 == ncclSuccess && e == ncclSuccess && mtNow() - t0 < 1.0,
             "api_errors_abort_in_group", "start %d, aborts %d %d, end %d, %.3f s", g, a0, a1, e, mtNow() - t0);
  } else {
    mtResult(0, "api_errors_still_works", "second ncclCommInitAll: %s", ncclGetErrorString(res));
  }
}

int main(void) {
  if (!mtStart("api_errors", 120)) return mtExitCode();
  if (getenv("NCCL_DEBUG") == NULL) setenv("NCCL_DEBUG", "WARN", 1);
  ncclResult_t res = ncclCommInitAll(comms, 2, NULL);
  mtResult(res == ncclSuccess, "api_errors_initall", "ncclCommInitAll: %s", ncclGetErrorString(res));
  if (res != ncclSuccess) return mtExitCode();
  ncclComm_t c = comms[0];
  float buf[64] = {0}, out[64];
  collArgErrors(c, buf, out);
  rootAndBufferErrors(c, buf, out);
  overlapErrors(c);
  groupErrors(c, buf, out);
  initErrors();
  queryAndSplitErrors(c);
  memoryErrors(c);
  redOpErrors(c);
  hostModeCalls(c);
  deviceApi(c);
  destroyInGroup();
  abortInGroup();
  stillWorks(buf, out);
  ncclCommDestroy(comms[0]);
  ncclCommDestroy(comms[1]);
  return mtExitCode();
}