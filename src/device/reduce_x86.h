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

typedef uint16_t mendUF16V4 __attribute__((aligned(1)));

/* d = op(a, b) in float, rounded once. */
#define H16_BINARY(Name, vop, sop)                                                   \
  MEND_RED_V4_TARGET static void Name(RED_PARAMS) {                                  \
    RED_PTRS(mendUF16V4);                                                            \
    size_t i = 0;                                                                    \
    for (; i + 16 <= n; i += 16) H16_STORE(d + i, vop(H16_LOAD(a + i), H16_LOAD(b + i))); \
    for (; i < n; i++) d[i] = sop(a[i], b[i]);                                       \
  }
H16_BINARY(redSumF16V4, _mm512_add_ps, mendSumF16)
H16_BINARY(redProdF16V4, _mm512_mul_ps, mendProdF16)

/* max: a when a > b or b is NaN, else b (min: a < b); the chosen operand's bits are kept. */
#define H16_SELECT(Name, cmp, sop)                                                   \
  MEND_RED_V4_TARGET static void Name(RED_PARAMS) {                                  \
    RED_PTRS(mendUF16V4);                                                            \
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

/* PreMulSum: the own input times the scalar (rounded to half), then the sum (rounded). */
MEND_RED_V4_TARGET static void redPreMulSumF16V4(RED_PARAMS) {
  if (!(flags & MEND_RED_PREOP)) {
    redSumF16V4(op, dst, x, y, n, flags);
    return;
  }
  RED_PTRS(mendUF16V4);
  uint16_t s;
  redScalar(op, &s, sizeof s);
  __m512 vs = _mm512_set1_ps(mendHalfToFloat(s));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 p = H16_REREAD(_mm512_mul_ps(H16_LOAD(a + i), vs));
    H16_STORE(d + i, _mm512_add_ps(p, H16_LOAD(b + i)));
  }
  for (; i < n; i++) d[i] = mendSumF16(mendProdF16(a[i], s), b[i]);
}

/* SumPostDiv: the sum (rounded), divided by the rank count at the end (rounded). */
MEND_RED_V4_TARGET static void redSumPostDivF16V4(RED_PARAMS) {
  if (!(flags & MEND_RED_POSTOP)) {
    redSumF16V4(op, dst, x, y, n, flags);
    return;
  }
  RED_PTRS(mendUF16V4);
  __m512 vn = _mm512_set1_ps((float)op->nRanks);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 sum = H16_REREAD(_mm512_add_ps(H16_LOAD(a + i), H16_LOAD(b + i)));
    H16_STORE(d + i, _mm512_div_ps(sum, vn));
  }
  for (; i < n; i++) d[i] = mendDivF16(mendSumF16(a[i], b[i]), (uint32_t)op->nRanks);
}

MEND_RED_V4_TARGET static void copyPreMulF16V4(COPY_PARAMS) {
  if (!(flags & MEND_RED_PREOP)) {
    copyPlain(dst, x, n * sizeof(uint16_t));
    return;
  }
  COPY_PTRS(mendUF16V4);
  uint16_t s;
  redScalar(op, &s, sizeof s);
  __m512 vs = _mm512_set1_ps(mendHalfToFloat(s));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) H16_STORE(d + i, _mm512_mul_ps(H16_LOAD(a + i), vs));
  for (; i < n; i++) d[i] = mendProdF16(a[i], s);
}

MEND_RED_V4_TARGET static void copyPostDivF16V4(COPY_PARAMS) {
  if (!(flags & MEND_RED_POSTOP)) {
    copyPlain(dst, x, n * sizeof(uint16_t));
    return;
  }
  COPY_PTRS(mendUF16V4);
  __m512 vn = _mm512_set1_ps((float)op->nRanks);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) H16_STORE(d + i, _mm512_div_ps(H16_LOAD(a + i), vn));
  for (; i < n; i++) d[i] = mendDivF16(a[i], (uint32_t)op->nRanks);
}

#endif
