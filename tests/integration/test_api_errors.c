/*
 * Bad inputs to the collective, send/recv and group calls: each returns the documented code
 * (ncclInvalidArgument / ncclInvalidUsage) with a WARN that names the problem (read back with
 * ncclGetLastError), and nothing crashes or hangs.  Valid edge cases (count 0, NULL buffers with
 * count 0) succeed.  Two host-mode communicators from ncclCommInitAll are used.
 */
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

int main(void) {
  mtWatchdog(120);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!mtLoadedMend()) {
    mtResult(0, "api_errors_loaded_mend", "the loaded libnccl.so.2 is not Mend's build");
    return mtExitCode();
  }
  if (getenv("NCCL_DEBUG") == NULL) setenv("NCCL_DEBUG", "WARN", 1);
  ncclResult_t res = ncclCommInitAll(comms, 2, NULL);
  mtResult(res == ncclSuccess, "api_errors_initall", "ncclCommInitAll: %s", ncclGetErrorString(res));
  if (res != ncclSuccess) return mtExitCode();
  ncclComm_t c = comms[0];
  float buf[64] = {0}, out[64];
  const ncclResult_t IA = ncclInvalidArgument, IU = ncclInvalidUsage;

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
  res = ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, c);
  mtResult(res == ncclSuccess, "api_errors_premulsum_create", "%s", ncclGetErrorString(res));
  expect("api_errors_premulsum_type", ncclAllReduce(buf, out, 4, ncclInt32, op, c, NULL), IA, "reduction");
  expect("api_errors_premulsum_other_comm", ncclAllReduce(buf, out, 4, ncclFloat, op, comms[1], NULL), IA,
         "reduction");
  ncclRedOpDestroy(op, c);
  expect("api_errors_premulsum_destroyed", ncclAllReduce(buf, out, 4, ncclFloat, op, c, NULL), IA, "reduction");
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
  /* a finalized communicator takes no more work */
  expect("api_errors_finalize", ncclCommFinalize(comms[1]), ncclSuccess, NULL);
  expect("api_errors_after_finalize", ncclAllReduce(buf, out, 4, ncclFloat, ncclSum, comms[1], NULL), IU,
         "finalized");
  /* the communicators still work after all of this: a real two-rank AllReduce */
  for (int i = 0; i < 64; i++) buf[i] = (float)i;
  float out1[64];
  ncclComm_t pair[2];
  res = ncclCommInitAll(pair, 2, NULL);
  if (res == ncclSuccess) {
    ncclGroupStart();
    ncclAllReduce(buf, out, 64, ncclFloat, ncclSum, pair[0], NULL);
    ncclAllReduce(buf, out1, 64, ncclFloat, ncclSum, pair[1], NULL);
    res = ncclGroupEnd();
    int ok = res == ncclSuccess;
    for (int i = 0; ok && i < 64; i++) ok = out[i] == 2.0f * i && out1[i] == 2.0f * i;
    mtResult(ok, "api_errors_still_works", "group end %s", ncclGetErrorString(res));
    ncclCommDestroy(pair[0]);
    ncclCommDestroy(pair[1]);
  } else {
    mtResult(0, "api_errors_still_works", "second ncclCommInitAll: %s", ncclGetErrorString(res));
  }
  ncclCommDestroy(comms[0]);
  ncclCommDestroy(comms[1]);
  return mtExitCode();
}
