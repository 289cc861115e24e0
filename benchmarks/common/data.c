/* Test values and their expected results, exact in every element type.
 *
 * Inputs are small non-negative integers chosen per (rank, element, seed) so that every
 * partial result of every op is exactly representable: then the order in which a library
 * reduces cannot change the bits, and a check can demand equality. The exceptions: integer
 * types wrap (modular arithmetic is order-free too), and avg on floating types, where a library
 * may pre-scale by 1/n, is compared with a tolerance of a few ulps of the type.
 *   copy, max, min : 0..7
 *   sum, mulsum    : 0..3 (fp8: 0..1 and only ranks 0..3 contribute, so sums stay <= 6)
 *   prod           : 1 or 2, with 2 only on ranks 0..7 (products <= 256)
 *   avg            : base +/- d on pairs of ranks, so the sum is exactly nRanks * base
 */
#include <math.h>
#include <string.h>
#include "bench.h"

struct typeInfo {
  const char* name;      /* nccl-tests' name */
  size_t size;           /* bytes per element */
  int isFloat;           /* floating point */
  int expBits;           /* exponent bits (small floats only) */
  int manBits;           /* mantissa bits without the hidden one */
};

static const struct typeInfo types[BENCH_NUM_TYPES] = {
    [ncclInt8] = {.name = "int8", .size = 1},
    [ncclUint8] = {.name = "uint8", .size = 1},
    [ncclInt32] = {.name = "int32", .size = 4},
    [ncclUint32] = {.name = "uint32", .size = 4},
    [ncclInt64] = {.name = "int64", .size = 8},
    [ncclUint64] = {.name = "uint64", .size = 8},
    [ncclFloat16] = {.name = "half", .size = 2, .isFloat = 1, .expBits = 5, .manBits = 10},
    [ncclFloat32] = {.name = "float", .size = 4, .isFloat = 1, .expBits = 8, .manBits = 23},
    [ncclFloat64] = {.name = "double", .size = 8, .isFloat = 1, .expBits = 11, .manBits = 52},
    [ncclBfloat16] = {.name = "bfloat16", .size = 2, .isFloat = 1, .expBits = 8, .manBits = 7},
    [ncclFloat8e4m3] = {.name = "f8e4m3", .size = 1, .isFloat = 1, .expBits = 4, .manBits = 3},
    [ncclFloat8e5m2] = {.name = "f8e5m2", .size = 1, .isFloat = 1, .expBits = 5, .manBits = 2},
};

static const char* const opNames[BENCH_NUM_OPS] = {"sum", "prod", "max", "min", "avg", "mulsum"};

size_t benchTypeSize(int type) { return types[type].size; }
const char* benchTypeName(int type) { return types[type].name; }

int benchTypeByName(const char* name) {
  static const struct { const char* alias; int type; } aliases[] = {
      {"char", ncclInt8}, {"int", ncclInt32}, {"fp16", ncclFloat16}, {"float16", ncclFloat16},
      {"float32", ncclFloat32}, {"fp32", ncclFloat32}, {"float64", ncclFloat64},
      {"fp64", ncclFloat64}, {"bf16", ncclBfloat16}, {"fp8_e4m3", ncclFloat8e4m3},
      {"fp8_e5m2", ncclFloat8e5m2}};
  for (int t = 0; t < BENCH_NUM_TYPES; t++)
    if (strcmp(name, types[t].name) == 0) return t;
  for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
    if (strcmp(name, aliases[i].alias) == 0) return aliases[i].type;
  return -1;
}

const char* benchOpName(int op) { return op < 0 ? "none" : opNames[op]; }

int benchOpByName(const char* name) {
  if (strcmp(name, "all") == 0) return -1;
  if (strcmp(name, "premulsum") == 0) return BENCH_OP_MULSUM;
  for (int o = 0; o < BENCH_NUM_OPS; o++)
    if (strcmp(name, opNames[o]) == 0) return o;
  return -2;
}

/* nccl-tests does not run prod on the fp8 types. */
int benchOpValid(int type, int op) {
  return !(op == ncclProd && (type == ncclFloat8e4m3 || type == ncclFloat8e5m2));
}

static uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
               c * 0x94D049BB133111EBull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}

static int isFp8(int type) { return type == ncclFloat8e4m3 || type == ncclFloat8e5m2; }

double benchGenValue(int type, int op, int rank, size_t idx, uint64_t seed, int nRanks) {
  uint64_t h = mix((uint64_t)rank + 1, idx, seed);
  switch (op) {
    case ncclSum:
    case BENCH_OP_MULSUM:
      if (isFp8(type)) return rank < 4 ? (double)(h % 2) : 0.0;
      return (double)(h % 4);
    case ncclProd: return (rank < 8 && h % 3 == 0) ? 2.0 : 1.0;
    case ncclAvg: {
      double base = 3.0 + (double)(mix(0, idx, seed) % 4), d = (double)(idx % 3);
      if ((nRanks & 1) && rank == nRanks - 1) return base;
      return (rank & 1) ? base - d : base + d;
    }
    default: return (double)(h % 8);  /* copies, max, min */
  }
}

double benchMulsumScalar(int type, int rank) {
  (void)type;
  return 1.0 + (rank & 1);
}

double benchReduceExpected(int type, int op, size_t idx, uint64_t seed, int nRanks) {
  double acc = benchGenValue(type, op, 0, idx, seed, nRanks);
  if (op == BENCH_OP_MULSUM) acc *= benchMulsumScalar(type, 0);
  for (int r = 1; r < nRanks; r++) {
    double v = benchGenValue(type, op, r, idx, seed, nRanks);
    switch (op) {
      case ncclProd: acc *= v; break;
      case ncclMax: acc = v > acc ? v : acc; break;
      case ncclMin: acc = v < acc ? v : acc; break;
      case BENCH_OP_MULSUM: acc += v * benchMulsumScalar(type, r); break;
      default: acc += v; break;  /* sum, avg */
    }
  }
  if (op == ncclAvg) acc = types[type].isFloat ? acc / nRanks : floor(acc / nRanks);
  return acc;
}

/* Round-to-nearest-even encoding of a small IEEE-like float (half, bf16, fp8). */
static uint32_t encodeSmall(double v, const struct typeInfo* t) {
  int eb = t->expBits, mb = t->manBits, bias = (1 << (eb - 1)) - 1;
  uint32_t sign = v < 0 ? 1u : 0u;
  if (sign) v = -v;
  uint32_t bits = 0;
  if (v != 0) {
    int e;
    double m = frexp(v, &e);
    int field = e - 1 + bias;
    if (field >= 1) {
      uint32_t frac = (uint32_t)nearbyint((m * 2 - 1) * (double)(1u << mb));
      if (frac == (1u << mb)) { frac = 0; field++; }
      bits = ((uint32_t)field << mb) | frac;
    } else {
      bits = (uint32_t)nearbyint(ldexp(v, bias - 1 + mb));
    }
    /* Saturate at the largest finite value (e4m3 keeps its top exponent, minus the NaN code). */
    uint32_t maxFinite = (t->expBits == 4) ? ((1u << (eb + mb)) - 2) : ((((1u << eb) - 2)) << mb) |
                                                                           ((1u << mb) - 1);
    if (bits > maxFinite) bits = maxFinite;
  }
  return (sign << (eb + mb)) | bits;
}

static double decodeSmall(uint32_t b, const struct typeInfo* t) {
  int eb = t->expBits, mb = t->manBits, bias = (1 << (eb - 1)) - 1;
  uint32_t field = (b >> mb) & ((1u << eb) - 1), frac = b & ((1u << mb) - 1);
  double v = field == 0 ? ldexp((double)frac, 1 - bias - mb)
                        : ldexp((double)((1u << mb) + frac), (int)field - bias - mb);
  return ((b >> (eb + mb)) & 1) ? -v : v;
}

void benchStore(int type, void* buf, size_t idx, double v) {
  uint64_t u = (uint64_t)(int64_t)v;  /* integers wrap to the type's width, as the library does */
  switch (type) {
    case ncclInt8: case ncclUint8: ((uint8_t*)buf)[idx] = (uint8_t)u; break;
    case ncclInt32: case ncclUint32: ((uint32_t*)buf)[idx] = (uint32_t)u; break;
    case ncclInt64: case ncclUint64: ((uint64_t*)buf)[idx] = u; break;
    case ncclFloat32: ((float*)buf)[idx] = (float)v; break;
    case ncclFloat64: ((double*)buf)[idx] = v; break;
    case ncclFloat16: case ncclBfloat16:
      ((uint16_t*)buf)[idx] = (uint16_t)encodeSmall(v, &types[type]);
      break;
    default: ((uint8_t*)buf)[idx] = (uint8_t)encodeSmall(v, &types[type]); break;
  }
}

double benchLoad(int type, const void* buf, size_t idx) {
  switch (type) {
    case ncclInt8: return ((const int8_t*)buf)[idx];
    case ncclUint8: return ((const uint8_t*)buf)[idx];
    case ncclInt32: return ((const int32_t*)buf)[idx];
    case ncclUint32: return ((const uint32_t*)buf)[idx];
    case ncclInt64: return (double)((const int64_t*)buf)[idx];
    case ncclUint64: return (double)((const uint64_t*)buf)[idx];
    case ncclFloat32: return ((const float*)buf)[idx];
    case ncclFloat64: return ((const double*)buf)[idx];
    case ncclFloat16: case ncclBfloat16: return decodeSmall(((const uint16_t*)buf)[idx], &types[type]);
    default: return decodeSmall(((const uint8_t*)buf)[idx], &types[type]);
  }
}

double benchEncodeDecode(int type, double v) {
  uint64_t tmp = 0;
  benchStore(type, &tmp, 0, v);
  return benchLoad(type, &tmp, 0);
}

void benchFillGen(void* buf, size_t n, int type, int op, int rank, size_t idx0, uint64_t seed,
                  int nRanks) {
  for (size_t i = 0; i < n; i++)
    benchStore(type, buf, i, benchGenValue(type, op, rank, idx0 + i, seed, nRanks));
}

void benchFillReduced(void* buf, size_t n, int type, int op, size_t idx0, uint64_t seed,
                      int nRanks) {
  for (size_t i = 0; i < n; i++)
    benchStore(type, buf, i, benchReduceExpected(type, op, idx0 + i, seed, nRanks));
}

int64_t benchCompare(const void* got, const void* want, size_t n, int type, int op, int nRanks) {
  size_t sz = types[type].size;
  int64_t wrong = 0;
  if (op == ncclAvg && types[type].isFloat) {
    double tol = ldexp(1.0, -types[type].manBits) * (nRanks + 1);
    for (size_t i = 0; i < n; i++) {
      double g = benchLoad(type, got, i), w = benchLoad(type, want, i);
      if (!(fabs(g - w) <= fabs(w) * tol)) wrong++;
    }
    return wrong;
  }
  if (memcmp(got, want, n * sz) == 0) return 0;  /* the common case, fast */
  for (size_t i = 0; i < n; i++)
    if (memcmp((const char*)got + i * sz, (const char*)want + i * sz, sz) != 0) wrong++;
  return wrong;
}

size_t benchChunk(size_t count, size_t eltSize, int nRanks) {
  size_t align = eltSize < 16 ? 16 / eltSize : 1;
  return (count / (size_t)nRanks) & ~(align - 1);
}
