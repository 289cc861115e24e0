/*
 * The NCCL 2.29/2.30 entry points (shared/abi/NCCL_2.30_DELTA.md), in host mode, with good and bad
 * arguments:
 *   - the parameter API against the registry: every key readable by handle and by key, its text, raw
 *     bytes and every typed getter consistent, ranges enforced (ncclInvalidArgument + WARN), known
 *     rows with values set here, ncclParamDumpAll logging every key;
 *   - ncclCommSuspend / ncclCommResume / ncclCommMemStats: connector bytes counted, the p2p ones released
 *     by suspend and rebuilt by the first AllReduce after resume, operations refused while suspended,
 *     exact results after resume;
 *   - ncclCommGetUniqueId, ncclCommGrow: argument errors and id rules (growing itself: test_grow.c);
 *   - ncclPutSignal, ncclSignal, ncclWaitSignal, ncclWinGetUserPtr: argument errors, calls before any
 *     window (ncclInvalidUsage), then windows registered in a group by one thread for two ranks of
 *     one process, a put and a signal between them, exact (across processes: test_onesided.c).
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mendtest.h"
#include "nccl.h"

static ncclComm_t comms[2];
static const ncclResult_t IA = ncclInvalidArgument, IU = ncclInvalidUsage;

/* The call returned `want` and the last WARN mentions `word`. */
static void expect(const char* name, ncclResult_t got, ncclResult_t want, const char* word) {
  const char* last = ncclGetLastError(NULL);
  int ok = got == want && (word == NULL || (last && strstr(last, word)));
  mtResult(ok, name, "returned %d (%s), want %d; last error \"%s\", want it to mention \"%s\"", got,
           ncclGetErrorString(got), want, last ? last : "(null)", word ? word : "");
}

/* One row: every getter agrees with the text, and a typed getter succeeds exactly when the value
 * fits its type.  Returns 0 and prints why on the first disagreement. */
static int rowConsistent(const char* key, int* isInt) {
  ncclParamHandle_t h = NULL;
  const char *text = NULL, *byKey = NULL;
  int len = -1;
  char raw[4096];
  if (ncclParamBind(&h, key) != ncclSuccess || h == NULL) return printf("# %s: bind failed\n", key), 0;
  if (ncclParamGetStr(h, &text) != ncclSuccess || text == NULL) return printf("# %s: GetStr failed\n", key), 0;
  if (ncclParamGetParameter(key, &byKey, &len) != ncclSuccess || strcmp(byKey, text) != 0 || len != (int)strlen(text))
    return printf("# %s: GetParameter disagrees with GetStr\n", key), 0;
  if (ncclParamGet(h, raw, sizeof(raw), &len) != ncclSuccess) return printf("# %s: Get failed\n", key), 0;
  int64_t v = 0, i64 = 0;
  *isInt = len == 8 && !(len == (int)strlen(text) + 1 && memcmp(raw, text, (size_t)len) == 0);
  if (*isInt) {
    memcpy(&v, raw, 8);
    if (strtoll(text, NULL, 10) != v) return printf("# %s: raw %" PRId64 " but text %s\n", key, v, text), 0;
  } else if (len != (int)strlen(text) + 1 || memcmp(raw, text, (size_t)len) != 0) {
    return printf("# %s: raw bytes differ from the text\n", key), 0;
  }
  int numeric = ncclParamGetI64(h, &i64) == ncclSuccess;
  if (*isInt && (!numeric || i64 != v)) return printf("# %s: GetI64 failed on an integer row\n", key), 0;
  if (!numeric) v = INT64_MIN; /* a string row that is not an integer: every typed getter refuses */
  else v = i64;
  int8_t a; int16_t b; int32_t c; uint8_t d; uint16_t e; uint32_t f; uint64_t g;
  struct { ncclResult_t res; int fits; } t[] = {
      {ncclParamGetI8(h, &a), numeric && v >= INT8_MIN && v <= INT8_MAX},
      {ncclParamGetI16(h, &b), numeric && v >= INT16_MIN && v <= INT16_MAX},
      {ncclParamGetI32(h, &c), numeric && v >= INT32_MIN && v <= INT32_MAX},
      {ncclParamGetU8(h, &d), numeric && v >= 0 && v <= UINT8_MAX},
      {ncclParamGetU16(h, &e), numeric && v >= 0 && v <= UINT16_MAX},
      {ncclParamGetU32(h, &f), numeric && v >= 0 && v <= (int64_t)UINT32_MAX},
      {ncclParamGetU64(h, &g), numeric && v >= 0}};
  for (size_t k = 0; k < sizeof(t) / sizeof(t[0]); k++)
    if (t[k].res != (t[k].fits ? ncclSuccess : IA))
      return printf("# %s = %s: getter %zu returned %d, fits %d\n", key, text, k, t[k].res, t[k].fits), 0;
  if (numeric && ((v >= INT8_MIN && v <= INT8_MAX && a != v) || (v >= 0 && (int64_t)g != v)))
    return printf("# %s: typed value differs\n", key), 0;
  return 1;
}

/* Every key of the registry: unique NCCL_/MEND_ names, each row consistent. */
static void everyRow(void) {
  const char** keys = NULL;
  int n = 0, bad = 0, ints = 0, names = 0;
  expect("api230_param_keys", ncclParamGetAllParameterKeys(&keys, &n), ncclSuccess, NULL);
  mtResult(keys != NULL && n > 50, "api230_param_key_count", "%d keys", n);
  for (int i = 0; keys && i < n; i++) {
    int isInt = 0;
    names += keys[i] && (strncmp(keys[i], "NCCL_", 5) == 0 || strncmp(keys[i], "MEND_", 5) == 0);
    for (int j = 0; j < i; j++) bad += strcmp(keys[i], keys[j]) == 0;
    bad += !rowConsistent(keys[i], &isInt);
    ints += isInt;
  }
  mtResult(names == n, "api230_param_keys_are_nccl_or_mend", "%d of %d", names, n);
  mtResult(bad == 0 && ints > 0 && ints < n, "api230_param_every_row_consistent", "%d bad rows, %d integer rows of %d",
           bad, ints, n);
}

/* Rows whose values this test set (main, before any library call) or whose defaults are known. */
static void knownRows(void) {
  ncclParamHandle_t h;
  int64_t i64 = 0; int32_t i32 = 0; int8_t i8 = 0; uint8_t u8 = 0; uint32_t u32 = 0; uint64_t u64 = 0;
  const char* s = NULL;
  ncclParamBind(&h, "NCCL_BUFFSIZE"); /* set to 1048576 */
  expect("api230_param_i64", ncclParamGetI64(h, &i64), ncclSuccess, NULL);
  mtResult(i64 == 1048576, "api230_param_i64_value", "%" PRId64, i64);
  expect("api230_param_u32", ncclParamGetU32(h, &u32), ncclSuccess, NULL);
  mtResult(u32 == 1048576, "api230_param_u32_value", "%u", u32);
  expect("api230_param_i8_range", ncclParamGetI8(h, &i8), IA, "does not fit");
  expect("api230_param_str_of_int", ncclParamGetStr(h, &s), ncclSuccess, NULL);
  mtResult(s && strcmp(s, "1048576") == 0, "api230_param_str_of_int_value", "'%s'", s ? s : "(null)");
  ncclParamBind(&h, "MEND_PERF_CTRL_TIMEOUT"); /* set to -3 */
  expect("api230_param_negative_i8", ncclParamGetI8(h, &i8), ncclSuccess, NULL);
  mtResult(i8 == -3, "api230_param_negative_i8_value", "%d", i8);
  expect("api230_param_negative_u64", ncclParamGetU64(h, &u64), IA, "does not fit");
  ncclParamBind(&h, "MEND_PROBE_INTERVAL"); /* unset: default 200 */
  expect("api230_param_default_u8", ncclParamGetU8(h, &u8), ncclSuccess, NULL);
  mtResult(u8 == 200, "api230_param_default_u8_value", "%u", u8);
  expect("api230_param_default_i8_range", ncclParamGetI8(h, &i8), IA, "MEND_PROBE_INTERVAL");
  ncclParamBind(&h, "NCCL_COMM_BLOCKING"); /* unset: default INT32_MIN (NCCL_CONFIG_UNDEF_INT) */
  expect("api230_param_undef_i32", ncclParamGetI32(h, &i32), ncclSuccess, NULL);
  mtResult(i32 == INT32_MIN, "api230_param_undef_i32_value", "%d", i32);
  ncclParamBind(&h, "MEND_TESTBED_HOST"); /* a string row set to "3" */
  expect("api230_param_string_row_as_int", ncclParamGetI32(h, &i32), ncclSuccess, NULL);
  mtResult(i32 == 3, "api230_param_string_row_as_int_value", "%d", i32);
  ncclParamBind(&h, "MEND_TESTBED_JOB"); /* a string row set to "job7" */
  expect("api230_param_string_not_int", ncclParamGetI64(h, &i64), IA, "not an integer");
  const char* v = NULL;
  int len = -1;
  expect("api230_param_by_key", ncclParamGetParameter("MEND_TESTBED_JOB", &v, &len), ncclSuccess, NULL);
  mtResult(v && strcmp(v, "job7") == 0 && len == 4, "api230_param_by_key_value", "'%s' %d", v ? v : "(null)", len);
  expect("api230_param_unset_string", ncclParamGetParameter("NCCL_DEBUG_FILE", &v, &len), ncclSuccess, NULL);
  mtResult(v && v[0] == '\0' && len == 0, "api230_param_unset_string_empty", "'%s' %d", v ? v : "(null)", len);
}

static void paramErrors(void) {
  ncclParamHandle_t h = (ncclParamHandle_t)0x1;
  int32_t i32;
  int len = 0;
  char small[2];
  const char* v;
  const char** keys;
  expect("api230_param_bind_null_out", ncclParamBind(NULL, "NCCL_BUFFSIZE"), IA, "out");
  expect("api230_param_bind_null_key", ncclParamBind(&h, NULL), IA, "key");
  expect("api230_param_bind_unknown", ncclParamBind(&h, "NCCL_NO_SUCH_THING"), IA, "not a parameter");
  mtResult(h == NULL, "api230_param_bind_unknown_null", "handle %p", (void*)h);
  expect("api230_param_get_null_handle", ncclParamGetI32(NULL, &i32), IA, "handle");
  struct { unsigned magic; int index; } fake = {0, 0};
  expect("api230_param_get_fake_handle", ncclParamGetI32((ncclParamHandle_t)&fake, &i32), IA, "ncclParamBind");
  ncclParamBind(&h, "NCCL_BUFFSIZE");
  expect("api230_param_get_null_out", ncclParamGetI32(h, NULL), IA, "NULL");
  expect("api230_param_getstr_null_out", ncclParamGetStr(h, NULL), IA, "NULL");
  expect("api230_param_raw_small", ncclParamGet(h, small, sizeof(small), &len), IA, "needs 8 bytes");
  mtResult(len == 8, "api230_param_raw_small_len", "len %d", len);
  expect("api230_param_raw_negative", ncclParamGet(h, small, -1, &len), IA, "maxLen");
  expect("api230_param_raw_null_len", ncclParamGet(h, small, 2, NULL), IA, "len");
  expect("api230_param_key_unknown", ncclParamGetParameter("MEND_NOPE", &v, &len), IA, "not a parameter");
  expect("api230_param_key_null", ncclParamGetParameter(NULL, &v, &len), IA, "NULL argument");
  expect("api230_param_keys_null", ncclParamGetAllParameterKeys(&keys, NULL), IA, "NULL argument");
}

/* ncclParamDumpAll at NCCL_DEBUG=INFO into a file: a line for every key. */
static void dumpAll(void) {
  char path[] = "/tmp/mend_api230_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) { mtResult(0, "api230_param_dump", "mkstemp"); return; }
  close(fd);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "ENV", 1);
  setenv("NCCL_DEBUG_FILE", path, 1);
  ncclResetDebugInit();
  ncclParamDumpAll();
  setenv("NCCL_DEBUG", "WARN", 1);
  unsetenv("NCCL_DEBUG_FILE");
  unsetenv("NCCL_DEBUG_SUBSYS");
  ncclResetDebugInit();
  FILE* f = fopen(path, "r");
  static char text[1 << 20];
  size_t got = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
  text[got] = '\0';
  if (f) fclose(f);
  unlink(path);
  const char** keys = NULL;
  int n = 0, missing = 0;
  const char* first = NULL;
  ncclParamGetAllParameterKeys(&keys, &n);
  for (int i = 0; i < n; i++) {
    char want[256];
    snprintf(want, sizeof(want), " %s = ", keys[i]);
    if (!strstr(text, want)) { missing++; if (!first) first = keys[i]; }
  }
  mtResult(n > 0 && missing == 0, "api230_param_dump_every_key", "%d of %d missing (first %s); %zu bytes logged",
           missing, n, first ? first : "-", got);
  mtResult(strstr(text, " NCCL_BUFFSIZE = 1048576") != NULL, "api230_param_dump_value", "no NCCL_BUFFSIZE line");
}

/* An AllReduce over both communicators (one group): 1 when every result is exact. */
static int allReduceOk(int n) {
  float in[2][256], out[2][256];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < n; i++) in[r][i] = (float)(r * 1000 + i), out[r][i] = -1;
  ncclGroupStart();
  for (int r = 0; r < 2; r++) ncclAllReduce(in[r], out[r], (size_t)n, ncclFloat, ncclSum, comms[r], NULL);
  if (ncclGroupEnd() != ncclSuccess) return 0;
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < n; i++)
      if (out[r][i] != (float)(1000 + 2 * i)) return 0;
  return 1;
}

static uint64_t stat(ncclComm_t c, ncclCommMemStat_t s) {
  uint64_t v = UINT64_MAX;
  return ncclCommMemStats(c, s, &v) == ncclSuccess ? v : UINT64_MAX;
}

static void suspendResume(void) {
  ncclComm_t c = comms[0];
  uint64_t v;
  mtResult(allReduceOk(256), "api230_allreduce_before", "wrong results");
  uint64_t total = stat(c, ncclStatGpuMemTotal);
  mtResult(total != UINT64_MAX && total > 0, "api230_memstats_counts_connectors", "total %" PRIu64, total);
  uint64_t canRelease = stat(c, ncclStatGpuMemSuspend), persist = stat(c, ncclStatGpuMemPersist);
  mtResult(canRelease > 0 && persist != UINT64_MAX && canRelease + persist == total, "api230_memstats_parts",
           "suspend %" PRIu64 " + persist %" PRIu64 " vs total %" PRIu64 " (p2p connectors are releasable)",
           canRelease, persist, total);
  mtResult(stat(c, ncclStatGpuMemSuspended) == 0, "api230_memstats_active", "suspended flag set");
  expect("api230_memstats_null_comm", ncclCommMemStats(NULL, ncclStatGpuMemTotal, &v), IA, "communicator");
  expect("api230_memstats_null_value", ncclCommMemStats(c, ncclStatGpuMemTotal, NULL), IA, "value");
  expect("api230_memstats_bad_stat", ncclCommMemStats(c, (ncclCommMemStat_t)4, &v), IA, "invalid stat");
  expect("api230_suspend_null_comm", ncclCommSuspend(NULL, 0), IA, "communicator");
  expect("api230_suspend_bad_flags", ncclCommSuspend(c, 0x6), IA, "flags");
  expect("api230_resume_null_comm", ncclCommResume(NULL), IA, "communicator");
  expect("api230_resume_not_suspended", ncclCommResume(c), ncclSuccess, NULL);
  for (int r = 0; r < 2; r++) expect("api230_suspend", ncclCommSuspend(comms[r], NCCL_SUSPEND_MEM), ncclSuccess, NULL);
  expect("api230_suspend_twice", ncclCommSuspend(c, NCCL_SUSPEND_MEM), ncclSuccess, NULL);
  mtResult(stat(c, ncclStatGpuMemSuspended) == 1, "api230_memstats_suspended", "flag %" PRIu64,
           stat(c, ncclStatGpuMemSuspended));
  mtResult(stat(c, ncclStatGpuMemTotal) == total - canRelease && stat(c, ncclStatGpuMemSuspend) == 0,
           "api230_memstats_released_while_suspended", "total %" PRIu64 " then %" PRIu64 " (releasable %" PRIu64 ")",
           total, stat(c, ncclStatGpuMemTotal), canRelease);
  float x = 1, y = 0;
  expect("api230_suspended_refuses_allreduce", ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, c, NULL), IU,
         "suspended");
  expect("api230_suspended_refuses_send", ncclSend(&x, 1, ncclFloat, 1, c, NULL), IU, "suspended");
  int n = 0;
  expect("api230_suspended_queries_work", ncclCommCount(c, &n), ncclSuccess, NULL);
  for (int r = 0; r < 2; r++) expect("api230_resume", ncclCommResume(comms[r]), ncclSuccess, NULL);
  mtResult(stat(c, ncclStatGpuMemSuspended) == 0, "api230_memstats_resumed", "flag set");
  mtResult(allReduceOk(256), "api230_allreduce_after_resume", "wrong results");
  mtResult(stat(c, ncclStatGpuMemTotal) == total, "api230_memstats_rebuilt_after_resume",
           "total %" PRIu64 " after the AllReduce, %" PRIu64 " before suspend", stat(c, ncclStatGpuMemTotal), total);
}

static void growErrors(void) {
  ncclComm_t c = comms[0], nc = (ncclComm_t)0x1;
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  expect("api230_comm_uid_null_comm", ncclCommGetUniqueId(NULL, &id), IA, "communicator");
  expect("api230_comm_uid_null_id", ncclCommGetUniqueId(c, NULL), IA, "uniqueId");
  ncclUniqueId zero = id, second;
  expect("api230_comm_uid", ncclCommGetUniqueId(c, &id), ncclSuccess, NULL);
  expect("api230_comm_uid_second", ncclCommGetUniqueId(c, &second), IU, "one id at a time");
  expect("api230_grow_null_newcomm", ncclCommGrow(c, 3, NULL, -1, NULL, NULL), IA, "newcomm");
  expect("api230_grow_not_larger", ncclCommGrow(c, 2, NULL, -1, &nc, NULL), IA, "must exceed");
  mtResult(nc == NULL, "api230_grow_fail_sets_null", "*newcomm %p", (void*)nc);
  expect("api230_grow_existing_rank", ncclCommGrow(c, 3, NULL, 0, &nc, NULL), IA, "rank -1");
  expect("api230_grow_new_no_id", ncclCommGrow(NULL, 3, NULL, 2, &nc, NULL), IA, "uniqueId");
  expect("api230_grow_new_rank_range", ncclCommGrow(NULL, 3, &id, 3, &nc, NULL), IA, "outside");
  expect("api230_grow_new_rank_negative", ncclCommGrow(NULL, 3, &id, -1, &nc, NULL), IA, "outside");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0;
  expect("api230_grow_bad_config", ncclCommGrow(c, 3, NULL, -1, &nc, &cfg), IA, "NCCL_CONFIG_INITIALIZER");
  expect("api230_grow_new_not_grow_id", ncclCommGrow(NULL, 3, &zero, 2, &nc, NULL), IA, "ncclCommGetUniqueId");
  expect("api230_grow_new_rank_collides", ncclCommGrow(NULL, 3, &id, 1, &nc, NULL), IA, "collides");
  expect("api230_grow_new_not_larger", ncclCommGrow(NULL, 2, &id, 1, &nc, NULL), IA, "must exceed");
  expect("api230_grow_existing_other_id", ncclCommGrow(c, 3, &zero, -1, &nc, NULL), IA, "refused");
  mtResult(nc == NULL, "api230_grow_refused_null", "*newcomm %p", (void*)nc);
}

static void oneSidedErrors(void) {
  ncclComm_t c = comms[0];
  float buf[4] = {0};
  ncclWindow_t win = (ncclWindow_t)buf;
  expect("api230_put_null_comm", ncclPutSignal(buf, 4, ncclFloat, 1, win, 0, 0, 0, 0, NULL, NULL), IA, "communicator");
  expect("api230_put_peer", ncclPutSignal(buf, 4, ncclFloat, 2, win, 0, 0, 0, 0, c, NULL), IA, "peer");
  expect("api230_put_type", ncclPutSignal(buf, 4, (ncclDataType_t)12, 1, win, 0, 0, 0, 0, c, NULL), IA, "datatype");
  expect("api230_put_null_buf", ncclPutSignal(NULL, 4, ncclFloat, 1, win, 0, 0, 0, 0, c, NULL), IA, "localbuff");
  expect("api230_put_flags", ncclPutSignal(buf, 4, ncclFloat, 1, win, 0, 0, 0, 1, c, NULL), IA, "flags");
  expect("api230_put_sig", ncclPutSignal(buf, 4, ncclFloat, 1, win, 0, -1, 0, 0, c, NULL), IA, "sigIdx");
  expect("api230_put_stream", ncclPutSignal(buf, 4, ncclFloat, 1, win, 0, 0, 0, 0, c, (cudaStream_t)buf), IA,
         "stream");
  expect("api230_put_before_window", ncclPutSignal(buf, 4, ncclFloat, 1, win, 0, 0, 0, 0, c, NULL), IU, "register one");
  expect("api230_signal_ctx", ncclSignal(1, 0, -1, 0, c, NULL), IA, "ctx");
  expect("api230_signal_peer", ncclSignal(-1, 0, 0, 0, c, NULL), IA, "peer");
  expect("api230_signal_before_window", ncclSignal(1, 0, 0, 0, c, NULL), IU, "register one");
  ncclWaitSignalDesc_t d[2] = {{1, 1, 0, 0}, {1, 5, 0, 0}};
  expect("api230_wait_ndesc", ncclWaitSignal(-1, d, c, NULL), IA, "nDesc");
  expect("api230_wait_null_descs", ncclWaitSignal(1, NULL, c, NULL), IA, "signalDescs");
  expect("api230_wait_bad_peer", ncclWaitSignal(2, d, c, NULL), IA, "peer");
  d[1].peer = 0;
  d[1].opCnt = -1;
  expect("api230_wait_bad_opcnt", ncclWaitSignal(2, d, c, NULL), IA, "opCnt");
  expect("api230_wait_before_window", ncclWaitSignal(1, d, c, NULL), IU, "register one");
  void* p = buf;
  expect("api230_winptr_null_out", ncclWinGetUserPtr(c, win, NULL), IA, "outUserPtr");
  expect("api230_winptr_null_win", ncclWinGetUserPtr(c, NULL, &p), IA, "window is NULL");
  mtResult(p == NULL, "api230_winptr_sets_null", "%p", p);
  expect("api230_winptr_foreign_win", ncclWinGetUserPtr(c, win, &p), IA, "not a live window");
  expect("api230_window_deregister_foreign", ncclCommWindowDeregister(c, win), IA, "not a live window");
}

/* Ranks as threads of one process (p2p connectors): windows registered in a group from one thread,
 * a put and signals from rank 0 to rank 1, waited for on rank 1. */
static void oneSidedThreads(void) {
  static float w[2][256], small[2][4], src[256];
  ncclWindow_t win[2] = {NULL, NULL}, win2[2] = {NULL, NULL};
  ncclGroupStart(); /* two windows per rank in one group: numbered in call order on both ranks */
  for (int r = 0; r < 2; r++) {
    ncclCommWindowRegister(comms[r], small[r], sizeof(small[r]), &win2[r], 0);
    ncclCommWindowRegister(comms[r], w[r], sizeof(w[r]), &win[r], NCCL_WIN_STRICT_ORDERING);
  }
  expect("api230_window_register_group", ncclGroupEnd(), ncclSuccess, NULL);
  mtResult(win[0] && win[1] && win[0] != win[1] && win2[0] && win2[0] != win[0], "api230_window_handles",
           "%p %p %p", (void*)win[0], (void*)win[1], (void*)win2[0]);
  expect("api230_put_small_window_range", ncclPutSignal(src, 5, ncclFloat, 1, win2[0], 0, 0, 0, 0, comms[0], NULL), IA,
         "do not fit");
  void* p = NULL;
  expect("api230_winptr", ncclWinGetUserPtr(comms[1], win[1], &p), ncclSuccess, NULL);
  mtResult(p == w[1], "api230_winptr_value", "%p, want %p", p, (void*)w[1]);
  expect("api230_winptr_other_comm", ncclWinGetUserPtr(comms[0], win[1], &p), IA, "not a live window");
  for (int i = 0; i < 256; i++) src[i] = (float)(i * 3 + 1);
  expect("api230_put", ncclPutSignal(src, 200, ncclFloat, 1, win[0], 8 * sizeof(float), 0, 0, 0, comms[0], NULL),
         ncclSuccess, NULL);
  expect("api230_signal", ncclSignal(1, 7, 0, 0, comms[0], NULL), ncclSuccess, NULL);
  ncclWaitSignalDesc_t d[2] = {{1, 0, 0, 0}, {1, 0, 7, 0}};
  expect("api230_wait", ncclWaitSignal(2, d, comms[1], NULL), ncclSuccess, NULL);
  int bad = 0;
  for (int i = 0; i < 256; i++) bad += w[1][i] != (i >= 8 && i < 208 ? (float)((i - 8) * 3 + 1) : 0.0f);
  mtResult(bad == 0, "api230_put_exact", "%d wrong elements", bad);
  for (int r = 0; r < 2; r++) {
    expect("api230_window_deregister", ncclCommWindowDeregister(comms[r], win[r]), ncclSuccess, NULL);
    expect("api230_window_deregister", ncclCommWindowDeregister(comms[r], win2[r]), ncclSuccess, NULL);
  }
  expect("api230_window_deregister_twice", ncclCommWindowDeregister(comms[0], win[0]), IA, "not a live window");
}

int main(void) {
  if (!mtStart("api230", 120)) return mtExitCode();
  /* Values the parameter checks expect; set before the library reads (and caches) any of them. */
  setenv("NCCL_BUFFSIZE", "1048576", 1);
  setenv("MEND_PERF_CTRL_TIMEOUT", "-3", 1);
  setenv("MEND_TESTBED_HOST", "3", 1);
  setenv("MEND_TESTBED_JOB", "job7", 1);
  unsetenv("MEND_PROBE_INTERVAL");
  unsetenv("NCCL_COMM_BLOCKING");
  unsetenv("NCCL_DEBUG_FILE");
  if (getenv("NCCL_DEBUG") == NULL) setenv("NCCL_DEBUG", "WARN", 1);
  int version = 0;
  ncclGetVersion(&version);
  mtResult(version == NCCL_VERSION_CODE && version == 23007, "api230_version", "%d", version);
  mtResult(strstr(ncclGetErrorString(ncclTimeout), "timeout") != NULL, "api230_timeout_string", "%s",
           ncclGetErrorString(ncclTimeout));
  everyRow();
  knownRows();
  paramErrors();
  dumpAll();
  ncclResult_t res = ncclCommInitAll(comms, 2, NULL);
  mtResult(res == ncclSuccess, "api230_initall", "%s", ncclGetErrorString(res));
  if (res != ncclSuccess) return mtExitCode();
  suspendResume();
  growErrors();
  oneSidedErrors();
  oneSidedThreads();
  mtResult(allReduceOk(64), "api230_still_works", "wrong results");
  ncclCommDestroy(comms[0]);
  ncclCommDestroy(comms[1]);
  return mtExitCode();
}
