/*
 * fp8 sum and product on the host, by table: an fp8 operand has 256 values, so every sum and every
 * product of two operands is one of 65536 results, computed once (at first use, per format and
 * operation) by dtypes.h's own mendSumE4m3 etc. and then read: d[i] = table[a[i] << 8 | b[i]].
 * The results are those functions' bits by construction.  PreMulSum reads the product table with the
 * scalar as second operand, then the sum table.  Included by src/device/reduce.c (which defines
 * RED_PARAMS, RED_PTRS, COPY_PARAMS, COPY_PTRS, redScalar() and copyPlain()).  These loops serve the
 * baseline dispatch table and the tails of the AVX-512 loops (reduce_x86_fp8.h, which decode to half
 * and float, operate, and round back in vector lanes).  AVX-512 gathers of the tables were no
 * faster than these scalar reads (benchmarks/RESULTS.md, "Host reductions").
 */
#ifndef MEND_DEVICE_REDUCE_FP8_H_
#define MEND_DEVICE_REDUCE_FP8_H_

#include <pthread.h>

enum { FP8_E4M3 = 0, FP8_E5M2 = 1, FP8_SUM = 0, FP8_PROD = 1 };

static uint8_t fp8Tables[2][2][65536];
static pthread_once_t fp8Once[2][2] = {{PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT}, {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT}};

#define FP8_FILL(fmt, opn, fn)                                                           \
  static void fp8Fill##fmt##opn(void) {                                                  \
    uint8_t* t = fp8Tables[FP8_##fmt][FP8_##opn];                                        \
    for (uint32_t a = 0; a < 256; a++)                                                   \
      for (uint32_t b = 0; b < 256; b++) t[a << 8 | b] = fn((uint8_t)a, (uint8_t)b);     \
  }
FP8_FILL(E4M3, SUM, mendSumE4m3)
FP8_FILL(E4M3, PROD, mendProdE4m3)
FP8_FILL(E5M2, SUM, mendSumE5m2)
FP8_FILL(E5M2, PROD, mendProdE5m2)

static void (*const fp8Fill[2][2])(void) = {{fp8FillE4M3SUM, fp8FillE4M3PROD}, {fp8FillE5M2SUM, fp8FillE5M2PROD}};

static const uint8_t* fp8Table(int fmt, int opn) {
  pthread_once(&fp8Once[fmt][opn], fp8Fill[fmt][opn]);
  return fp8Tables[fmt][opn];
}

typedef uint8_t mendUFp8 __attribute__((aligned(1)));

/* d[i] = t[a[i] << 8 | b[i]] */
static inline void fp8Lookup(const uint8_t* t, mendUFp8* d, const mendUFp8* a, const mendUFp8* b, size_t n) {
  for (size_t i = 0; i < n; i++) d[i] = t[(uint32_t)a[i] << 8 | b[i]];
}
/* d[i] = t[a[i] << 8 | s] */
static inline void fp8LookupScalar(const uint8_t* t, mendUFp8* d, const mendUFp8* a, uint8_t s, size_t n) {
  for (size_t i = 0; i < n; i++) d[i] = t[(uint32_t)a[i] << 8 | s];
}
/* d[i] = sum[prod[a[i] << 8 | s] << 8 | b[i]] */
static inline void fp8LookupPreMul(const uint8_t* sum, const uint8_t* prod, mendUFp8* d, const mendUFp8* a,
                                   const mendUFp8* b, uint8_t s, size_t n) {
  for (size_t i = 0; i < n; i++) d[i] = sum[(uint32_t)prod[(uint32_t)a[i] << 8 | s] << 8 | b[i]];
}

#define FP8_LOOPS(Tag, FMT)                                                                         \
  static void redSum##Tag(RED_PARAMS) {                                                             \
    RED_PTRS(mendUFp8);                                                                             \
    fp8Lookup(fp8Table(FMT, FP8_SUM), d, a, b, n);                                                  \
  }                                                                                                 \
  static void redProd##Tag(RED_PARAMS) {                                                            \
    RED_PTRS(mendUFp8);                                                                             \
    fp8Lookup(fp8Table(FMT, FP8_PROD), d, a, b, n);                                                 \
  }                                                                                                 \
  static void redPreMulSum##Tag(RED_PARAMS) {                                                       \
    RED_PTRS(mendUFp8);                                                                             \
    if (!(flags & MEND_RED_PREOP)) {                                                                \
      fp8Lookup(fp8Table(FMT, FP8_SUM), d, a, b, n);                                                \
      return;                                                                                       \
    }                                                                                               \
    uint8_t s;                                                                                      \
    redScalar(op, &s, sizeof s);                                                                    \
    fp8LookupPreMul(fp8Table(FMT, FP8_SUM), fp8Table(FMT, FP8_PROD), d, a, b, s, n);                \
  }                                                                                                 \
  static void copyPreMul##Tag(COPY_PARAMS) {                                                        \
    if (!(flags & MEND_RED_PREOP)) {                                                                \
      copyPlain(dst, x, n);                                                                         \
      return;                                                                                       \
    }                                                                                               \
    COPY_PTRS(mendUFp8);                                                                            \
    uint8_t s;                                                                                      \
    redScalar(op, &s, sizeof s);                                                                    \
    fp8LookupScalar(fp8Table(FMT, FP8_PROD), d, a, s, n);                                           \
  }
FP8_LOOPS(E4m3, FP8_E4M3)
FP8_LOOPS(E5m2, FP8_E5M2)

/* The sum, product, PreMulSum and pre-multiplied copy loops of a vector set, W elements a step:
 * NAME is the set's suffix (V3, V4) and T its target attribute; STEP the prefix of its inline steps
 * (STEP##Sum##Tag(x, y) of two loads, STEP##Prod##Tag(x, y) of a load and decoded floats,
 * STEP##Decode##Tag(x)); LD and ST load and store W bytes, SPLAT(s) makes W copies of byte s.  The
 * tails (n mod W) read the tables above. */
#define FP8_VEC_LOOPS(Tag, FMT, NAME, T, W, STEP, LD, ST, SPLAT)                                   \
  T static void redSum##Tag##NAME(RED_PARAMS) {                                                    \
    RED_PTRS(mendUFp8);                                                                            \
    size_t i = 0;                                                                                  \
    for (; i + W <= n; i += W) ST(d + i, STEP##Sum##Tag(LD(a + i), LD(b + i)));                    \
    fp8Lookup(fp8Table(FMT, FP8_SUM), d + i, a + i, b + i, n - i);                                 \
  }                                                                                                \
  T static void redProd##Tag##NAME(RED_PARAMS) {                                                   \
    RED_PTRS(mendUFp8);                                                                            \
    size_t i = 0;                                                                                  \
    for (; i + W <= n; i += W) ST(d + i, STEP##Prod##Tag(LD(a + i), STEP##Decode##Tag(LD(b + i)))); \
    fp8Lookup(fp8Table(FMT, FP8_PROD), d + i, a + i, b + i, n - i);                                \
  }                                                                                                \
  T static void redPreMulSum##Tag##NAME(RED_PARAMS) {                                              \
    if (!(flags & MEND_RED_PREOP)) {                                                               \
      redSum##Tag##NAME(op, dst, x, y, n, flags);                                                  \
      return;                                                                                      \
    }                                                                                              \
    RED_PTRS(mendUFp8);                                                                            \
    uint8_t s;                                                                                     \
    redScalar(op, &s, sizeof s);                                                                   \
    const __typeof__(STEP##Decode##Tag(SPLAT(s))) vs = STEP##Decode##Tag(SPLAT(s));               \
    size_t i = 0;                                                                                  \
    for (; i + W <= n; i += W) /* the product is rounded to fp8 before the sum */                  \
      ST(d + i, STEP##Sum##Tag(STEP##Prod##Tag(LD(a + i), vs), LD(b + i)));                        \
    fp8LookupPreMul(fp8Table(FMT, FP8_SUM), fp8Table(FMT, FP8_PROD), d + i, a + i, b + i, s, n - i); \
  }                                                                                                \
  T static void copyPreMul##Tag##NAME(COPY_PARAMS) {                                               \
    if (!(flags & MEND_RED_PREOP)) {                                                               \
      copyPlain(dst, x, n);                                                                        \
      return;                                                                                      \
    }                                                                                              \
    COPY_PTRS(mendUFp8);                                                                           \
    uint8_t s;                                                                                     \
    redScalar(op, &s, sizeof s);                                                                   \
    const __typeof__(STEP##Decode##Tag(SPLAT(s))) vs = STEP##Decode##Tag(SPLAT(s));               \
    size_t i = 0;                                                                                  \
    for (; i + W <= n; i += W) ST(d + i, STEP##Prod##Tag(LD(a + i), vs));                          \
    fp8LookupScalar(fp8Table(FMT, FP8_PROD), d + i, a + i, s, n - i);                              \
  }

#endif
