/*
 * bfloat16 sum, product and PreMulSum with AVX-512 (x86-64), included by src/device/reduce.c where
 * MEND_RED_V4 is 1.  Sixteen elements at a time: a bf16 is the top half of a float (decode is a
 * shift), the float operation, then dtypes.h's mendFloatToBf16 in integer lanes: round to nearest
 * even by adding 0x7fff plus the kept part's lowest bit, a NaN kept quiet (its top half with the
 * quiet bit set).  The same steps as the scalar code, so the same bits (test_reduce_vec.cc checks
 * every value against a set of partners that covers the special ones).  The tail runs the scalar
 * code.
 */
#ifndef MEND_DEVICE_REDUCE_X86_BF16_H_
#define MEND_DEVICE_REDUCE_X86_BF16_H_

#include <immintrin.h>

#define B16_INLINE MEND_RED_V4_TARGET static inline __attribute__((always_inline))

typedef uint16_t mendUBf16V4 __attribute__((aligned(1)));

B16_INLINE __m512 b16Load(const mendUBf16V4* p) {
  __m256i v = _mm256_loadu_si256((const __m256i*)(const void*)p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

/* 16 floats -> bf16, rounded to nearest even; NaN: the top half, quiet. */
B16_INLINE __m256i b16Round(__m512 f) {
  __m512i x = _mm512_castps_si512(f);
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i rne = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  __m512i nan = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  __mmask16 isNan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(isNan, rne, nan));
}

B16_INLINE void b16Store(mendUBf16V4* p, __m512 f) { _mm256_storeu_si256((__m256i*)(void*)p, b16Round(f)); }

/* A value rounded to bf16 and read back (what a scalar step that returns a bf16 leaves). */
B16_INLINE __m512 b16Reread(__m512 f) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b16Round(f)), 16));
}

#define B16_BINARY(Name, vop, sop)                                                      \
  MEND_RED_V4_TARGET static void Name(RED_PARAMS) {                                     \
    RED_PTRS(mendUBf16V4);                                                              \
    size_t i = 0;                                                                       \
    for (; i + 16 <= n; i += 16) b16Store(d + i, vop(b16Load(a + i), b16Load(b + i)));  \
    for (; i < n; i++) d[i] = sop(a[i], b[i]);                                          \
  }
B16_BINARY(redSumBf16V4, _mm512_add_ps, mendSumBf16)
B16_BINARY(redProdBf16V4, _mm512_mul_ps, mendProdBf16)

/* PreMulSum: the own input times the scalar (rounded to bf16), then the sum (rounded). */
MEND_RED_V4_TARGET static void redPreMulSumBf16V4(RED_PARAMS) {
  if (!(flags & MEND_RED_PREOP)) {
    redSumBf16V4(op, dst, x, y, n, flags);
    return;
  }
  RED_PTRS(mendUBf16V4);
  uint16_t s;
  redScalar(op, &s, sizeof s);
  __m512 vs = _mm512_set1_ps(mendBf16ToFloat(s));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 p = b16Reread(_mm512_mul_ps(b16Load(a + i), vs));
    b16Store(d + i, _mm512_add_ps(p, b16Load(b + i)));
  }
  for (; i < n; i++) d[i] = mendSumBf16(mendProdBf16(a[i], s), b[i]);
}

MEND_RED_V4_TARGET static void copyPreMulBf16V4(COPY_PARAMS) {
  if (!(flags & MEND_RED_PREOP)) {
    copyPlain(dst, x, n * sizeof(uint16_t));
    return;
  }
  COPY_PTRS(mendUBf16V4);
  uint16_t s;
  redScalar(op, &s, sizeof s);
  __m512 vs = _mm512_set1_ps(mendBf16ToFloat(s));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) b16Store(d + i, _mm512_mul_ps(b16Load(a + i), vs));
  for (; i < n; i++) d[i] = mendProdBf16(a[i], s);
}

#endif
