/*
 * Element arithmetic for the 12 NCCL datatypes, shared by the host engine and the CUDA executor
 * (every function is `static inline` in C, `__host__ __device__` under nvcc).
 *
 * Storage: integers and float/double are themselves; float16 and bfloat16 are uint16_t bit
 * patterns; fp8 e4m3 and e5m2 are uint8_t bit patterns.
 * Arithmetic: integers wrap (computed in the unsigned twin: signed overflow is UB in C); half,
 * bf16 and fp8 convert both operands to float, operate once, and round back to nearest even.
 * float keeps 24 bits >= 2p+2 for every narrow format, so "float op, then round" equals the
 * correctly rounded result: no double-rounding error.
 * Max/min on floating types return the non-NaN operand (like fmaxf / __hmax); NaN only when both
 * are NaN; the sign of a zero result from max(+0,-0) is unspecified.
 * fp8 conversions saturate (OCP "satfinite", CUDA __NV_SATFINITE, what NCCL's fp8 reductions use):
 * a finite overflow AND an infinite input give +-max finite (e4m3 448, e5m2 57344); NaN stays NaN
 * (sign kept, mantissa all ones).  float16 and bf16 are IEEE: overflow gives inf.
 */
#ifndef MEND_DEVICE_DTYPES_H_
#define MEND_DEVICE_DTYPES_H_

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define MEND_HD static __host__ __device__ __forceinline__
#else
#define MEND_HD static inline
#endif

/* ---- float bits ---- */
MEND_HD uint32_t mendF32Bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}
MEND_HD float mendBitsF32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

/* All ones when c is true, else 0.  Selects written with masks stay branch-free, so the loops
 * over arrays vectorize (the compiler turns ?: on these paths into branches). */
MEND_HD uint32_t mendMask(int c) { return 0u - (uint32_t)(c != 0); }
MEND_HD uint32_t mendSelect(uint32_t m, uint32_t a, uint32_t b) { return (a & m) | (b & ~m); }

/* ---- narrow format -> float (exact) ----
 * Generic decoder for a 1.E.M format with bias B: IEEE-like (all-ones exponent = inf/NaN) unless
 * `e4m3` (then only S.1111.111 is NaN and there is no inf).  Every case is computed and one
 * selected, without branches, so that loops over arrays vectorize. */
MEND_HD float mendSmallToFloat(uint32_t v, int ebits, int mbits, int bias, int e4m3) {
  uint32_t mag = v & ((1u << (ebits + mbits)) - 1u);
  uint32_t expMask = ((1u << ebits) - 1u) << 23;
  uint32_t o = mag << (23 - mbits); /* exponent and mantissa in float position */
  uint32_t e = o & expMask;
  uint32_t normal = o + ((uint32_t)(127 - bias) << 23); /* rebias */
  /* zero or subnormal: read as 1.m * 2^(1-B), then subtract 2^(1-B) (exact) */
  uint32_t one = (uint32_t)(127 + 1 - bias) << 23;
  uint32_t sub = mendF32Bits(mendBitsF32(o | one) - mendBitsF32(one));
  int special = e4m3 ? mag == (1u << (ebits + mbits)) - 1u : e == expMask;
  o = mendSelect(mendMask(special), 0x7f800000u | o, /* inf (mantissa 0) or NaN (payload kept) */
                 mendSelect(mendMask(e == 0), sub, normal));
  return mendBitsF32(o | (((v >> (ebits + mbits)) & 1u) << 31));
}

/* ---- float -> narrow format, round to nearest even ----
 * maxEnc: largest finite magnitude encoding; ovfEnc: what an overflow becomes (inf for IEEE
 * formats, maxEnc for satfinite); nanEnc: magnitude of the quiet NaN (the top payload bits that
 * fit are OR'ed in, so NaN payloads survive a round trip where the format has room). */
MEND_HD uint32_t mendFloatToSmall(float f, int ebits, int mbits, int bias, uint32_t maxEnc, uint32_t ovfEnc,
                                  uint32_t nanEnc) {
  uint32_t x = mendF32Bits(f);
  uint32_t sign = (x >> 31) << (ebits + mbits);
  int drop = 23 - mbits; /* mantissa bits that go */
  x &= 0x7fffffffu;
  /* Normal range (or overflow, inf, NaN).  Exponent and mantissa are in order, so rounding the
   * combined field is right even when the carry bumps the exponent. */
  uint32_t enc = ((x + (1u << (drop - 1)) - 1u + ((x >> drop) & 1u)) >> drop) - ((uint32_t)(127 - bias) << mbits);
  uint32_t big = mendSelect(mendMask(x > 0x7f800000u), nanEnc | ((x >> drop) & ((1u << mbits) - 1u)), ovfEnc);
  enc = mendSelect(mendMask(enc <= maxEnc), enc, big);
  /* Subnormal or zero: adding 2^(24-B-M), whose ulp is the format's smallest subnormal, makes the
   * FPU round to nearest even for us; the integer difference is the result (<= 2^M, where 2^M is
   * the smallest normal's encoding). */
  float magic = mendBitsF32((uint32_t)(127 + 24 - bias - mbits) << 23);
  uint32_t sub = mendF32Bits(mendBitsF32(x) + magic) - mendF32Bits(magic);
  enc = mendSelect(mendMask(x >= ((uint32_t)(127 + 1 - bias) << 23)), enc, sub);
  return sign | enc;
}

MEND_HD float mendHalfToFloat(uint16_t h) { return mendSmallToFloat(h, 5, 10, 15, 0); }
MEND_HD uint16_t mendFloatToHalf(float f) { return (uint16_t)mendFloatToSmall(f, 5, 10, 15, 0x7bff, 0x7c00, 0x7e00); }
MEND_HD float mendE4m3ToFloat(uint8_t v) { return mendSmallToFloat(v, 4, 3, 7, 1); }
MEND_HD uint8_t mendFloatToE4m3(float f) { return (uint8_t)mendFloatToSmall(f, 4, 3, 7, 0x7e, 0x7e, 0x7f); }
MEND_HD float mendE5m2ToFloat(uint8_t v) { return mendSmallToFloat(v, 5, 2, 15, 0); }
MEND_HD uint8_t mendFloatToE5m2(float f) { return (uint8_t)mendFloatToSmall(f, 5, 2, 15, 0x7b, 0x7b, 0x7f); }

MEND_HD float mendBf16ToFloat(uint16_t b) { return mendBitsF32((uint32_t)b << 16); }
MEND_HD uint16_t mendFloatToBf16(float f) {
  uint32_t x = mendF32Bits(f);
  uint32_t rne = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16; /* RNE; overflow -> inf */
  uint32_t nan = (x >> 16) | 0x40u;                       /* NaN: kept quiet */
  return (uint16_t)mendSelect(mendMask((x & 0x7fffffffu) > 0x7f800000u), nan, rne); /* no branch: vectorizes */
}

/* ---- element ops: mend<Op><Tag>(a, b); mendDiv<Tag>(a, n) is the integer-avg final division ---- */

/* Integers: T the type, U its unsigned twin, W a type wide enough to divide T by an int. */
#define MEND_INT_OPS(Tag, T, U, W)                                                  \
  MEND_HD T mendSum##Tag(T a, T b) { return (T)(U)((U)a + (U)b); }                  \
  MEND_HD T mendProd##Tag(T a, T b) { return (T)(U)((U)a * (U)b); }                 \
  MEND_HD T mendMax##Tag(T a, T b) { return a > b ? a : b; }                        \
  MEND_HD T mendMin##Tag(T a, T b) { return a < b ? a : b; }                        \
  MEND_HD T mendDiv##Tag(T a, uint32_t n) { return (T)((W)a / (W)n); } /* toward 0 */
MEND_INT_OPS(I8, int8_t, uint8_t, int32_t)
MEND_INT_OPS(U8, uint8_t, uint8_t, uint32_t)
MEND_INT_OPS(I32, int32_t, uint32_t, int64_t)
MEND_INT_OPS(U32, uint32_t, uint32_t, uint32_t)
MEND_INT_OPS(I64, int64_t, uint64_t, int64_t)
MEND_INT_OPS(U64, uint64_t, uint64_t, uint64_t)

/* float/double.  On the GPU the _rn intrinsics stop nvcc from fusing a*s+b into an FMA, so both
 * back ends round the pre-multiplication and the sum separately (host C is ISO: no contraction). */
#if defined(__CUDA_ARCH__)
#define MEND_FADD(T, a, b) (sizeof(T) == 4 ? __fadd_rn((float)(a), (float)(b)) : __dadd_rn((a), (b)))
#define MEND_FMUL(T, a, b) (sizeof(T) == 4 ? __fmul_rn((float)(a), (float)(b)) : __dmul_rn((a), (b)))
#else
#define MEND_FADD(T, a, b) ((a) + (b))
#define MEND_FMUL(T, a, b) ((a) * (b))
#endif
/* max/min select the non-NaN operand without a branch (vectorizable). */
#define MEND_FLOAT_OPS(Tag, T)                                                      \
  MEND_HD T mendSum##Tag(T a, T b) { return (T)MEND_FADD(T, a, b); }                \
  MEND_HD T mendProd##Tag(T a, T b) { return (T)MEND_FMUL(T, a, b); }               \
  MEND_HD T mendMax##Tag(T a, T b) { return (a > b || b != b) ? a : b; }            \
  MEND_HD T mendMin##Tag(T a, T b) { return (a < b || b != b) ? a : b; }            \
  MEND_HD T mendDiv##Tag(T a, uint32_t n) { return a / (T)n; }
MEND_FLOAT_OPS(F32, float)
MEND_FLOAT_OPS(F64, double)

/* Narrow floats (storage S): compute in float, round once; max/min return an operand unchanged. */
#define MEND_NARROW_OPS(Tag, S, toF, fromF)                                                         \
  MEND_HD S mendSum##Tag(S a, S b) { return fromF(mendSumF32(toF(a), toF(b))); }                    \
  MEND_HD S mendProd##Tag(S a, S b) { return fromF(mendProdF32(toF(a), toF(b))); }                  \
  MEND_HD S mendMax##Tag(S a, S b) { float x = toF(a), y = toF(b); return (x > y || y != y) ? a : b; } \
  MEND_HD S mendMin##Tag(S a, S b) { float x = toF(a), y = toF(b); return (x < y || y != y) ? a : b; } \
  MEND_HD S mendDiv##Tag(S a, uint32_t n) { return fromF(toF(a) / (float)n); }
MEND_NARROW_OPS(F16, uint16_t, mendHalfToFloat, mendFloatToHalf)
MEND_NARROW_OPS(Bf16, uint16_t, mendBf16ToFloat, mendFloatToBf16)
MEND_NARROW_OPS(E4m3, uint8_t, mendE4m3ToFloat, mendFloatToE4m3)
MEND_NARROW_OPS(E5m2, uint8_t, mendE5m2ToFloat, mendFloatToE5m2)

#endif
