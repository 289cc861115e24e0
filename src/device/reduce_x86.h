/*
 * Half-precision reductions with F16C on AVX-512 (x86-64), included by src/device/reduce.c where
 * MEND_RED_V4 is 1.  Sixteen halves at a time: vcvtph2ps (exact), the float operation, vcvtps2ph
 * with round-to-nearest-even: the same IEEE steps as dtypes.h's mendSumF16 etc., so the results are
 * the same bits (tests/unit/test_reduce_vec.cc compares every loop with the baseline one).  Max and
 * min compare in float and return an operand's own bits, as the scalar code does.  The tail (n not
 * a multiple of 16) runs the scalar code.
 */
#ifndef MEND_DEVICE_REDUCE_X86_H_
#define MEND_DEVICE_REDUCE_X86_H_

#include <immintrin.h>

#define H16_LOAD(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(const void*)(p)))
#define H16_ROUND(v) _mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define H16_STORE(p, v) _mm256_storeu_si256((__m256i*)(void*)(p), H16_ROUND(v))
/* A value rounded to half and read back (what a scalar step that returns a half leaves). */
#define H16_REREAD(v) _mm512_cvtph_ps(H16_ROUND(v))

typedef uint16_t mendUF16V __attribute__((aligned(1)));

/* Half's loops but max and min, for one vector set: NAME its suffix (V3, V4), T its target attribute,
 * W halves a step.  LOAD(p): W halves as floats (exact); STORE(p, v): W floats as halves rounded to
 * nearest even; REREAD(v): floats rounded to half and back (what a scalar step that returns a half
 * leaves); SET1, ADD, MUL, DIV: the float vector's operations.  The tails run dtypes.h's code. */
#define H_VEC_LOOPS(NAME, T, W, LOAD, STORE, REREAD, SET1, ADD, MUL, DIV)                          \
  /* d = op(a, b) in float, rounded once. */                                                       \
  T static void redSumF16##NAME(RED_PARAMS) {                                                      \
    RED_PTRS(mendUF16V);                                                                           \
    size_t i = 0;                                                                                  \
    for (; i + W <= n; i += W) STORE(d + i, ADD(LOAD(a + i), LOAD(b + i)));                        \
    for (; i < n; i++) d[i] = mendSumF16(a[i], b[i]);                                              \
  }                                                                                                \
  T static void redProdF16##NAME(RED_PARAMS) {                                                     \
    RED_PTRS(mendUF16V);                                                                           \
    size_t i = 0;                                                                                  \
    for (; i + W <= n; i += W) STORE(d + i, MUL(LOAD(a + i), LOAD(b + i)));                        \
    for (; i < n; i++) d[i] = mendProdF16(a[i], b[i]);                                             \
  }                                                                                                \
  /* PreMulSum: the own input times the scalar (rounded to half), then the sum (rounded). */       \
  T static void redPreMulSumF16##NAME(RED_PARAMS) {                                                \
    if (!(flags & MEND_RED_PREOP)) {                                                               \
      redSumF16##NAME(op, dst, x, y, n, flags);                                                    \
      return;                                                                                      \
    }                                                                                              \
    RED_PTRS(mendUF16V);                                                                           \
    uint16_t s;                                                                                    \
    redScalar(op, &s, sizeof s);                                                                   \
    const __typeof__(SET1(0.0f)) vs = SET1(mendHalfToFloat(s));                                    \
    size_t i = 0;                                                                                  \
    for (; i + W <= n; i += W) STORE(d + i, ADD(REREAD(MUL(LOAD(a + i), vs)), LOAD(b + i)));       \
    for (; i < n; i++) d[i] = mendSumF16(mendProdF16(a[i], s), b[i]);                              \
  }                                                                                                \
  /* SumPostDiv: the sum (rounded), divided by the rank count at the end (rounded). */             \
  T static void redSumPostDivF16##NAME(RED_PARAMS) {                                               \
    if (!(flags & MEND_RED_POSTOP)) {                                                              \
      redSumF16##NAME(op, dst, x, y, n, flags);                                                    \
      return;                                                                                      \
    }                                                                                              \
    RED_PTRS(mendUF16V);                                                                           \
    const __typeof__(SET1(0.0f)) vn = SET1((float)op->nRanks);                                     \
    size_t i = 0;                                                                                  \
    for (; i + W <= n; i += W) STORE(d + i, DIV(REREAD(ADD(LOAD(a + i), LOAD(b + i))), vn));       \
    for (; i < n; i++) d[i] = mendDivF16(mendSumF16(a[i], b[i]), (uint32_t)op->nRanks);            \
  }                                                                                                \
  T static void copyPreMulF16##NAME(COPY_PARAMS) {                                                 \
    if (!(flags & MEND_RED_PREOP)) {                                                               \
      copyPlain(dst, x, n * sizeof(uint16_t));                                                     \
      return;                                                                                      \
    }                                                                                              \
    COPY_PTRS(mendUF16V);                                                                          \
    uint16_t s;                                                                                    \
    redScalar(op, &s, sizeof s);                                                                   \
    const __typeof__(SET1(0.0f)) vs = SET1(mendHalfToFloat(s));                                    \
    size_t i = 0;                                                                                  \
    for (; i + W <= n; i += W) STORE(d + i, MUL(LOAD(a + i), vs));                                 \
    for (; i < n; i++) d[i] = mendProdF16(a[i], s);                                                \
  }                                                                                                \
  T static void copyPostDivF16##NAME(COPY_PARAMS) {                                                \
    if (!(flags & MEND_RED_POSTOP)) {                                                              \
      copyPlain(dst, x, n * sizeof(uint16_t));                                                     \
      return;                                                                                      \
    }                                                                                              \
    COPY_PTRS(mendUF16V);                                                                          \
    const __typeof__(SET1(0.0f)) vn = SET1((float)op->nRanks);                                     \
    size_t i = 0;                                                                                  \
    for (; i + W <= n; i += W) STORE(d + i, DIV(LOAD(a + i), vn));                                 \
    for (; i < n; i++) d[i] = mendDivF16(a[i], (uint32_t)op->nRanks);                              \
  }

H_VEC_LOOPS(V4, MEND_RED_V4_TARGET, 16, H16_LOAD, H16_STORE, H16_REREAD, _mm512_set1_ps, _mm512_add_ps,
            _mm512_mul_ps, _mm512_div_ps)

/* max: a when a > b or b is NaN, else b (min: a < b); the chosen operand's bits are kept. */
#define H16_SELECT(Name, cmp, sop)                                                   \
  MEND_RED_V4_TARGET static void Name(RED_PARAMS) {                                  \
    RED_PTRS(mendUF16V);                                                             \
    size_t i = 0;                                                                    \
    for (; i + 16 <= n; i += 16) {                                                   \
      __m512 x = H16_LOAD(a + i), y = H16_LOAD(b + i);                               \
      __mmask16 m = _mm512_cmp_ps_mask(x, y, cmp) | _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q); \
      __m256i va = _mm256_loadu_si256((const __m256i*)(const void*)(a + i));         \
      __m256i vb = _mm256_loadu_si256((const __m256i*)(const void*)(b + i));         \
      _mm256_storeu_si256((__m256i*)(void*)(d + i), _mm256_mask_blend_epi16(m, vb, va)); \
    }                                                                                \
    for (; i < n; i++) d[i] = sop(a[i], b[i]);                                       \
  }
H16_SELECT(redMaxF16V4, _CMP_GT_OQ, mendMaxF16)
H16_SELECT(redMinF16V4, _CMP_LT_OQ, mendMinF16)

#endif
