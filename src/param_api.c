/*
 * The NCCL 2.30 parameter API over Mend's one registry (misc/params.def, misc/param.c): every
 * NCCL_* and MEND_* row is readable by key and by handle.  Values are the registry's cached values,
 * exactly what the library itself uses (environment first, then the config file, then the default).
 *
 *   ncclParamBind         a handle per row; handles live as long as the process
 *   ncclParamGet{I,U}N    the value as that integer type; a value that does not fit, or a string row
 *                         whose value is not an integer, is ncclInvalidArgument with a WARN
 *   ncclParamGetStr       integer rows as decimal text, string rows as set ("" when unset)
 *   ncclParamGet          raw bytes: an int64_t for integer rows, the string with its NUL for strings
 *   ncclParamGetParameter by key, as ncclParamGetStr
 *   ncclParamGetAllParameterKeys  every NCCL_/MEND_ row's name, in registry order (the one CUDA
 *                                 variable the library reads is not an NCCL parameter)
 *   ncclParamDumpAll      one INFO ENV line per row (NCCL_DEBUG=INFO shows them); secrets print "(set)"
 * Strings returned are valid until the next call on the same thread (integer text lives in a
 * thread-local buffer; string values and keys live as long as the process).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "checks.h"
#include "misc/param.h"

#define PARAM_HANDLE_MAGIC 0x50524d48u /* "PRMH" */

struct ncclParamHandle {
  uint32_t magic; /* PARAM_HANDLE_MAGIC: tells a handle of ours from a stray pointer */
  int index;      /* registry row */
};

static pthread_once_t tablesOnce = PTHREAD_ONCE_INIT;
static struct ncclParamHandle* handles; /* [mendParamCount()], never freed: handles are process-long */
static const char** keys;               /* the NCCL_/MEND_ rows' names */
static int nKeys;                       /* how many */
static _Thread_local char intText[32];  /* ncclParamGetStr of an integer row */

static void tablesInit(void) {
  int n = mendParamCount();
  handles = calloc((size_t)n, sizeof(*handles));
  keys = calloc((size_t)n, sizeof(*keys));
  if (handles == NULL || keys == NULL) {
    free(handles);
    free(keys);
    handles = NULL;
    keys = NULL;
    return;
  }
  for (int i = 0; i < n; i++) {
    handles[i].magic = PARAM_HANDLE_MAGIC;
    handles[i].index = i;
    const char* env = mendParamGet(i)->env;
    if (strncmp(env, "NCCL_", 5) == 0 || strncmp(env, "MEND_", 5) == 0) keys[nKeys++] = env;
  }
}

static ncclResult_t tables(const char* api) {
  pthread_once(&tablesOnce, tablesInit);
  MENDARGCHECK(handles != NULL, ncclSystemError, "%s: out of memory for the parameter table", api);
  return ncclSuccess;
}

static ncclResult_t checkHandle(ncclParamHandle_t h, const void* out, const char* api) {
  MENDARGCHECK(h != NULL, ncclInvalidArgument, "%s: parameter handle is NULL", api);
  MENDARGCHECK(h->magic == PARAM_HANDLE_MAGIC && h->index >= 0 && h->index < mendParamCount(), ncclInvalidArgument,
               "%s: %p is not a handle from ncclParamBind", api, (const void*)h);
  MENDARGCHECK(out != NULL, ncclInvalidArgument, "%s: output pointer is NULL (%s)", api, mendParamGet(h->index)->env);
  return ncclSuccess;
}

/* The row's value as text: decimal for integer rows, the string ("" when unset) for string rows. */
static const char* valueText(int i) {
  const struct mendParamInfo* p = mendParamGet(i);
  if (!p->isString) {
    snprintf(intText, sizeof(intText), "%" PRId64, mendParamIntAt(i));
    return intText;
  }
  const char* v = mendParamStrAt(i);
  return v ? v : "";
}

/* The row's value as a 64-bit integer; a string row must hold an integer. */
static ncclResult_t valueInt(ncclParamHandle_t h, int64_t* v, const char* api) {
  const struct mendParamInfo* p = mendParamGet(h->index);
  if (!p->isString) {
    *v = mendParamIntAt(h->index);
    return ncclSuccess;
  }
  const char* s = mendParamStrAt(h->index);
  MENDARGCHECK(s != NULL && mendParamParseInt(s, v), ncclInvalidArgument,
               "%s: %s is a string parameter whose value '%s' is not an integer", api, p->env, s ? s : "(unset)");
  return ncclSuccess;
}

static ncclResult_t rangeError(ncclParamHandle_t h, int64_t v, const char* api) {
  WARN("%s: %s = %" PRId64 " does not fit in the requested type", api, mendParamGet(h->index)->env, v);
  return ncclInvalidArgument;
}

NCCL_API(ncclResult_t, ncclParamBind, ncclParamHandle_t* out, const char* key);
ncclResult_t pncclParamBind(ncclParamHandle_t* out, const char* key) {
  MENDARGCHECK(out != NULL, ncclInvalidArgument, "ncclParamBind: out is NULL");
  *out = NULL;
  MENDARGCHECK(key != NULL, ncclInvalidArgument, "ncclParamBind: key is NULL");
  MENDCHECK(tables("ncclParamBind"));
  int i = mendParamFind(key);
  MENDARGCHECK(i >= 0, ncclInvalidArgument, "ncclParamBind: '%s' is not a parameter of Mend (mend-info --params)",
               key);
  *out = &handles[i];
  return ncclSuccess;
}

/* One typed getter: read as int64_t, check the range of the type, store. */
#define PARAM_GETTER(Suffix, type, lo, hi)                                                         \
  NCCL_API(ncclResult_t, ncclParamGet##Suffix, ncclParamHandle_t h, type* out);                   \
  ncclResult_t pncclParamGet##Suffix(ncclParamHandle_t h, type* out) {                             \
    const char* api = "ncclParamGet" #Suffix;                                                      \
    MENDCHECK(checkHandle(h, out, api));                                                           \
    int64_t v;                                                                                     \
    MENDCHECK(valueInt(h, &v, api));                                                               \
    if (v < (int64_t)(lo) || v > (int64_t)(hi)) return rangeError(h, v, api);                     \
    *out = (type)v;                                                                                \
    return ncclSuccess;                                                                            \
  }

PARAM_GETTER(I8, int8_t, INT8_MIN, INT8_MAX)
PARAM_GETTER(I16, int16_t, INT16_MIN, INT16_MAX)
PARAM_GETTER(I32, int32_t, INT32_MIN, INT32_MAX)
PARAM_GETTER(U8, uint8_t, 0, UINT8_MAX)
PARAM_GETTER(U16, uint16_t, 0, UINT16_MAX)
PARAM_GETTER(U32, uint32_t, 0, UINT32_MAX)
PARAM_GETTER(U64, uint64_t, 0, INT64_MAX) /* registry integers are int64_t: negative ones do not fit */

/* int64_t takes every registry integer: no range to check (the macro's test would be vacuous). */
NCCL_API(ncclResult_t, ncclParamGetI64, ncclParamHandle_t h, int64_t* out);
ncclResult_t pncclParamGetI64(ncclParamHandle_t h, int64_t* out) {
  MENDCHECK(checkHandle(h, out, "ncclParamGetI64"));
  return valueInt(h, out, "ncclParamGetI64");
}

NCCL_API(ncclResult_t, ncclParamGetStr, ncclParamHandle_t h, const char** out);
ncclResult_t pncclParamGetStr(ncclParamHandle_t h, const char** out) {
  MENDCHECK(checkHandle(h, out, "ncclParamGetStr"));
  *out = valueText(h->index);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGet, ncclParamHandle_t h, void* out, int maxLen, int* len);
ncclResult_t pncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len) {
  MENDCHECK(checkHandle(h, out, "ncclParamGet"));
  MENDARGCHECK(len != NULL, ncclInvalidArgument, "ncclParamGet: len is NULL");
  MENDARGCHECK(maxLen >= 0, ncclInvalidArgument, "ncclParamGet: maxLen %d is negative", maxLen);
  const struct mendParamInfo* p = mendParamGet(h->index);
  int64_t v = 0;
  const void* src = &v;
  size_t need = sizeof(v);
  if (p->isString) {
    src = valueText(h->index);
    need = strlen(src) + 1;
  } else {
    v = mendParamIntAt(h->index);
  }
  *len = (int)need;
  MENDARGCHECK(need <= (size_t)maxLen, ncclInvalidArgument, "ncclParamGet: %s needs %zu bytes, maxLen is %d", p->env,
               need, maxLen);
  memcpy(out, src, need);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGetParameter, const char* key, const char** value, int* valueLen);
ncclResult_t pncclParamGetParameter(const char* key, const char** value, int* valueLen) {
  MENDARGCHECK(key != NULL && value != NULL && valueLen != NULL, ncclInvalidArgument,
               "ncclParamGetParameter: NULL argument (key %p, value %p, valueLen %p)", (const void*)key,
               (void*)value, (void*)valueLen);
  int i = mendParamFind(key);
  MENDARGCHECK(i >= 0, ncclInvalidArgument,
               "ncclParamGetParameter: '%s' is not a parameter of Mend (mend-info --params)", key);
  *value = valueText(i);
  *valueLen = (int)strlen(*value);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGetAllParameterKeys, const char*** table, int* tableLen);
ncclResult_t pncclParamGetAllParameterKeys(const char*** table, int* tableLen) {
  MENDARGCHECK(table != NULL && tableLen != NULL, ncclInvalidArgument,
               "ncclParamGetAllParameterKeys: NULL argument (table %p, tableLen %p)", (void*)table, (void*)tableLen);
  MENDCHECK(tables("ncclParamGetAllParameterKeys"));
  *table = keys;
  *tableLen = nKeys;
  return ncclSuccess;
}

NCCL_API(void, ncclParamDumpAll, void);
void pncclParamDumpAll(void) {
  int n = mendParamCount();
  INFO(NCCL_ENV, "Parameters of Mend (%d):", n);
  for (int i = 0; i < n; i++) {
    const struct mendParamInfo* p = mendParamGet(i);
    const char* v = valueText(i);
    int secret = strcmp(p->unit, "secret") == 0 && v[0] != '\0';
    INFO(NCCL_ENV, "  %s = %s%s%s", p->env, secret ? "(set)" : v, p->unit[0] ? " " : "", p->unit);
  }
}
