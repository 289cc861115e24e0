#include "gpu_util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int gpuErrSet(struct gpuErr* e, const char* fmt, ...) {
  if (e->msg[0] != '\0') return 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
  va_end(ap);
  return 0;
}

int gpuStart(const char* test, int watchdogSeconds) {
  /* Ranks as threads share the context: their streams need distinct hardware queues (see
   * CUDA_DEVICE_MAX_CONNECTIONS in mend-info --params).  Before the first CUDA call; a set value stays. */
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n <= 0) {
    printf("# skip %s: no usable CUDA device (cudaGetDeviceCount: %s, %d devices)\n", test,
           err == cudaSuccess ? "no error" : cudaGetErrorString(err), err == cudaSuccess ? n : 0);
    fflush(stdout);
    exit(77);
  }
  if (gpuDevice() >= n) {
    printf("# skip %s: MEND_TEST_GPU_DEVICE=%d but only %d devices\n", test, gpuDevice(), n);
    fflush(stdout);
    exit(77);
  }
  return mtStart(test, watchdogSeconds);
}

int gpuDevice(void) {
  const char* s = getenv("MEND_TEST_GPU_DEVICE");
  return s && *s ? atoi(s) : 0;
}

int gpuUseDevice(struct gpuErr* e) {
  GCUDA(e, cudaSetDevice(gpuDevice()));
  GCUDA(e, cudaFree(NULL)); /* the primary context exists and is current from here on */
  return 1;
}

double gpuWaitLimit(void) {
  const char* s = getenv("MEND_TEST_GPU_WAIT_S");
  double v = s && *s ? atof(s) : 0;
  return v > 0 ? v : 120.0;
}

int gpuWaitStream(cudaStream_t s, double timeoutS, struct gpuErr* e) {
  double until = mtNow() + timeoutS;
  for (;;) {
    cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess) return 1;
    if (q != cudaErrorNotReady)
      return gpuErrSet(e, "cudaStreamQuery: %s (the stream's work failed)", cudaGetErrorString(q));
    if (mtNow() > until) return gpuErrSet(e, "the stream's work did not finish within %.0f s", timeoutS);
    usleep(50);
  }
}

/* ---- tally ---- */

void gpuTallyInit(struct gpuTally* t, int n) {
  memset(t, 0, sizeof(*t));
  pthread_mutex_init(&t->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&t->cv, &ca);
  pthread_condattr_destroy(&ca);
  t->n = n;
  t->ok = 1;
}

void gpuTallyFree(struct gpuTally* t) {
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
}

void gpuTallyBreak(struct gpuTally* t) {
  pthread_mutex_lock(&t->mu);
  t->broken = 1;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
}

/* The last rank of a round: print its line and open the next round.  Called with t->mu held. */
static int tallyClose(struct gpuTally* t, const char* name) {
  int ok = t->ok;
  t->lastOk = ok;
  if (name) mtResult(ok, name, "%s", t->why);
  else if (!ok) printf("# %s\n", t->why);
  t->arrived = 0;
  t->ok = 1;
  t->why[0] = '\0';
  t->round++;
  pthread_cond_broadcast(&t->cv);
  return ok;
}

int gpuTallyCase(struct gpuTally* t, const char* name, int rank, int ok, const char* why, double timeoutS) {
  pthread_mutex_lock(&t->mu);
  if (t->broken) {
    if (!ok) printf("# rank %d: %s: %s\n", rank, name ? name : "barrier", why);
    pthread_mutex_unlock(&t->mu);
    return -1;
  }
  if (!ok && t->ok) snprintf(t->why, sizeof(t->why), "rank %d: %s", rank, why);
  t->ok &= ok;
  if (++t->arrived == t->n) {
    int res = tallyClose(t, name);
    pthread_mutex_unlock(&t->mu);
    return res;
  }
  unsigned round = t->round;
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += (time_t)timeoutS;
  int rc = 0;
  while (t->round == round && !t->broken && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&t->cv, &t->mu, &until);
  /* A round cannot close again before this rank arrives, so lastOk is still this round's verdict. */
  int res = t->round != round ? t->lastOk : -1;
  if (t->round == round && !t->broken) {
    /* This rank gave up on the others: the case fails, and so does every later round. */
    mtResult(0, name ? name : "barrier", "rank %d waited %.0f s for %d other ranks (%s)", rank, timeoutS,
             t->n - t->arrived, t->ok ? "none had failed" : t->why);
    t->broken = 1;
    pthread_cond_broadcast(&t->cv);
  }
  pthread_mutex_unlock(&t->mu);
  return res;
}

/* ---- data types ---- */

size_t gpuTypeSize(ncclDataType_t t) {
  switch (t) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  default: return 8;
  }
}

const char* gpuTypeName(ncclDataType_t t) {
  static const char* names[] = {"int8",    "uint8",   "int32",    "uint32",  "int64",   "uint64",
                                "float16", "float32", "float64",  "bfloat16", "fp8e4m3", "fp8e5m2"};
  return (int)t >= 0 && (int)t < ncclNumTypes ? names[t] : "?";
}

int gpuTypeIsFloat(ncclDataType_t t) { return t >= ncclFloat16 && t < ncclNumTypes; }

int gpuTypeIsSigned(ncclDataType_t t) {
  return t == ncclInt8 || t == ncclInt32 || t == ncclInt64 || gpuTypeIsFloat(t);
}

double gpuTypeExactMax(ncclDataType_t t) {
  switch (t) {
  case ncclInt8: return 127;
  case ncclUint8: return 255;
  case ncclFloat16: return 2048;      /* 11 significant bits */
  case ncclBfloat16: return 256;      /* 8 significant bits */
  case ncclFloat8e4m3: return 16;     /* 4 significant bits */
  case ncclFloat8e5m2: return 8;      /* 3 significant bits */
  case ncclInt32: case ncclUint32: return 2147483647.0;
  case ncclFloat32: return 16777216.0;
  default: return 9007199254740992.0; /* 2^53: the reference is computed in double */
  }
}

/* An IEEE-like binary float with eBits exponent and mBits mantissa bits, from a value it holds exactly. */
static uint32_t miniEncode(double v, int eBits, int mBits) {
  uint32_t sign = v < 0 || (v == 0 && signbit(v));
  double a = fabs(v);
  if (a == 0) return sign << (eBits + mBits);
  int bias = (1 << (eBits - 1)) - 1, e2;
  frexp(a, &e2); /* a = f * 2^e2 with f in [0.5, 1) */
  int exp = e2 - 1 + bias;
  uint32_t mant;
  if (exp <= 0) { /* subnormal: a = mant * 2^(1 - bias - mBits) */
    exp = 0;
    mant = (uint32_t)lrint(ldexp(a, bias - 1 + mBits));
  } else {
    mant = (uint32_t)lrint(ldexp(a, -(e2 - 1)) * (1 << mBits)) - (1u << mBits);
  }
  return sign << (eBits + mBits) | (uint32_t)exp << mBits | mant;
}

/* The value of such a float.  e4m3 ("fn") has no infinities: only S.1111.111 is NaN. */
static double miniDecode(uint32_t bits, int eBits, int mBits, int fn) {
  int bias = (1 << (eBits - 1)) - 1, expMax = (1 << eBits) - 1;
  uint32_t sign = bits >> (eBits + mBits) & 1, mant = bits & ((1u << mBits) - 1);
  int exp = (int)(bits >> mBits & (uint32_t)expMax);
  double v;
  if (fn && exp == expMax && mant == (1u << mBits) - 1) v = NAN;
  else if (!fn && exp == expMax) v = mant ? NAN : INFINITY;
  else if (exp == 0) v = ldexp((double)mant, 1 - bias - mBits);
  else v = ldexp(1.0 + (double)mant / (1 << mBits), exp - bias);
  return sign ? -v : v;
}

void gpuPut(ncclDataType_t t, void* p, size_t i, double v) {
  switch (t) {
  case ncclInt8: ((int8_t*)p)[i] = (int8_t)v; break;
  case ncclUint8: ((uint8_t*)p)[i] = (uint8_t)v; break;
  case ncclInt32: ((int32_t*)p)[i] = (int32_t)v; break;
  case ncclUint32: ((uint32_t*)p)[i] = (uint32_t)v; break;
  case ncclInt64: ((int64_t*)p)[i] = (int64_t)v; break;
  case ncclUint64: ((uint64_t*)p)[i] = (uint64_t)v; break;
  case ncclFloat16: ((uint16_t*)p)[i] = (uint16_t)miniEncode(v, 5, 10); break;
  case ncclFloat32: ((float*)p)[i] = (float)v; break;
  case ncclFloat64: ((double*)p)[i] = v; break;
  case ncclBfloat16: {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    ((uint16_t*)p)[i] = (uint16_t)(u >> 16); /* exact values: the low half is zero */
    break;
  }
  case ncclFloat8e4m3: ((uint8_t*)p)[i] = (uint8_t)miniEncode(v, 4, 3); break;
  case ncclFloat8e5m2: ((uint8_t*)p)[i] = (uint8_t)miniEncode(v, 5, 2); break;
  default: break;
  }
}

double gpuGet(ncclDataType_t t, const void* p, size_t i) {
  switch (t) {
  case ncclInt8: return ((const int8_t*)p)[i];
  case ncclUint8: return ((const uint8_t*)p)[i];
  case ncclInt32: return ((const int32_t*)p)[i];
  case ncclUint32: return ((const uint32_t*)p)[i];
  case ncclInt64: return (double)((const int64_t*)p)[i];
  case ncclUint64: return (double)((const uint64_t*)p)[i];
  case ncclFloat16: return miniDecode(((const uint16_t*)p)[i], 5, 10, 0);
  case ncclFloat32: return ((const float*)p)[i];
  case ncclFloat64: return ((const double*)p)[i];
  case ncclBfloat16: {
    uint32_t u = (uint32_t)((const uint16_t*)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  case ncclFloat8e4m3: return miniDecode(((const uint8_t*)p)[i], 4, 3, 1);
  case ncclFloat8e5m2: return miniDecode(((const uint8_t*)p)[i], 5, 2, 0);
  default: return NAN;
  }
}
