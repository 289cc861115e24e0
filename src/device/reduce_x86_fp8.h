/*
 * fp8 sum, product, PreMulSum, max and min with AVX-512 (x86-64), included by src/device/reduce.c where
 * MEND_RED_V4 is 1, after reduce_fp8.h (whose result tables serve the tails).  Thirty-two elements
 * at a time, through half precision:
 *   decode  e5m2 is the top byte of a half; e4m3's 7 magnitude bits shifted into a half's field
 *           are the value times 2^-8 (subnormals included: the two formats' subnormal steps line
 *           up), its NaN (S.1111.111) set to a half NaN; vcvtph2ps then gives floats, exactly.
 *   operate in float: a sum or product of two fp8 values is exact in float, and so is the
 *           rescaling of a product of two e4m3 values (each times 2^-8) by 2^8.
 *   encode  float -> half rounded to nearest even (vcvtps2ph), then half -> fp8 rounded to nearest
 *           even in 16-bit integer lanes, saturated (satfinite), NaN to S.1111.111 (e4m3) or
 *           S.11111.11 (e5m2).  Rounding twice is exact here: a half has at least 2p+2 bits for
 *           the p-bit fp8 formats (p = 4, 3), enough for the sum or product of two operands, and
 *           tests/unit/test_reduce_vec.cc proves it on the whole domain: every pair of operands
 *           against dtypes.h's functions, which round once.
 * A second form of the same steps, 64 elements at a time, for CPUs with AVX512_VBMI, is at the end;
 * there a PreMulSum's product with its scalar is a 256-entry byte table, made by the steps above
 * once per call and looked up with vpermi2b (f8Lut).
 */
#ifndef MEND_DEVICE_REDUCE_X86_FP8_H_
#define MEND_DEVICE_REDUCE_X86_FP8_H_

#include <immintrin.h>

/* A pair of 16-float vectors: the 32 elements of one step. */
struct f8x32 {
  __m512 lo, hi;
};

#define F8_W(c) _mm512_set1_epi16((short)(c))
/* The steps below must be inlined into the loops: called, they pass vectors through memory. */
#define F8_INLINE MEND_RED_V4_TARGET static inline __attribute__((always_inline))

/* 32 halves (16-bit lanes) -> floats. */
F8_INLINE struct f8x32 f8HalvesToFloats(__m512i h) {
  struct f8x32 r = {_mm512_cvtph_ps(_mm512_castsi512_si256(h)), _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1))};
  return r;
}

/* 32 e4m3 (bytes) -> the values times 2^-8 as floats. */
F8_INLINE struct f8x32 f8DecodeE4m3(__m256i v) {
  __m512i w = _mm512_cvtepu8_epi16(v);
  __m512i mag = _mm512_and_si512(w, F8_W(0x7f));
  __m512i h = _mm512_or_si512(_mm512_slli_epi16(mag, 7), _mm512_and_si512(_mm512_slli_epi16(w, 8), F8_W(0x8000)));
  __mmask32 nan = _mm512_cmpeq_epi16_mask(mag, F8_W(0x7f));
  return f8HalvesToFloats(_mm512_mask_blend_epi16(nan, h, _mm512_or_si512(h, F8_W(0x7e00))));
}

/* 32 e5m2 (bytes) -> floats. */
F8_INLINE struct f8x32 f8DecodeE5m2(__m256i v) {
  return f8HalvesToFloats(_mm512_slli_epi16(_mm512_cvtepu8_epi16(v), 8));
}

/* 16 floats -> halves, rounded to nearest even. */
F8_INLINE __m256i f8RoundHalf(__m512 f) {
  return _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* 32 floats -> 32 fp8 codes in 16-bit lanes: `shift` drops the half's extra mantissa bits (7 for
 * e4m3, whose floats are the values times 2^-8; 8 for e5m2), `maxEnc` is the largest finite
 * magnitude. */
F8_INLINE __m512i f8EncodeW(struct f8x32 f, int shift, short maxEnc) {
  __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(f8RoundHalf(f.lo)), f8RoundHalf(f.hi), 1);
  __m512i mag = _mm512_and_si512(h, F8_W(0x7fff));
  __m512i odd = _mm512_and_si512(_mm512_srli_epi16(mag, (unsigned)shift), F8_W(1));
  __m512i bias = _mm512_add_epi16(F8_W((1 << (shift - 1)) - 1), odd);
  __m512i enc = _mm512_min_epu16(_mm512_srli_epi16(_mm512_add_epi16(mag, bias), (unsigned)shift), F8_W(maxEnc));
  enc = _mm512_mask_blend_epi16(_mm512_cmpgt_epu16_mask(mag, F8_W(0x7c00)), enc, F8_W(0x7f));
  return _mm512_or_si512(enc, _mm512_and_si512(_mm512_srli_epi16(h, 8), F8_W(0x80)));
}

/* The same, narrowed to 32 bytes. */
F8_INLINE __m256i f8Encode(struct f8x32 f, int shift, short maxEnc) {
  return _mm512_cvtepi16_epi8(f8EncodeW(f, shift, maxEnc));
}

#define F8_LOAD(p) _mm256_loadu_si256((const __m256i*)(const void*)(p))
#define F8_STORE(p, v) _mm256_storeu_si256((__m256i*)(void*)(p), (v))

F8_INLINE struct f8x32 f8Add(struct f8x32 x, struct f8x32 y) {
  struct f8x32 r = {_mm512_add_ps(x.lo, y.lo), _mm512_add_ps(x.hi, y.hi)};
  return r;
}
/* x * y * k (k: 2^8 for e4m3's scaled floats, 1 for e5m2; exact). */
F8_INLINE struct f8x32 f8Mul(struct f8x32 x, struct f8x32 y, __m512 k) {
  struct f8x32 r = {_mm512_mul_ps(_mm512_mul_ps(x.lo, y.lo), k), _mm512_mul_ps(_mm512_mul_ps(x.hi, y.hi), k)};
  return r;
}

/* One step of 32 elements per format: the sum of two loads, the product of a load and decoded
 * floats (K: 2^8 for e4m3, whose floats are the values times 2^-8; 1 for e5m2). */
#define F8_V4_STEPS(Tag, SHIFT, MAXENC, K)                                                      \
  F8_INLINE __m256i f8Sum##Tag(__m256i x, __m256i y) {                   \
    return f8Encode(f8Add(f8Decode##Tag(x), f8Decode##Tag(y)), SHIFT, MAXENC);                  \
  }                                                                                             \
  F8_INLINE __m256i f8Prod##Tag(__m256i x, struct f8x32 y) {             \
    return f8Encode(f8Mul(f8Decode##Tag(x), y, _mm512_set1_ps(K)), SHIFT, MAXENC);              \
  }
F8_V4_STEPS(E4m3, 7, 0x7e, 256.0f)
F8_V4_STEPS(E5m2, 8, 0x7b, 1.0f)

/* max: a where a > b or b is NaN, else b (min: a < b), compared in float, the operand's own bits
 * kept (the floats of e4m3 are scaled by 2^-8: the order is the same). */
#define F8_V4_SELECT(Name, Tag, cmp, sop)                                                       \
  MEND_RED_V4_TARGET static void Name(RED_PARAMS) {                                             \
    RED_PTRS(mendUFp8);                                                                         \
    size_t i = 0;                                                                               \
    for (; i + 32 <= n; i += 32) {                                                              \
      __m256i va = F8_LOAD(a + i), vb = F8_LOAD(b + i);                                         \
      struct f8x32 x = f8Decode##Tag(va), y = f8Decode##Tag(vb);                                \
      __mmask16 lo = _mm512_cmp_ps_mask(x.lo, y.lo, cmp) | _mm512_cmp_ps_mask(y.lo, y.lo, _CMP_UNORD_Q); \
      __mmask16 hi = _mm512_cmp_ps_mask(x.hi, y.hi, cmp) | _mm512_cmp_ps_mask(y.hi, y.hi, _CMP_UNORD_Q); \
      F8_STORE(d + i, _mm256_mask_blend_epi8((__mmask32)lo | (__mmask32)hi << 16, vb, va));     \
    }                                                                                           \
    for (; i < n; i++) d[i] = sop(a[i], b[i]);                                                  \
  }
F8_V4_SELECT(redMaxE4m3V4, E4m3, _CMP_GT_OQ, mendMaxE4m3)
F8_V4_SELECT(redMinE4m3V4, E4m3, _CMP_LT_OQ, mendMinE4m3)
F8_V4_SELECT(redMaxE5m2V4, E5m2, _CMP_GT_OQ, mendMaxE5m2)
F8_V4_SELECT(redMinE5m2V4, E5m2, _CMP_LT_OQ, mendMinE5m2)

/* The loops of one format (FMT: its reduce_fp8.h table index), 32 elements a step. */
#define F8_SPLAT32(s) _mm256_set1_epi8((char)(s))
FP8_VEC_LOOPS(E4m3, FP8_E4M3, V4, MEND_RED_V4_TARGET, 32, f8, F8_LOAD, F8_STORE, F8_SPLAT32)
FP8_VEC_LOOPS(E5m2, FP8_E5M2, V4, MEND_RED_V4_TARGET, 32, f8, F8_LOAD, F8_STORE, F8_SPLAT32)


/* ---- With AVX512_VBMI (MEND_RED_V4B) ----
 * Sixty-four elements at a time, decoded to two vectors of 32 halves by unpacking bytes: for e5m2
 * the byte under a zero byte (a half's top byte); for e4m3, vpermi2b reads each byte's magnitude (its
 * low 7 bits) in two 128-entry tables, the low and high bytes of the half that f8DecodeE4m3 makes
 * of it (NaN included; built at start by that same rule), the sign bit OR'ed into the high byte.
 * The unpacks shuffle the order within each 128-bit lane; one pack of the two encoded vectors
 * (f8EncodeW's 16-bit codes) undoes exactly that shuffle, where the narrowing of each vector costs
 * more.  Between them, the steps above: floats, the operation, f8EncodeW.  (Encoding floats
 * straight to fp8 in 32-bit integer lanes, without the half conversions, measured slower: twice
 * the lanes for the rounding steps.) */
#if MEND_RED_V4B
static uint8_t f8DecBytes[2][128] __attribute__((aligned(64))); /* e4m3: [low, high][magnitude] */

static void f8DecFill(void) {
  for (uint32_t m = 0; m < 128; m++) {
    uint32_t h = m << 7 | (m == 0x7f ? 0x7e00u : 0u);
    f8DecBytes[0][m] = (uint8_t)h;
    f8DecBytes[1][m] = (uint8_t)(h >> 8);
  }
}

#define F8B_INLINE MEND_RED_V4B_TARGET static inline __attribute__((always_inline))

struct f8Dec {
  __m512i lo0, lo1, hi0, hi1;
};

F8B_INLINE struct f8Dec f8DecTables(void) {
  struct f8Dec t = {_mm512_load_si512(f8DecBytes[0]), _mm512_load_si512(f8DecBytes[0] + 64),
                    _mm512_load_si512(f8DecBytes[1]), _mm512_load_si512(f8DecBytes[1] + 64)};
  return t;
}

/* 64 fp8 -> two vectors of 32 halves, lane-shuffled (e4m3: the values times 2^-8). */
F8B_INLINE void f8DecodeBE4m3(__m512i v, const struct f8Dec* t, __m512i* w0, __m512i* w1) {
  __m512i lo = _mm512_permutex2var_epi8(t->lo0, v, t->lo1);
  __m512i hi = _mm512_permutex2var_epi8(t->hi0, v, t->hi1);
  hi = _mm512_ternarylogic_epi32(hi, v, _mm512_set1_epi8((char)0x80), 0xf8); /* hi | (v & 0x80) */
  *w0 = _mm512_unpacklo_epi8(lo, hi);
  *w1 = _mm512_unpackhi_epi8(lo, hi);
}
F8B_INLINE void f8DecodeBE5m2(__m512i v, const struct f8Dec* t, __m512i* w0, __m512i* w1) {
  (void)t;
  *w0 = _mm512_unpacklo_epi8(_mm512_setzero_si512(), v);
  *w1 = _mm512_unpackhi_epi8(_mm512_setzero_si512(), v);
}

#define F8B_LD(p) _mm512_loadu_si512((const void*)(p))
#define F8B_ST(p, v) _mm512_storeu_si512((void*)(p), (v))

/* The sum's step in f8Mul's form (k unused). */
F8B_INLINE struct f8x32 f8AddK(struct f8x32 x, struct f8x32 y, __m512 k) {
  (void)k;
  return f8Add(x, y);
}

/* d = OP(a, b) (f8AddK or f8Mul), 64 at a time; the tail reads result table OPN of format FMT. */
#define F8B_BINARY(Name, Tag, FMT, OPN, OP, K)                                                   \
  MEND_RED_V4B_TARGET static void Name(RED_PARAMS) {                                             \
    RED_PTRS(mendUFp8);                                                                          \
    const struct f8Dec t = f8DecTables();                                                        \
    const __m512 k = _mm512_set1_ps(K);                                                          \
    size_t i = 0;                                                                                \
    for (; i + 64 <= n; i += 64) {                                                               \
      __m512i a0, a1, b0, b1;                                                                    \
      f8DecodeB##Tag(F8B_LD(a + i), &t, &a0, &a1);                                               \
      f8DecodeB##Tag(F8B_LD(b + i), &t, &b0, &b1);                                               \
      F8B_ST(d + i, f8Enc2##Tag(OP(f8HalvesToFloats(a0), f8HalvesToFloats(b0), k),               \
                                OP(f8HalvesToFloats(a1), f8HalvesToFloats(b1), k)));             \
    }                                                                                            \
    fp8Lookup(fp8Table(FMT, OPN), d + i, a + i, b + i, n - i);                                   \
  }

/* A PreMulSum's product with its scalar as a table of the 256 fp8 codes (four vectors of 64), and
 * 64 codes looked up in it: a code's low 7 bits pick one of 128 entries in each half of the table
 * (vpermi2b), its top bit the half.  One lookup replaces a decode, two multiplies and an encode per
 * 64 elements; the table is made by those same steps, so every product is the one they give. */
struct f8Lut {
  __m512i q[4];
};

F8B_INLINE __m512i f8LutGet(const struct f8Lut* l, __m512i v) {
  __m512i lo = _mm512_permutex2var_epi8(l->q[0], v, l->q[1]);
  __m512i hi = _mm512_permutex2var_epi8(l->q[2], v, l->q[3]);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
}

/* One format's loops (SHIFT, MAXENC, K as in F8_V4_STEPS; FMT its result tables, for the tails).
 * ENC2: the two halves' codes packed back into 64 bytes in order; LUT: the scalar's product table. */
#define F8_V4B_LOOPS(Tag, FMT, SHIFT, MAXENC, K)                                                 \
  F8B_INLINE __m512i f8Enc2##Tag(struct f8x32 x0, struct f8x32 x1) {                             \
    return _mm512_packus_epi16(f8EncodeW(x0, SHIFT, MAXENC), f8EncodeW(x1, SHIFT, MAXENC));      \
  }                                                                                              \
  F8B_INLINE struct f8Lut f8Lut##Tag(const struct f8Dec* t, uint8_t s) {                         \
    const struct f8x32 vs = f8Decode##Tag(_mm256_set1_epi8((char)s));                            \
    const __m512 k = _mm512_set1_ps(K);                                                          \
    const __m512i iota = _mm512_set_epi8(63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, \
                                         47, 46, 45, 44, 43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, \
                                         31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, \
                                         15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);  \
    struct f8Lut l;                                                                              \
    for (int j = 0; j < 4; j++) {                                                                \
      __m512i a0, a1;                                                                            \
      f8DecodeB##Tag(_mm512_add_epi8(iota, _mm512_set1_epi8((char)(64 * j))), t, &a0, &a1);      \
      l.q[j] = f8Enc2##Tag(f8Mul(f8HalvesToFloats(a0), vs, k), f8Mul(f8HalvesToFloats(a1), vs, k)); \
    }                                                                                            \
    return l;                                                                                    \
  }                                                                                              \
  F8B_BINARY(redSum##Tag##V4B, Tag, FMT, FP8_SUM, f8AddK, K)                                     \
  F8B_BINARY(redProd##Tag##V4B, Tag, FMT, FP8_PROD, f8Mul, K)                                    \
  MEND_RED_V4B_TARGET static void redPreMulSum##Tag##V4B(RED_PARAMS) {                           \
    if (!(flags & MEND_RED_PREOP)) {                                                             \
      redSum##Tag##V4B(op, dst, x, y, n, flags);                                                 \
      return;                                                                                    \
    }                                                                                            \
    RED_PTRS(mendUFp8);                                                                          \
    uint8_t s;                                                                                   \
    redScalar(op, &s, sizeof s);                                                                 \
    const struct f8Dec t = f8DecTables();                                                        \
    size_t i = 0;                                                                                \
    if (n >= 64) {                                                                               \
      const struct f8Lut l = f8Lut##Tag(&t, s);                                                  \
      for (; i + 64 <= n; i += 64) { /* the product is rounded to fp8 before the sum */          \
        __m512i b0, b1, p0, p1;                                                                  \
        f8DecodeB##Tag(f8LutGet(&l, F8B_LD(a + i)), &t, &p0, &p1);                               \
        f8DecodeB##Tag(F8B_LD(b + i), &t, &b0, &b1);                                             \
        F8B_ST(d + i, f8Enc2##Tag(f8Add(f8HalvesToFloats(p0), f8HalvesToFloats(b0)),             \
                                  f8Add(f8HalvesToFloats(p1), f8HalvesToFloats(b1))));           \
      }                                                                                          \
    }                                                                                            \
    fp8LookupPreMul(fp8Table(FMT, FP8_SUM), fp8Table(FMT, FP8_PROD), d + i, a + i, b + i, s, n - i); \
  }                                                                                              \
  MEND_RED_V4B_TARGET static void copyPreMul##Tag##V4B(COPY_PARAMS) {                            \
    if (!(flags & MEND_RED_PREOP)) {                                                             \
      copyPlain(dst, x, n);                                                                      \
      return;                                                                                    \
    }                                                                                            \
    COPY_PTRS(mendUFp8);                                                                         \
    uint8_t s;                                                                                   \
    redScalar(op, &s, sizeof s);                                                                 \
    const struct f8Dec t = f8DecTables();                                                        \
    size_t i = 0;                                                                                \
    if (n >= 64) {                                                                               \
      const struct f8Lut l = f8Lut##Tag(&t, s);                                                  \
      for (; i + 64 <= n; i += 64) F8B_ST(d + i, f8LutGet(&l, F8B_LD(a + i)));                   \
    }                                                                                            \
    fp8LookupScalar(fp8Table(FMT, FP8_PROD), d + i, a + i, s, n - i);                            \
  }
F8_V4B_LOOPS(E4m3, FP8_E4M3, 7, 0x7e, 256.0f)
F8_V4B_LOOPS(E5m2, FP8_E5M2, 8, 0x7b, 1.0f)
#endif

#endif
