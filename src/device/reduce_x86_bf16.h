/*
 * bfloat16 sum, product and PreMulSum with AVX-512 (x86-64), included by src/device/reduce.c where
 * MEND_RED_V4 is 1.  Sixteen elements at a time: a bf16 is the top half of a float (decode is a
 * shift), the float operation, then dtypes.h's mendFloatToBf16 in integer lanes: round to nearest
 * even by adding 0x7fff plus the kept part's lowest bit, a NaN kept quiet (its top half with the
 * quiet bit set).  The same steps as the scalar code, so the same bits (test_reduce_vec.cc checks
 * every value against a set of partners that covers the special ones).  The tail runs the scalar
 * code.  Where the CPU has AVX512_BF16, a second set rounds with its conversion instruction (V4B).
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

/* 16 bf16 back to float: what a scalar step that returns a bf16 leaves. */
B16_INLINE __m512 b16Widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

/* d = op(a, b) in float, rounded by R (target attribute T). */
#define B16_BINARY(Name, T, R, vop, sop)                                                    \
  T static void Name(RED_PARAMS) {                                                          \
    RED_PTRS(mendUBf16V4);                                                                  \
    size_t i = 0;                                                                           \
    for (; i + 16 <= n; i += 16)                                                            \
      _mm256_storeu_si256((__m256i*)(void*)(d + i), R(vop(b16Load(a + i), b16Load(b + i)))); \
    for (; i < n; i++) d[i] = sop(a[i], b[i]);                                              \
  }

/* The loops, for a rounding R (b16Round, or b16RoundN with the CPU's BF16 conversion) and a target
 * attribute T; suffix V the table entry's name (V4, V4B). */
#define B16_LOOPS(V, T, R)                                                                  \
  B16_BINARY(redSumBf16##V, T, R, _mm512_add_ps, mendSumBf16)                               \
  B16_BINARY(redProdBf16##V, T, R, _mm512_mul_ps, mendProdBf16)                             \
  /* PreMulSum: the own input times the scalar (rounded to bf16), then the sum (rounded). */ \
  T static void redPreMulSumBf16##V(RED_PARAMS) {                                           \
    if (!(flags & MEND_RED_PREOP)) {                                                        \
      redSumBf16##V(op, dst, x, y, n, flags);                                               \
      return;                                                                               \
    }                                                                                       \
    RED_PTRS(mendUBf16V4);                                                                  \
    uint16_t s;                                                                             \
    redScalar(op, &s, sizeof s);                                                            \
    __m512 vs = _mm512_set1_ps(mendBf16ToFloat(s));                                         \
    size_t i = 0;                                                                           \
    for (; i + 16 <= n; i += 16) {                                                          \
      __m512 p = b16Widen(R(_mm512_mul_ps(b16Load(a + i), vs)));                            \
      _mm256_storeu_si256((__m256i*)(void*)(d + i), R(_mm512_add_ps(p, b16Load(b + i))));   \
    }                                                                                       \
    for (; i < n; i++) d[i] = mendSumBf16(mendProdBf16(a[i], s), b[i]);                     \
  }                                                                                         \
  T static void copyPreMulBf16##V(COPY_PARAMS) {                                            \
    if (!(flags & MEND_RED_PREOP)) {                                                        \
      copyPlain(dst, x, n * sizeof(uint16_t));                                              \
      return;                                                                               \
    }                                                                                       \
    COPY_PTRS(mendUBf16V4);                                                                 \
    uint16_t s;                                                                             \
    redScalar(op, &s, sizeof s);                                                            \
    __m512 vs = _mm512_set1_ps(mendBf16ToFloat(s));                                         \
    size_t i = 0;                                                                           \
    for (; i + 16 <= n; i += 16)                                                            \
      _mm256_storeu_si256((__m256i*)(void*)(d + i), R(_mm512_mul_ps(b16Load(a + i), vs)));  \
    for (; i < n; i++) d[i] = mendProdBf16(a[i], s);                                        \
  }

B16_LOOPS(V4, MEND_RED_V4_TARGET, b16Round)

/* CPUs with AVX512_BF16 (MEND_RED_V4B): vcvtneps2bf16 rounds to nearest even and quiets a NaN as
 * the integer steps do, but reads a subnormal float as zero; a vector holding one (rare: its
 * magnitude is under 2^-126) takes the integer steps instead, so the bits stay the same. */
#if MEND_RED_V4B
MEND_RED_V4B_TARGET static inline __attribute__((always_inline)) __m256i b16RoundN(__m512 f) {
  if (__builtin_expect(_mm512_fpclass_ps_mask(f, 0x20) != 0, 0)) return b16Round(f);
  return (__m256i)_mm512_cvtneps_pbh(f);
}
B16_LOOPS(V4B, MEND_RED_V4B_TARGET, b16RoundN)
#endif

#endif
