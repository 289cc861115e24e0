/*
 * The narrow floats' loops for AVX2 with F16C (x86-64-v3: Haswell and later, Zen 1 to 3), included by
 * src/device/reduce.c where MEND_RED_V3 is 1, after reduce_fp8.h (whose result tables serve the fp8
 * tails).  They take the AVX-512 loops' steps (reduce_x86.h, reduce_x86_bf16.h, reduce_x86_fp8.h: read
 * their comments for why each step gives dtypes.h's bits) eight floats to a vector:
 *   half    vcvtph2ps (exact), the float operation, vcvtps2ph rounded to nearest even;
 *   bf16    decode by shift, the float operation, mendFloatToBf16's rounding in 32-bit lanes, then
 *           one pack of two vectors' codes (vpackusdw, whose lane order one vpermq undoes);
 *   fp8     decode to half by shifts (e4m3: the value times 2^-8), vcvtph2ps, the float operation,
 *           vcvtps2ph, then half -> fp8 rounded to nearest even and saturated in 16-bit lanes,
 *           packed to bytes with vpackuswb;
 *   max/min compare in float and keep the chosen operand's own bits (the compare masks packed down
 *           to the element's width).
 * tests/unit/test_reduce_vec.cc runs this set against the baseline over every fp8 pair and every
 * half/bf16 value against a set of special partners.  Tails run the scalar code (fp8: the tables).
 */
#ifndef MEND_DEVICE_REDUCE_X86_V3_H_
#define MEND_DEVICE_REDUCE_X86_V3_H_

#include <immintrin.h>

/* The steps below must be inlined into the loops: called, they pass vectors through memory. */
#define V3_INLINE MEND_RED_V3_TARGET static inline __attribute__((always_inline))

#define V3_LD128(p) _mm_loadu_si128((const __m128i*)(const void*)(p))
#define V3_ST128(p, v) _mm_storeu_si128((__m128i*)(void*)(p), (v))
#define V3_W(c) _mm256_set1_epi16((short)(c))

/* Eight 32-bit compare masks -> eight 16-bit masks, in order. */
V3_INLINE __m128i v3Mask16(__m256 m) {
  __m256i w = _mm256_castps_si256(m);
  return _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}

/* The select of max (cmp _CMP_GT_OQ) and min (_CMP_LT_OQ): x where x cmp y or y is NaN, else y (a
 * macro: the compare's predicate must be a constant). */
#define V3_PICK(x, y, cmp) _mm256_or_ps(_mm256_cmp_ps((x), (y), (cmp)), _mm256_cmp_ps((y), (y), _CMP_UNORD_Q))

/* ---- half ---- */

#define H8_LOAD(p) _mm256_cvtph_ps(V3_LD128(p))
#define H8_ROUND(v) _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define H8_STORE(p, v) V3_ST128((p), H8_ROUND(v))
/* A value rounded to half and read back (what a scalar step that returns a half leaves). */
#define H8_REREAD(v) _mm256_cvtph_ps(H8_ROUND(v))

H_VEC_LOOPS(V3, MEND_RED_V3_TARGET, 8, H8_LOAD, H8_STORE, H8_REREAD, _mm256_set1_ps, _mm256_add_ps, _mm256_mul_ps,
            _mm256_div_ps)

/* max (cmp _CMP_GT_OQ) and min (_CMP_LT_OQ): the chosen operand's bits kept. */
#define H8_SELECT(Name, cmp, sop)                                                        \
  MEND_RED_V3_TARGET static void Name(RED_PARAMS) {                                      \
    RED_PTRS(mendUF16V);                                                                 \
    size_t i = 0;                                                                        \
    for (; i + 8 <= n; i += 8) {                                                         \
      __m128i va = V3_LD128(a + i), vb = V3_LD128(b + i);                                \
      __m128i m = v3Mask16(V3_PICK(_mm256_cvtph_ps(va), _mm256_cvtph_ps(vb), cmp));       \
      V3_ST128(d + i, _mm_blendv_epi8(vb, va, m));                                       \
    }                                                                                    \
    for (; i < n; i++) d[i] = sop(a[i], b[i]);                                           \
  }
H8_SELECT(redMaxF16V3, _CMP_GT_OQ, mendMaxF16)
H8_SELECT(redMinF16V3, _CMP_LT_OQ, mendMinF16)

/* ---- bfloat16 ---- */

typedef uint16_t mendUBf16V3 __attribute__((aligned(1)));

/* 8 bf16 -> floats (a bf16 is a float's top half). */
V3_INLINE __m256 b8Widen(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
#define B8_LOAD(p) b8Widen(V3_LD128(p))

/* 8 floats -> bf16 codes in 32-bit lanes, rounded to nearest even; NaN: the top half, quiet. */
V3_INLINE __m256i b8RoundW(__m256 f) {
  __m256i x = _mm256_castps_si256(f);
  __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  __m256i rne = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
  __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rne, nan, _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)));
}

/* 16 floats (two vectors, in order) -> 16 bf16, in order. */
V3_INLINE __m256i b8Round2(__m256 f0, __m256 f1) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(b8RoundW(f0), b8RoundW(f1)), 0xd8);
}
#define B8_ST256(p, v) _mm256_storeu_si256((__m256i*)(void*)(p), (v))

/* d = op(a, b) in float, rounded; sixteen at a time. */
#define B8_BINARY(Name, vop, sop)                                                                \
  MEND_RED_V3_TARGET static void Name(RED_PARAMS) {                                              \
    RED_PTRS(mendUBf16V3);                                                                       \
    size_t i = 0;                                                                                \
    for (; i + 16 <= n; i += 16)                                                                 \
      B8_ST256(d + i, b8Round2(vop(B8_LOAD(a + i), B8_LOAD(b + i)), vop(B8_LOAD(a + i + 8), B8_LOAD(b + i + 8)))); \
    for (; i < n; i++) d[i] = sop(a[i], b[i]);                                                   \
  }
B8_BINARY(redSumBf16V3, _mm256_add_ps, mendSumBf16)
B8_BINARY(redProdBf16V3, _mm256_mul_ps, mendProdBf16)

/* A value rounded to bf16 and read back, without leaving 32-bit lanes (the code shifted back up). */
V3_INLINE __m256 b8Reread(__m256 f) { return _mm256_castsi256_ps(_mm256_slli_epi32(b8RoundW(f), 16)); }

/* PreMulSum: the own input times the scalar (rounded to bf16), then the sum (rounded). */
MEND_RED_V3_TARGET static void redPreMulSumBf16V3(RED_PARAMS) {
  if (!(flags & MEND_RED_PREOP)) {
    redSumBf16V3(op, dst, x, y, n, flags);
    return;
  }
  RED_PTRS(mendUBf16V3);
  uint16_t s;
  redScalar(op, &s, sizeof s);
  __m256 vs = _mm256_set1_ps(mendBf16ToFloat(s));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 p0 = b8Reread(_mm256_mul_ps(B8_LOAD(a + i), vs)), p1 = b8Reread(_mm256_mul_ps(B8_LOAD(a + i + 8), vs));
    B8_ST256(d + i, b8Round2(_mm256_add_ps(p0, B8_LOAD(b + i)), _mm256_add_ps(p1, B8_LOAD(b + i + 8))));
  }
  for (; i < n; i++) d[i] = mendSumBf16(mendProdBf16(a[i], s), b[i]);
}

MEND_RED_V3_TARGET static void copyPreMulBf16V3(COPY_PARAMS) {
  if (!(flags & MEND_RED_PREOP)) {
    copyPlain(dst, x, n * sizeof(uint16_t));
    return;
  }
  COPY_PTRS(mendUBf16V3);
  uint16_t s;
  redScalar(op, &s, sizeof s);
  __m256 vs = _mm256_set1_ps(mendBf16ToFloat(s));
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    B8_ST256(d + i, b8Round2(_mm256_mul_ps(B8_LOAD(a + i), vs), _mm256_mul_ps(B8_LOAD(a + i + 8), vs)));
  for (; i < n; i++) d[i] = mendProdBf16(a[i], s);
}

/* ---- fp8 ---- */

/* Sixteen elements as two vectors of eight floats. */
struct f8x16 {
  __m256 lo, hi;
};

/* 16 halves (16-bit lanes) -> floats. */
V3_INLINE struct f8x16 f8v3Floats(__m256i h) {
  struct f8x16 r = {_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))};
  return r;
}

/* 16 e4m3 (bytes) -> the values times 2^-8 as floats; NaN (S.1111.111) to a half NaN. */
V3_INLINE struct f8x16 f8v3DecodeE4m3(__m128i v) {
  __m256i w = _mm256_cvtepu8_epi16(v);
  __m256i mag = _mm256_and_si256(w, V3_W(0x7f));
  __m256i h = _mm256_or_si256(_mm256_slli_epi16(mag, 7), _mm256_and_si256(_mm256_slli_epi16(w, 8), V3_W(0x8000)));
  __m256i nan = _mm256_and_si256(_mm256_cmpeq_epi16(mag, V3_W(0x7f)), V3_W(0x7e00));
  return f8v3Floats(_mm256_or_si256(h, nan));
}

/* 16 e5m2 (bytes) -> floats (e5m2 is a half's top byte). */
V3_INLINE struct f8x16 f8v3DecodeE5m2(__m128i v) { return f8v3Floats(_mm256_slli_epi16(_mm256_cvtepu8_epi16(v), 8)); }

/* 16 floats -> 16 fp8 codes: halves rounded to nearest even, then `shift` extra mantissa bits dropped
 * rounding to nearest even (7 for e4m3's scaled floats, 8 for e5m2), saturated at `maxEnc`, a NaN to
 * S.1111.111 / S.11111.11 (0x7f in both: e5m2's 0x7f is a NaN too), the sign put back. */
V3_INLINE __m128i f8v3Encode(struct f8x16 f, const int shift, const short maxEnc) {
  __m256i h = _mm256_set_m128i(H8_ROUND(f.hi), H8_ROUND(f.lo));
  __m256i mag = _mm256_and_si256(h, V3_W(0x7fff));
  __m256i odd = _mm256_and_si256(_mm256_srli_epi16(mag, shift), V3_W(1));
  __m256i bias = _mm256_add_epi16(V3_W((1 << (shift - 1)) - 1), odd);
  __m256i enc = _mm256_min_epu16(_mm256_srli_epi16(_mm256_add_epi16(mag, bias), shift), V3_W(maxEnc));
  enc = _mm256_blendv_epi8(enc, V3_W(0x7f), _mm256_cmpgt_epi16(mag, V3_W(0x7c00))); /* mag < 2^15: signed is right */
  enc = _mm256_or_si256(enc, _mm256_and_si256(_mm256_srli_epi16(h, 8), V3_W(0x80)));
  return _mm_packus_epi16(_mm256_castsi256_si128(enc), _mm256_extracti128_si256(enc, 1));
}

V3_INLINE struct f8x16 f8v3Add(struct f8x16 x, struct f8x16 y) {
  struct f8x16 r = {_mm256_add_ps(x.lo, y.lo), _mm256_add_ps(x.hi, y.hi)};
  return r;
}
/* x * y * k (k: 2^8 for e4m3's scaled floats, 1 for e5m2; exact). */
V3_INLINE struct f8x16 f8v3Mul(struct f8x16 x, struct f8x16 y, __m256 k) {
  struct f8x16 r = {_mm256_mul_ps(_mm256_mul_ps(x.lo, y.lo), k), _mm256_mul_ps(_mm256_mul_ps(x.hi, y.hi), k)};
  return r;
}

/* The max/min select of 16 elements, given the two vectors' 32-bit masks: packed to 16 bits
 * (vpackssdw, its lane order put back by vpermq), then to bytes. */
V3_INLINE __m128i f8v3Blend(__m128i va, __m128i vb, __m256 mlo, __m256 mhi) {
  __m256i m = _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_castps_si256(mlo), _mm256_castps_si256(mhi)), 0xd8);
  return _mm_blendv_epi8(vb, va, _mm_packs_epi16(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1)));
}

/* One format's steps of 16 elements: the sum of two loads, the product of a load and decoded floats. */
#define F8_V3_STEPS(Tag, SHIFT, MAXENC, K)                                                        \
  V3_INLINE __m128i f8v3Sum##Tag(__m128i x, __m128i y) {                                          \
    return f8v3Encode(f8v3Add(f8v3Decode##Tag(x), f8v3Decode##Tag(y)), SHIFT, MAXENC);            \
  }                                                                                               \
  V3_INLINE __m128i f8v3Prod##Tag(__m128i x, struct f8x16 y) {                                    \
    return f8v3Encode(f8v3Mul(f8v3Decode##Tag(x), y, _mm256_set1_ps(K)), SHIFT, MAXENC);          \
  }
F8_V3_STEPS(E4m3, 7, 0x7e, 256.0f)
F8_V3_STEPS(E5m2, 8, 0x7b, 1.0f)

/* max (cmp _CMP_GT_OQ) and min (_CMP_LT_OQ); the tail calls dtypes.h's function sop (the other
 * loops are reduce_fp8.h's FP8_VEC_LOOPS over the steps above). */
#define F8_V3_SELECT(Name, Tag, cmp, sop)                                                         \
  MEND_RED_V3_TARGET static void Name(RED_PARAMS) {                                               \
    RED_PTRS(mendUFp8);                                                                           \
    size_t i = 0;                                                                                 \
    for (; i + 16 <= n; i += 16) {                                                                \
      __m128i va = V3_LD128(a + i), vb = V3_LD128(b + i);                                         \
      struct f8x16 x = f8v3Decode##Tag(va), y = f8v3Decode##Tag(vb);                              \
      V3_ST128(d + i, f8v3Blend(va, vb, V3_PICK(x.lo, y.lo, cmp), V3_PICK(x.hi, y.hi, cmp)));     \
    }                                                                                             \
    for (; i < n; i++) d[i] = sop(a[i], b[i]);                                                    \
  }

/* The loops of one format (FMT: its reduce_fp8.h table index), 16 elements a step. */
#define F8_V3_SPLAT(s) _mm_set1_epi8((char)(s))
FP8_VEC_LOOPS(E4m3, FP8_E4M3, V3, MEND_RED_V3_TARGET, 16, f8v3, V3_LD128, V3_ST128, F8_V3_SPLAT)
FP8_VEC_LOOPS(E5m2, FP8_E5M2, V3, MEND_RED_V3_TARGET, 16, f8v3, V3_LD128, V3_ST128, F8_V3_SPLAT)
F8_V3_SELECT(redMaxE4m3V3, E4m3, _CMP_GT_OQ, mendMaxE4m3)
F8_V3_SELECT(redMinE4m3V3, E4m3, _CMP_LT_OQ, mendMinE4m3)
F8_V3_SELECT(redMaxE5m2V3, E5m2, _CMP_GT_OQ, mendMaxE5m2)
F8_V3_SELECT(redMinE5m2V3, E5m2, _CMP_LT_OQ, mendMinE5m2)

#endif
