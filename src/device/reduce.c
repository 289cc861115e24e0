/*
 * Reductions on the host: op resolution (validation, avg and PreMulSum lowering) and the
 * dispatch into the generated per-(type, kind) loops.  Semantics are documented in reduce.h.
 */
/* The loops below are simple enough to vectorize, but -O2 only vectorizes loops that need no
 * remainder or aliasing check; allow those here (the dispatch overhead is per chunk, not element). */
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")

#include "device/reduce.h"

#include <pthread.h>
#include <string.h>

#include "checks.h"
#include "comm.h"
#include "misc/param.h"

/* The generated loops (gen_reduce.h) share these parameter lists and typed views of the buffers. */
#define RED_PARAMS const struct mendRedOp *op, void *dst, const void *x, const void *y, size_t n, int flags
#define COPY_PARAMS const struct mendRedOp *op, void *dst, const void *x, size_t n, int flags
#define RED_PTRS(U) U* d = (U*)dst; const U* a = (const U*)x; const U* b = (const U*)y
#define COPY_PTRS(U) U* d = (U*)dst; const U* a = (const U*)x
typedef void (*mendRedFn)(RED_PARAMS);
typedef void (*mendRedCopyFn)(COPY_PARAMS);

/* The PreMulSum scalar, read on every call: a device-residence scalar may change between calls. */
static inline void redScalar(const struct mendRedOp* op, void* s, size_t size) {
  memcpy(s, op->scalarPtr ? op->scalarPtr : (const void*)&op->scalar, size);
}

static inline void copyPlain(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes) memmove(dst, src, bytes);
}

/* The AVX2 (with F16C) and AVX-512 loops of the narrow floats (x86-64 compilers with target
 * attributes): compiled for that ISA whatever the build's -march, and run only where the CPU reports
 * it.  No FMA in the AVX2 target: every multiply and add rounds on its own, as dtypes.h's do. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#define MEND_RED_V3 1
#define MEND_RED_V3_TARGET __attribute__((target("avx2,f16c")))
#define MEND_RED_V4 1
#define MEND_RED_V4_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c")))
#include "device/reduce_x86.h"
#else
#define MEND_RED_V3 0
#define MEND_RED_V4 0
#endif
/* A third set where the compiler knows AVX512_BF16 and AVX512_VBMI (and can ask the CPU for them:
 * the versions below are the ones known to): bf16 rounded by the CPU's
 * conversion, fp8 decoded by byte unpacks (e4m3 through byte permutes). */
#if MEND_RED_V4 && ((defined(__clang__) && __clang_major__ >= 16) || (!defined(__clang__) && __GNUC__ >= 12))
#define MEND_RED_V4B 1
#define MEND_RED_V4B_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c,avx512bf16,avx512vbmi")))
#else
#define MEND_RED_V4B 0
#endif

#include "device/reduce_fp8.h"
#if MEND_RED_V3
#include "device/reduce_x86_v3.h"
#endif
#if MEND_RED_V4
#include "device/reduce_x86_fp8.h"
#include "device/reduce_x86_bf16.h"
#endif
#include "device/gen_reduce.h"

typedef const mendRedFn (*redTableRef)[MEND_RED_NKINDS];
typedef const mendRedCopyFn (*copyTableRef)[MEND_RED_NKINDS];
static redTableRef redActive = redTable;
static copyTableRef copyActive = copyTable;
static int vecActive, vecAvailable;
static pthread_once_t vecOnce = PTHREAD_ONCE_INIT;

#if MEND_RED_V4B
/* The V4 tables with the third set's bf16 and fp8 entries (filled once, in vecPick). */
static mendRedFn redTableV4B[ncclNumTypes][MEND_RED_NKINDS];
static mendRedCopyFn copyTableV4B[ncclNumTypes][MEND_RED_NKINDS];
#endif

/* The tables of set vec (MEND_RED_SET_*), or of the best set the CPU has under it. */
static void vecTables(int vec, redTableRef* red, copyTableRef* copy) {
  *red = redTable;
  *copy = copyTable;
#if MEND_RED_V3
  if (vec >= MEND_RED_SET_AVX2 && vecAvailable >= MEND_RED_SET_AVX2) {
    *red = redTableV3;
    *copy = copyTableV3;
  }
#endif
#if MEND_RED_V4
  if (vec >= MEND_RED_SET_AVX512 && vecAvailable >= MEND_RED_SET_AVX512) {
    *red = redTableV4;
    *copy = copyTableV4;
  }
#endif
#if MEND_RED_V4B
  if (vec >= MEND_RED_SET_AVX512B && vecAvailable >= MEND_RED_SET_AVX512B) {
    *red = (redTableRef)redTableV4B;
    *copy = (copyTableRef)copyTableV4B;
  }
#endif
}

#if MEND_RED_V3
/* F16C from CPUID leaf 1 (ECX bit 29): not every compiler's __builtin_cpu_supports knows "f16c". */
static int cpuHasF16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

static void vecPick(void) {
#if MEND_RED_V3
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && cpuHasF16c()) vecAvailable = MEND_RED_SET_AVX2;
#endif
#if MEND_RED_V4
  if (vecAvailable && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    vecAvailable = MEND_RED_SET_AVX512;
#endif
#if MEND_RED_V4B
  if (vecAvailable == MEND_RED_SET_AVX512 && __builtin_cpu_supports("avx512bf16") &&
      __builtin_cpu_supports("avx512vbmi")) {
    vecAvailable = MEND_RED_SET_AVX512B;
    f8DecFill();
    memcpy(redTableV4B, redTableV4, sizeof redTableV4B);
    memcpy(copyTableV4B, copyTableV4, sizeof copyTableV4B);
#define V4B_ROW(type, Tag)                                              \
  redTableV4B[type][MEND_RED_SUM] = redSum##Tag##V4B;                   \
  redTableV4B[type][MEND_RED_PROD] = redProd##Tag##V4B;                 \
  redTableV4B[type][MEND_RED_PREMULSUM] = redPreMulSum##Tag##V4B;       \
  copyTableV4B[type][MEND_RED_PREMULSUM] = copyPreMul##Tag##V4B;
    V4B_ROW(ncclBfloat16, Bf16)
    V4B_ROW(ncclFloat8e4m3, E4m3)
    V4B_ROW(ncclFloat8e5m2, E5m2)
#undef V4B_ROW
  }
#endif
  vecActive = mendParamReduceVec() != 0 ? vecAvailable : MEND_RED_SET_BASELINE;
  vecTables(vecActive, &redActive, &copyActive);
  INFO(NCCL_INIT, "Host reductions of half, bf16 and fp8: %s loops (MEND_REDUCE_VEC=%lld; the CPU's best: %s)",
       mendReduceSetName(vecActive), (long long)mendParamReduceVec(), mendReduceSetName(vecAvailable));
}

const char* mendReduceSetName(int vec) {
  switch (vec) {
    case MEND_RED_SET_BASELINE: return "baseline";
    case MEND_RED_SET_AVX2: return "AVX2 with F16C";
    case MEND_RED_SET_AVX512: return "AVX-512";
    case MEND_RED_SET_AVX512B: return "AVX-512 with AVX512_BF16 and VBMI";
    default: return "invalid";
  }
}

int mendReduceVec(void) {
  pthread_once(&vecOnce, vecPick);
  return vecActive;
}

int mendReduceVecAvailable(void) {
  pthread_once(&vecOnce, vecPick);
  return vecAvailable;
}

void mendReduce(const struct mendRedOp* op, void* dst, const void* local, const void* peer, size_t n, int flags) {
  pthread_once(&vecOnce, vecPick);
  redActive[op->type][op->kind](op, dst, local, peer, n, flags);
}

void mendReduceCopy(const struct mendRedOp* op, void* dst, const void* src, size_t n, int flags) {
  pthread_once(&vecOnce, vecPick);
  copyActive[op->type][op->kind](op, dst, src, n, flags);
}

void mendReduceWith(int vec, const struct mendRedOp* op, void* dst, const void* local, const void* peer, size_t n,
                    int flags) {
  redTableRef red;
  copyTableRef copy;
  pthread_once(&vecOnce, vecPick);
  vecTables(vec, &red, &copy);
  red[op->type][op->kind](op, dst, local, peer, n, flags);
}

void mendReduceCopyWith(int vec, const struct mendRedOp* op, void* dst, const void* src, size_t n, int flags) {
  redTableRef red;
  copyTableRef copy;
  pthread_once(&vecOnce, vecPick);
  vecTables(vec, &red, &copy);
  copy[op->type][op->kind](op, dst, src, n, flags);
}

static const uint8_t typeSizes[ncclNumTypes] = {
    [ncclInt8] = 1,    [ncclUint8] = 1,   [ncclInt32] = 4,    [ncclUint32] = 4,
    [ncclInt64] = 8,   [ncclUint64] = 8,  [ncclFloat16] = 2,  [ncclFloat32] = 4,
    [ncclFloat64] = 8, [ncclBfloat16] = 2, [ncclFloat8e4m3] = 1, [ncclFloat8e5m2] = 1,
};

static const char* const typeNames[ncclNumTypes] = {
    [ncclInt8] = "int8",       [ncclUint8] = "uint8",       [ncclInt32] = "int32",
    [ncclUint32] = "uint32",   [ncclInt64] = "int64",       [ncclUint64] = "uint64",
    [ncclFloat16] = "half",    [ncclFloat32] = "float",     [ncclFloat64] = "double",
    [ncclBfloat16] = "bfloat16", [ncclFloat8e4m3] = "f8e4m3", [ncclFloat8e5m2] = "f8e5m2",
};

static const char* const opNames[ncclNumOps] = {
    [ncclSum] = "sum", [ncclProd] = "prod", [ncclMax] = "max", [ncclMin] = "min", [ncclAvg] = "avg",
};

static const char* const kindNames[MEND_RED_NKINDS] = {
    [MEND_RED_SUM] = "sum", [MEND_RED_PROD] = "prod", [MEND_RED_MAX] = "max", [MEND_RED_MIN] = "min",
    [MEND_RED_PREMULSUM] = "premulsum", [MEND_RED_SUM_POSTDIV] = "sumpostdiv",
};

static int typeValid(ncclDataType_t type) { return (int)type >= 0 && (int)type < ncclNumTypes; }

size_t mendTypeSize(ncclDataType_t type) { return typeValid(type) ? typeSizes[type] : 0; }
const char* mendTypeName(ncclDataType_t type) { return typeValid(type) ? typeNames[type] : "invalid"; }

const char* mendOpName(ncclRedOp_t op) {
  if ((int)op < 0) return "invalid";
  return (int)op < ncclNumOps ? opNames[op] : "premulsum";
}

const char* mendRedKindName(int kind) {
  return kind >= 0 && kind < MEND_RED_NKINDS ? kindNames[kind] : "invalid";
}

static int typeIsInteger(ncclDataType_t type) { return type <= ncclUint64; }

/* 1/nRanks in `type`, as NCCL computes it: double reciprocal, via float for the narrow formats. */
static uint64_t avgScalar(ncclDataType_t type, int nRanks) {
  uint64_t bits = 0;
  double r = 1.0 / nRanks;
  float f = (float)r;
  uint16_t h;
  uint8_t b;
  switch (type) {
    case ncclFloat64: memcpy(&bits, &r, sizeof r); break;
    case ncclFloat32: memcpy(&bits, &f, sizeof f); break;
    case ncclFloat16: h = mendFloatToHalf(f); memcpy(&bits, &h, sizeof h); break;
    case ncclBfloat16: h = mendFloatToBf16(f); memcpy(&bits, &h, sizeof h); break;
    case ncclFloat8e4m3: b = mendFloatToE4m3(f); memcpy(&bits, &b, sizeof b); break;
    case ncclFloat8e5m2: b = mendFloatToE5m2(f); memcpy(&bits, &b, sizeof b); break;
    default: break; /* integers use SUM_POSTDIV */
  }
  return bits;
}

ncclResult_t mendRedOpResolve(ncclRedOp_t op, ncclDataType_t type, int nRanks, struct mendRedOp* out) {
  MENDARGCHECK(out != NULL, ncclInvalidArgument, "mendRedOpResolve: NULL output");
  MENDARGCHECK(typeValid(type), ncclInvalidArgument, "Invalid datatype %d (valid: 0..%d)", (int)type,
               ncclNumTypes - 1);
  MENDARGCHECK((int)op >= 0 && (int)op < ncclNumOps, ncclInvalidArgument,
               "Invalid reduction operation %d for a builtin op (valid: 0..%d)", (int)op, ncclNumOps - 1);
  MENDARGCHECK(nRanks >= 1, ncclInvalidArgument, "Invalid rank count %d for a reduction", nRanks);
  static const uint8_t builtin[] = {[ncclSum] = MEND_RED_SUM, [ncclProd] = MEND_RED_PROD,
                                    [ncclMax] = MEND_RED_MAX, [ncclMin] = MEND_RED_MIN};
  memset(out, 0, sizeof *out);
  out->type = (uint8_t)type;
  out->nRanks = 1;
  if (op != ncclAvg) {
    out->kind = builtin[op];
  } else if (typeIsInteger(type)) {
    out->kind = MEND_RED_SUM_POSTDIV; /* exact sum, one truncating division at the end */
    out->nRanks = nRanks;
  } else {
    out->kind = MEND_RED_PREMULSUM; /* each rank scales its own input by 1/nRanks */
    out->scalar = avgScalar(type, nRanks);
  }
  return ncclSuccess;
}

ncclResult_t mendRedOpResolvePreMulSum(ncclDataType_t opType, int residence, uint64_t scalar, const void* scalarPtr,
                                       ncclDataType_t type, struct mendRedOp* out) {
  MENDARGCHECK(out != NULL, ncclInvalidArgument, "mendRedOpResolvePreMulSum: NULL output");
  MENDARGCHECK(typeValid(type), ncclInvalidArgument, "Invalid datatype %d (valid: 0..%d)", (int)type,
               ncclNumTypes - 1);
  MENDARGCHECK(opType == type, ncclInvalidArgument,
               "Datatype %s supplied to a user-created reduction operation created for datatype %s",
               mendTypeName(type), mendTypeName(opType));
  MENDARGCHECK(residence == ncclScalarHostImmediate || residence == ncclScalarDevice, ncclInvalidArgument,
               "User-created reduction operation has invalid scalar residence %d", residence);
  MENDARGCHECK(residence != ncclScalarDevice || scalarPtr != NULL, ncclInvalidArgument,
               "User-created reduction operation has a NULL device scalar");
  memset(out, 0, sizeof *out);
  out->kind = MEND_RED_PREMULSUM;
  out->type = (uint8_t)type;
  out->nRanks = 1;
  if (residence == ncclScalarHostImmediate) {
    memcpy(&out->scalar, &scalar, mendTypeSize(type)); /* only the datatype's bytes are meaningful */
  } else {
    out->scalarPtr = scalarPtr;
  }
  return ncclSuccess;
}

ncclResult_t mendRedOpResolveUser(const struct mendUserRedOp* u, ncclDataType_t type, struct mendRedOp* out) {
  MENDARGCHECK(u != NULL, ncclInvalidArgument, "mendRedOpResolveUser: NULL user op");
  MENDARGCHECK(u->used, ncclInvalidArgument,
               "User-created reduction operation is not valid (destroyed or never created)");
  return mendRedOpResolvePreMulSum(u->datatype, u->residence, u->scalar, u->devScalar, type, out);
}

ncclResult_t mendRedOpResolveComm(struct ncclComm* comm, ncclRedOp_t op, ncclDataType_t type, struct mendRedOp* out) {
  MENDARGCHECK(comm != NULL, ncclInvalidArgument, "mendRedOpResolveComm: NULL communicator");
  MENDARGCHECK((int)op >= 0, ncclInvalidArgument, "Invalid reduction operation %d", (int)op);
  if ((int)op < ncclNumOps) return mendRedOpResolve(op, type, comm->nRanks, out);
  int slot = (int)op - ncclNumOps;
  MENDARGCHECK(slot < MEND_MAX_USER_REDOPS, ncclInvalidArgument,
               "Invalid reduction operation %d (no such user-created op)", (int)op);
  struct mendUserRedOp u;
  pthread_mutex_lock(&comm->lock); /* a concurrent ncclRedOpDestroy/Create rewrites the slot */
  u = comm->userRedOps[slot];
  pthread_mutex_unlock(&comm->lock);
  return mendRedOpResolveUser(&u, type, out);
}
