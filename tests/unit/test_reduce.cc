// Reductions (src/device/reduce.h): every datatype x kind against a reference computed here in
// doubles / exact integers, with its own decoder and rounding (frexp/nearbyint, not bit tricks).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "narrow_float.h"
#include "device/reduce.h"

namespace {

// ---- independent reference for the formats ----
struct Fmt {
  int ebits, mbits, bias;  // layout (narrow formats)
  bool e4m3;               // no inf; only S.1111.111 is NaN
  double maxv;             // largest finite
  bool sat;                // overflow saturates (fp8) instead of inf
};
const Fmt kHalf{5, 10, 15, false, 65504.0, false};
const Fmt kBf16{8, 7, 127, false, 0x1.fep127, false};
const Fmt kE4m3{4, 3, 7, true, 448.0, true};
const Fmt kE5m2{5, 2, 15, false, 57344.0, true};

double refDecode(uint32_t v, const Fmt& f) { return mendtest::decodeNarrow(v, f.ebits, f.mbits, f.bias, f.e4m3); }

// Round a double to the format, to nearest even (the default rounding mode of nearbyint).
double refRound(double x, const Fmt& f) {
  if (std::isnan(x) || x == 0) return x;
  if (std::isinf(x)) return f.sat ? std::copysign(f.maxv, x) : x;
  int e;
  std::frexp(std::fabs(x), &e);
  e = std::max(e - 1, 1 - f.bias);
  double q = std::ldexp(1.0, e - f.mbits);
  double r = std::nearbyint(x / q) * q;
  if (std::fabs(r) > f.maxv) return f.sat ? std::copysign(f.maxv, x) : std::copysign(INFINITY, x);
  return r;
}

// ---- datatypes ----
struct TypeInfo {
  ncclDataType_t t;
  size_t size;
  int intBits;       // 0 for floating types
  bool isSigned;     // integers
  const Fmt* fmt;    // narrow floats; NULL for float/double/integers
};
const TypeInfo kTypes[] = {
    {ncclInt8, 1, 8, true, nullptr},      {ncclUint8, 1, 8, false, nullptr},
    {ncclInt32, 4, 32, true, nullptr},    {ncclUint32, 4, 32, false, nullptr},
    {ncclInt64, 8, 64, true, nullptr},    {ncclUint64, 8, 64, false, nullptr},
    {ncclFloat16, 2, 0, false, &kHalf},   {ncclFloat32, 4, 0, false, nullptr},
    {ncclFloat64, 8, 0, false, nullptr},  {ncclBfloat16, 2, 0, false, &kBf16},
    {ncclFloat8e4m3, 1, 0, false, &kE4m3}, {ncclFloat8e5m2, 1, 0, false, &kE5m2},
};

uint64_t rawAt(const TypeInfo& ti, const void* p, size_t i) {
  uint64_t v = 0;
  memcpy(&v, (const char*)p + i * ti.size, ti.size);
  return v;
}
void putRaw(const TypeInfo& ti, void* p, size_t i, uint64_t v) { memcpy((char*)p + i * ti.size, &v, ti.size); }

// Integers as exact values: unsigned in [0, 2^b), signed sign-extended.
int64_t intVal(const TypeInfo& ti, uint64_t raw) {
  if (ti.isSigned && ti.intBits < 64 && (raw >> (ti.intBits - 1)) & 1) return (int64_t)(raw | (~0ull << ti.intBits));
  return (int64_t)raw;
}
uint64_t wrap(const TypeInfo& ti, uint64_t v) { return ti.intBits == 64 ? v : v & ((1ull << ti.intBits) - 1); }

double fltVal(const TypeInfo& ti, uint64_t raw) {
  if (ti.fmt) return refDecode((uint32_t)raw, *ti.fmt);
  if (ti.t == ncclFloat32) { float f; uint32_t u = (uint32_t)raw; memcpy(&f, &u, 4); return f; }
  double d;
  memcpy(&d, &raw, 8);
  return d;
}
double roundTo(const TypeInfo& ti, double x) {
  if (ti.fmt) return refRound(x, *ti.fmt);
  return ti.t == ncclFloat32 ? (double)(float)x : x;
}

// Random inputs that exercise every class: random bit patterns (NaN, inf, subnormals for the narrow
// types) plus ordinary values for float/double, where random bits are nearly all huge or tiny.
void fillRandom(const TypeInfo& ti, void* p, size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-100.0, 100.0);
  for (size_t i = 0; i < n; i++) {
    uint64_t raw = rng();
    if (!ti.intBits && !ti.fmt && rng() % 4 != 0) {
      double d = u(rng);
      if (ti.t == ncclFloat32) { float f = (float)d; uint32_t b; memcpy(&b, &f, 4); raw = b; }
      else memcpy(&raw, &d, 8);
    }
    putRaw(ti, p, i, raw);
  }
}

// ---- the reference reduction of one element ----
struct Ref {
  bool isInt;
  uint64_t i;        // integer result (wrapped)
  double f;          // float result
  bool zeroSignMatters;
};

Ref refIntOp(const TypeInfo& ti, int kind, uint64_t a, uint64_t b, uint64_t s, int nr, int flags) {
  int64_t sa = intVal(ti, a), sb = intVal(ti, b);
  uint64_t r = 0;
  switch (kind) {
    case MEND_RED_SUM: r = a + b; break;
    case MEND_RED_PROD: r = a * b; break;
    case MEND_RED_MAX: r = ti.isSigned ? (sa > sb ? a : b) : (a > b ? a : b); break;
    case MEND_RED_MIN: r = ti.isSigned ? (sa < sb ? a : b) : (a < b ? a : b); break;
    case MEND_RED_PREMULSUM: r = (flags & MEND_RED_PREOP) ? a * s + b : a + b; break;
    case MEND_RED_SUM_POSTDIV: {
      r = wrap(ti, a + b);
      if (!(flags & MEND_RED_POSTOP)) break;
      if (ti.isSigned) {  // divide the magnitude, restore the sign: truncation toward zero
        int64_t v = intVal(ti, r);
        uint64_t q = (v < 0 ? 0 - (uint64_t)v : (uint64_t)v) / (uint64_t)nr;
        r = v < 0 ? 0 - q : q;
      } else {
        r /= (uint64_t)nr;
      }
      break;
    }
  }
  return Ref{true, wrap(ti, r), 0, false};
}

Ref refFltOp(const TypeInfo& ti, int kind, double a, double b, double s, int nr, int flags) {
  auto maxmin = [](double x, double y, bool mx) {
    if (std::isnan(x)) return y;
    if (std::isnan(y)) return x;
    return mx ? (x > y ? x : y) : (x < y ? x : y);
  };
  switch (kind) {
    case MEND_RED_SUM: return Ref{false, 0, roundTo(ti, a + b), true};
    case MEND_RED_PROD: return Ref{false, 0, roundTo(ti, a * b), true};
    case MEND_RED_MAX: return Ref{false, 0, maxmin(a, b, true), false};
    case MEND_RED_MIN: return Ref{false, 0, maxmin(a, b, false), false};
    case MEND_RED_PREMULSUM: {
      double pa = (flags & MEND_RED_PREOP) ? roundTo(ti, a * s) : a;
      return Ref{false, 0, roundTo(ti, pa + b), true};
    }
    default: {  // SUM_POSTDIV on a float type: sum, then divide (rounded)
      double sum = roundTo(ti, a + b);
      return Ref{false, 0, (flags & MEND_RED_POSTOP) ? roundTo(ti, sum / nr) : sum, true};
    }
  }
}

// Compare a result element with the reference; returns a message on mismatch.
bool sameAsRef(const TypeInfo& ti, uint64_t got, const Ref& r) {
  if (r.isInt) return got == r.i;
  double g = fltVal(ti, got);
  if (std::isnan(r.f)) return std::isnan(g);
  if (g != r.f) return false;
  return !(g == 0 && r.zeroSignMatters && std::signbit(g) != std::signbit(r.f));
}

struct RedOpMaker {  // a resolved op for any (type, kind), built directly
  static mendRedOp make(ncclDataType_t t, int kind, uint64_t scalar, int nRanks) {
    mendRedOp op;
    memset(&op, 0, sizeof op);
    op.kind = (uint8_t)kind;
    op.type = (uint8_t)t;
    op.scalar = scalar;
    op.nRanks = nRanks;
    return op;
  }
};

// A scalar for PreMulSum in the type: small integers, 0.75 for floats (exact in every format).
uint64_t scalarBits(const TypeInfo& ti) {
  if (ti.intBits) return ti.isSigned ? wrap(ti, (uint64_t)-3) : 3;
  switch (ti.t) {
    case ncclFloat16: return mendFloatToHalf(0.75f);
    case ncclBfloat16: return mendFloatToBf16(0.75f);
    case ncclFloat8e4m3: return mendFloatToE4m3(0.75f);
    case ncclFloat8e5m2: return mendFloatToE5m2(0.75f);
    case ncclFloat32: { float f = 0.75f; uint32_t u; memcpy(&u, &f, 4); return u; }
    default: { double d = 0.75; uint64_t u; memcpy(&u, &d, 8); return u; }
  }
}

enum Alias { kNone, kDstLocal, kDstPeer };

// Run one (type, kind, flags, n, alias, misalignment) case and check every element and the guards.
void checkCase(const TypeInfo& ti, int kind, int flags, size_t n, Alias alias, size_t skew, std::mt19937_64& rng) {
  const size_t guard = 16, bytes = n * ti.size;
  std::vector<unsigned char> A(bytes + 2 * guard + 8, 0xA5), B(A), D(A);
  unsigned char *a = A.data() + guard + skew, *b = B.data() + guard + skew, *d = D.data() + guard + skew;
  fillRandom(ti, a, n, rng);
  fillRandom(ti, b, n, rng);
  std::vector<unsigned char> a0(a, a + bytes), b0(b, b + bytes);
  const int nr = 3;
  uint64_t s = scalarBits(ti);
  mendRedOp op = RedOpMaker::make(ti.t, kind, s, nr);
  void* dst = alias == kDstLocal ? (void*)a : alias == kDstPeer ? (void*)b : (void*)d;
  std::vector<unsigned char>& dbuf = alias == kDstLocal ? A : alias == kDstPeer ? B : D;
  mendReduce(&op, dst, a, b, n, flags);
  for (size_t i = 0; i < n; i++) {
    uint64_t ra = rawAt(ti, a0.data(), i), rb = rawAt(ti, b0.data(), i);
    Ref r = ti.intBits ? refIntOp(ti, kind, ra, rb, s, nr, flags)
                       : refFltOp(ti, kind, fltVal(ti, ra), fltVal(ti, rb), fltVal(ti, s), nr, flags);
    uint64_t got = rawAt(ti, dst, i);
    ASSERT_TRUE(sameAsRef(ti, got, r))
        << mendTypeName(ti.t) << " " << mendRedKindName(kind) << " flags=" << flags << " n=" << n
        << " alias=" << alias << " skew=" << skew << " i=" << i << std::hex << " a=0x" << ra << " b=0x" << rb
        << " got=0x" << got << std::dec << " want=" << (r.isInt ? (double)r.i : r.f)
        << " got=" << (ti.intBits ? 0.0 : fltVal(ti, got));
  }
  size_t off = (size_t)((unsigned char*)dst - dbuf.data());
  for (size_t k = 0; k < dbuf.size(); k++)
    if (k < off || k >= off + bytes) {
      ASSERT_EQ(dbuf[k], 0xA5) << "write outside dst at byte " << k;
    }
}

}  // namespace

TEST(ReduceOps, EveryTypeKindAliasAndSize) {
  std::mt19937_64 rng(12345);
  const size_t sizes[] = {0, 1, 7, 1000};
  for (const TypeInfo& ti : kTypes)
    for (int kind = 0; kind < MEND_RED_NKINDS; kind++)
      for (int flags = 0; flags < 4; flags++)
        for (size_t n : sizes)
          for (int alias = kNone; alias <= kDstPeer; alias++)
            for (size_t skew : {0, 1}) {
              checkCase(ti, kind, flags, n, (Alias)alias, skew, rng);
              if (HasFatalFailure()) return;
            }
}

TEST(ReduceOps, CopyAppliesPreAndPost) {
  std::mt19937_64 rng(7);
  const size_t n = 333;
  for (const TypeInfo& ti : kTypes)
    for (int kind = 0; kind < MEND_RED_NKINDS; kind++)
      for (int flags = 0; flags < 4; flags++)
        for (bool inPlace : {false, true}) {
          std::vector<unsigned char> src(n * ti.size + 1), dstv(n * ti.size + 1, 0);
          unsigned char* s = src.data() + 1;  // unaligned
          fillRandom(ti, s, n, rng);
          std::vector<unsigned char> s0(s, s + n * ti.size);
          uint64_t sc = scalarBits(ti);
          mendRedOp op = RedOpMaker::make(ti.t, kind, sc, 5);
          unsigned char* d = inPlace ? s : dstv.data() + 1;
          mendReduceCopy(&op, d, s, n, flags);
          for (size_t i = 0; i < n; i++) {
            uint64_t x = rawAt(ti, s0.data(), i), got = rawAt(ti, d, i);
            bool pre = kind == MEND_RED_PREMULSUM && (flags & MEND_RED_PREOP);
            bool post = kind == MEND_RED_SUM_POSTDIV && (flags & MEND_RED_POSTOP);
            if (!pre && !post) { ASSERT_EQ(got, x); continue; }
            Ref r;
            if (ti.intBits) {
              // pre: x*s; post: x/5 truncated.  Reuse the reducer reference with a zero partner.
              r = pre ? refIntOp(ti, MEND_RED_PREMULSUM, x, 0, sc, 5, MEND_RED_PREOP)
                      : refIntOp(ti, MEND_RED_SUM_POSTDIV, x, 0, sc, 5, MEND_RED_POSTOP);
            } else {
              double v = fltVal(ti, x);
              r = Ref{false, 0, roundTo(ti, pre ? v * fltVal(ti, sc) : v / 5), true};
            }
            ASSERT_TRUE(sameAsRef(ti, got, r)) << mendTypeName(ti.t) << " " << mendRedKindName(kind) << " i=" << i;
          }
        }
}

TEST(ReduceOps, IntegerWraparoundAndTruncation) {
  mendRedOp op;
  int8_t a8 = 127, b8 = 1, d8;
  ASSERT_EQ(mendRedOpResolve(ncclSum, ncclInt8, 2, &op), ncclSuccess);
  mendReduce(&op, &d8, &a8, &b8, 1, 0);
  EXPECT_EQ(d8, -128);
  uint8_t au = 255, bu = 1, du;
  ASSERT_EQ(mendRedOpResolve(ncclSum, ncclUint8, 2, &op), ncclSuccess);
  mendReduce(&op, &du, &au, &bu, 1, 0);
  EXPECT_EQ(du, 0);
  int32_t a32 = 65536, d32;
  ASSERT_EQ(mendRedOpResolve(ncclProd, ncclInt32, 2, &op), ncclSuccess);
  mendReduce(&op, &d32, &a32, &a32, 1, 0);
  EXPECT_EQ(d32, 0);
  int64_t a64 = INT64_MIN, b64 = -1, d64;
  ASSERT_EQ(mendRedOpResolve(ncclSum, ncclInt64, 2, &op), ncclSuccess);
  mendReduce(&op, &d64, &a64, &b64, 1, 0);
  EXPECT_EQ(d64, INT64_MAX);
  // Integer avg: sum, then one division toward zero.
  ASSERT_EQ(mendRedOpResolve(ncclAvg, ncclInt32, 2, &op), ncclSuccess);
  EXPECT_EQ(op.kind, MEND_RED_SUM_POSTDIV);
  int32_t x[3] = {-7, 7, INT32_MIN}, y[3] = {0, 0, 0}, r[3];
  mendReduce(&op, r, x, y, 3, MEND_RED_PREOP | MEND_RED_POSTOP);
  EXPECT_EQ(r[0], -3);
  EXPECT_EQ(r[1], 3);
  EXPECT_EQ(r[2], INT32_MIN / 2);
  ASSERT_EQ(mendRedOpResolve(ncclAvg, ncclInt8, 200, &op), ncclSuccess);  // divisor beyond int8 range
  int8_t m8 = -128, z8 = 0, q8;
  mendReduce(&op, &q8, &m8, &z8, 1, MEND_RED_POSTOP);
  EXPECT_EQ(q8, 0);
  ASSERT_EQ(mendRedOpResolve(ncclAvg, ncclInt8, 2, &op), ncclSuccess);
  mendReduce(&op, &q8, &m8, &z8, 1, MEND_RED_POSTOP);
  EXPECT_EQ(q8, -64);
}

// Simulate a ring reduction over nRanks: one rank sends its pre-multiplied input, each next rank
// adds its own (pre-multiplied) input to the partial, the last one applies the post-division.
TEST(ReduceAvg, RingSequenceMatchesReference) {
  std::mt19937_64 rng(99);
  const size_t n = 257;
  for (const TypeInfo& ti : kTypes)
    for (int nr = 1; nr <= 16; nr++) {
      mendRedOp op;
      ASSERT_EQ(mendRedOpResolve(ncclAvg, ti.t, nr, &op), ncclSuccess);
      EXPECT_EQ(op.kind, ti.intBits ? MEND_RED_SUM_POSTDIV : MEND_RED_PREMULSUM);
      std::vector<std::vector<unsigned char>> in(nr, std::vector<unsigned char>(n * ti.size));
      for (auto& v : in) {
        if (ti.intBits) fillRandom(ti, v.data(), n, rng);
        else
          for (size_t i = 0; i < n; i++) {  // finite values a narrow format can hold
            float f = (float)((int)(rng() % 201) - 100) / 8.0f;
            uint64_t raw = ti.t == ncclFloat16 ? mendFloatToHalf(f) : ti.t == ncclBfloat16 ? mendFloatToBf16(f)
                         : ti.t == ncclFloat8e4m3 ? mendFloatToE4m3(f) : ti.t == ncclFloat8e5m2 ? mendFloatToE5m2(f) : 0;
            if (ti.t == ncclFloat32) { uint32_t u; memcpy(&u, &f, 4); raw = u; }
            if (ti.t == ncclFloat64) { double dd = f; memcpy(&raw, &dd, 8); }
            putRaw(ti, v.data(), i, raw);
          }
      }
      int start = nr / 2;  // the ring may start anywhere
      std::vector<unsigned char> acc(n * ti.size);
      int last = nr == 1 ? MEND_RED_POSTOP : 0;
      mendReduceCopy(&op, acc.data(), in[start].data(), n, MEND_RED_PREOP | last);
      for (int k = 1; k < nr; k++)
        mendReduce(&op, acc.data(), in[(start + k) % nr].data(), acc.data(), n,
                   MEND_RED_PREOP | (k == nr - 1 ? MEND_RED_POSTOP : 0));
      // 1/nRanks in the type: double directly, the others through float (as NCCL computes it).
      double s = ti.intBits ? 0 : ti.t == ncclFloat64 ? 1.0 / nr : roundTo(ti, (double)(float)(1.0 / nr));
      for (size_t i = 0; i < n; i++) {
        uint64_t got = rawAt(ti, acc.data(), i);
        if (ti.intBits) {
          uint64_t sum = 0;
          for (int r = 0; r < nr; r++) sum += rawAt(ti, in[r].data(), i);
          Ref want = refIntOp(ti, MEND_RED_SUM_POSTDIV, wrap(ti, sum), 0, 0, nr, MEND_RED_POSTOP);
          ASSERT_EQ(got, want.i) << mendTypeName(ti.t) << " nRanks=" << nr << " i=" << i;
          continue;
        }
        double ref = roundTo(ti, fltVal(ti, rawAt(ti, in[start].data(), i)) * s), exact = 0;
        for (int k = 1; k < nr; k++)
          ref = roundTo(ti, roundTo(ti, fltVal(ti, rawAt(ti, in[(start + k) % nr].data(), i)) * s) + ref);
        for (int r = 0; r < nr; r++) exact += fltVal(ti, rawAt(ti, in[r].data(), i));
        exact /= nr;
        ASSERT_EQ(fltVal(ti, got), ref) << mendTypeName(ti.t) << " nRanks=" << nr << " i=" << i;
        // And close to the true mean (|x| <= 12.5): within the roundings of nRanks steps.
        double tol = ti.t == ncclFloat64 ? 1e-12 : ti.t == ncclFloat32 ? 1e-4 : ti.t == ncclFloat16 ? 0.1
                   : ti.t == ncclBfloat16 ? 0.8 : 4.0;  // fp8: 1/nRanks itself is off by up to 6% (e4m3)
        EXPECT_NEAR(fltVal(ti, got), exact, tol) << mendTypeName(ti.t) << " nRanks=" << nr;
      }
    }
}

TEST(ReduceConvert, HalfExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = mendHalfToFloat((uint16_t)h);
    double ref = refDecode(h, kHalf);
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_EQ(mendFloatToHalf(f), h | 0x0200) << "NaN keeps sign and payload, becomes quiet: " << h;
      continue;
    }
    ASSERT_EQ((double)f, ref) << h;
    ASSERT_EQ(std::signbit(f), std::signbit(ref)) << h;
    ASSERT_EQ(mendFloatToHalf(f), h) << h;
  }
}

TEST(ReduceConvert, Bf16ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = mendBf16ToFloat((uint16_t)h);
    double ref = refDecode(h, kBf16);
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_EQ(mendFloatToBf16(f), h | 0x0040) << h;
      continue;
    }
    ASSERT_EQ((double)f, ref) << h;
    ASSERT_EQ(mendFloatToBf16(f), h) << h;
  }
}

TEST(ReduceConvert, Fp8ExhaustiveRoundTrip) {
  for (uint32_t v = 0; v < 256; v++) {
    float f4 = mendE4m3ToFloat((uint8_t)v), f5 = mendE5m2ToFloat((uint8_t)v);
    double r4 = refDecode(v, kE4m3), r5 = refDecode(v, kE5m2);
    if (std::isnan(r4)) EXPECT_TRUE(std::isnan(f4)) << v;
    else EXPECT_EQ((double)f4, r4) << v;
    EXPECT_EQ(mendFloatToE4m3(f4), v) << "e4m3 round trip " << v;  // NaN is a single code per sign
    if (std::isnan(r5)) {
      EXPECT_TRUE(std::isnan(f5)) << v;
      EXPECT_EQ(mendFloatToE5m2(f5), (v & 0x80) | 0x7f) << "e5m2 NaN is S.11111.11 " << v;
    } else if (std::isinf(r5)) {
      EXPECT_TRUE(std::isinf(f5) && std::signbit(f5) == std::signbit(r5)) << v;
      EXPECT_EQ(mendFloatToE5m2(f5), (v & 0x80) | 0x7b) << "satfinite: inf becomes max finite " << v;
    } else {
      EXPECT_EQ((double)f5, r5) << v;
      EXPECT_EQ(mendFloatToE5m2(f5), v) << "e5m2 round trip " << v;
    }
  }
  EXPECT_EQ(mendE4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(mendE4m3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(mendE5m2ToFloat(0x7b), 57344.0f);
}

TEST(ReduceConvert, TiesToEvenSubnormalsAndSaturation) {
  auto ld = [](double m, int e) { return (float)std::ldexp(m, e); };
  // half: ties at 1 + 2^-11 (to 1.0) and 1 + 3*2^-11 (up to even); overflow at the tie 65520.
  EXPECT_EQ(mendFloatToHalf(1.0f + ld(1, -11)), 0x3c00);
  EXPECT_EQ(mendFloatToHalf(1.0f + ld(3, -11)), 0x3c02);
  EXPECT_EQ(mendFloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(mendFloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(mendFloatToHalf(-INFINITY), 0xfc00);
  EXPECT_EQ(mendFloatToHalf(ld(1, -25)), 0x0000);   // half the smallest subnormal: tie to 0
  EXPECT_EQ(mendFloatToHalf(ld(3, -25)), 0x0002);   // 1.5 ulps: tie to even (2)
  EXPECT_EQ(mendFloatToHalf(ld(1, -24)), 0x0001);
  EXPECT_EQ(mendFloatToHalf(-ld(1023, -24)), 0x83ff);
  EXPECT_EQ(mendFloatToHalf(ld(2047, -25)), 0x0400); // rounds up into the smallest normal
  EXPECT_EQ(mendFloatToHalf(-0.0f), 0x8000);
  // bf16
  EXPECT_EQ(mendFloatToBf16(1.0f + ld(1, -8)), 0x3f80);
  EXPECT_EQ(mendFloatToBf16(1.0f + ld(3, -8)), 0x3f82);
  EXPECT_EQ(mendFloatToBf16(ld(0x1ff, 119)), 0x7f80); // max bf16 + half ulp, tie: overflows to inf
  EXPECT_EQ(mendFloatToBf16(NAN) & 0x7fc0, 0x7fc0);
  // e4m3: ties, saturation (inf and overflow give 448), NaN, subnormals
  EXPECT_EQ(mendFloatToE4m3(1.0f + 1.0f / 16), 0x38);
  EXPECT_EQ(mendFloatToE4m3(1.0f + 3.0f / 16), 0x3a);
  EXPECT_EQ(mendFloatToE4m3(464.0f), 0x7e);
  EXPECT_EQ(mendFloatToE4m3(1e6f), 0x7e);
  EXPECT_EQ(mendFloatToE4m3(INFINITY), 0x7e);
  EXPECT_EQ(mendFloatToE4m3(-INFINITY), 0xfe);
  EXPECT_EQ(mendFloatToE4m3(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(mendFloatToE4m3(ld(1, -10)), 0x00);
  EXPECT_EQ(mendFloatToE4m3(ld(3, -10)), 0x02);
  EXPECT_EQ(mendFloatToE4m3(ld(15, -10)), 0x08);   // 7.5 ulps -> 8 = the smallest normal
  // e5m2
  EXPECT_EQ(mendFloatToE5m2(1.0f + 1.0f / 8), 0x3c);
  EXPECT_EQ(mendFloatToE5m2(1.0f + 3.0f / 8), 0x3e);
  EXPECT_EQ(mendFloatToE5m2(61440.0f), 0x7b);
  EXPECT_EQ(mendFloatToE5m2(-INFINITY), 0xfb);
  EXPECT_EQ(mendFloatToE5m2(ld(1, -17)), 0x00);
  EXPECT_EQ(mendFloatToE5m2(ld(3, -17)), 0x02);
}

// Every 4099th float (all classes, including float subnormals and NaN payloads) against refRound.
TEST(ReduceConvert, SampledFloatsMatchReference) {
  struct { const Fmt* f; uint32_t (*enc)(float); float (*dec)(uint32_t); } fmts[] = {
      {&kHalf, [](float x) { return (uint32_t)mendFloatToHalf(x); }, [](uint32_t v) { return mendHalfToFloat((uint16_t)v); }},
      {&kBf16, [](float x) { return (uint32_t)mendFloatToBf16(x); }, [](uint32_t v) { return mendBf16ToFloat((uint16_t)v); }},
      {&kE4m3, [](float x) { return (uint32_t)mendFloatToE4m3(x); }, [](uint32_t v) { return mendE4m3ToFloat((uint8_t)v); }},
      {&kE5m2, [](float x) { return (uint32_t)mendFloatToE5m2(x); }, [](uint32_t v) { return mendE5m2ToFloat((uint8_t)v); }},
  };
  for (auto& fm : fmts)
    for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
      uint32_t bits = (uint32_t)u;
      float x;
      memcpy(&x, &bits, 4);
      double want = refRound(x, *fm.f), got = fm.dec(fm.enc(x));
      if (std::isnan(want)) { ASSERT_TRUE(std::isnan(got)) << std::hex << bits; continue; }
      ASSERT_EQ(got, want) << std::hex << "bits 0x" << bits;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << bits;
    }
}

TEST(ReducePreMulSum, HostImmediateAndPointerScalar) {
  mendRedOp op;
  float s = 2.5f;
  uint64_t imm = 0;
  memcpy(&imm, &s, sizeof s);
  ASSERT_EQ(mendRedOpResolvePreMulSum(ncclFloat32, ncclScalarHostImmediate, imm, nullptr, ncclFloat32, &op), ncclSuccess);
  float a[3] = {1, 2, -4}, b[3] = {10, 10, 10}, d[3];
  mendReduce(&op, d, a, b, 3, MEND_RED_PREOP);
  EXPECT_EQ(d[0], 12.5f);
  EXPECT_EQ(d[1], 15.0f);
  EXPECT_EQ(d[2], 0.0f);
  mendReduce(&op, d, a, b, 3, 0);  // a peer partial: no pre-multiplication
  EXPECT_EQ(d[0], 11.0f);
  mendReduceCopy(&op, d, a, 3, MEND_RED_PREOP);
  EXPECT_EQ(d[2], -10.0f);
  // Pointer scalar: read on every call, so a change between calls is seen.
  double ds = 3.0;
  ASSERT_EQ(mendRedOpResolvePreMulSum(ncclFloat64, ncclScalarDevice, 0, &ds, ncclFloat64, &op), ncclSuccess);
  double x[2] = {1, 2}, y[2] = {0.5, 0.5}, z[2];
  mendReduce(&op, z, x, y, 2, MEND_RED_PREOP);
  EXPECT_EQ(z[1], 6.5);
  ds = -1.0;
  mendReduce(&op, z, x, y, 2, MEND_RED_PREOP);
  EXPECT_EQ(z[1], -1.5);
  // Only sizeof(datatype) bytes of the immediate count (bf16 given as 2 bytes; junk above ignored).
  uint64_t junk = 0xdeadbeef00000000ull | mendFloatToBf16(0.5f);
  ASSERT_EQ(mendRedOpResolvePreMulSum(ncclBfloat16, ncclScalarHostImmediate, junk, nullptr, ncclBfloat16, &op), ncclSuccess);
  uint16_t hb[1] = {mendFloatToBf16(6.0f)}, hz[1] = {mendFloatToBf16(0.0f)}, hr[1];
  mendReduce(&op, hr, hb, hz, 1, MEND_RED_PREOP);
  EXPECT_EQ(mendBf16ToFloat(hr[0]), 3.0f);
  // Integer PreMulSum wraps.
  int8_t i8s = 100;
  uint64_t i8imm = (uint8_t)i8s;
  ASSERT_EQ(mendRedOpResolvePreMulSum(ncclInt8, ncclScalarHostImmediate, i8imm, nullptr, ncclInt8, &op), ncclSuccess);
  int8_t ia[1] = {3}, ib[1] = {0}, ir[1];
  mendReduce(&op, ir, ia, ib, 1, MEND_RED_PREOP);
  EXPECT_EQ(ir[0], (int8_t)44);  // 300 mod 256
}

TEST(ReduceResolve, BuiltinsAndAvgLowering) {
  mendRedOp op;
  ASSERT_EQ(mendRedOpResolve(ncclMax, ncclFloat16, 4, &op), ncclSuccess);
  EXPECT_EQ(op.kind, MEND_RED_MAX);
  ASSERT_EQ(mendRedOpResolve(ncclAvg, ncclFloat32, 4, &op), ncclSuccess);
  EXPECT_EQ(op.kind, MEND_RED_PREMULSUM);
  float s;
  memcpy(&s, &op.scalar, 4);
  EXPECT_EQ(s, 0.25f);
  ASSERT_EQ(mendRedOpResolve(ncclAvg, ncclFloat16, 3, &op), ncclSuccess);
  EXPECT_EQ(op.scalar, mendFloatToHalf(1.0f / 3));
  ASSERT_EQ(mendRedOpResolve(ncclAvg, ncclUint64, 7, &op), ncclSuccess);
  EXPECT_EQ(op.kind, MEND_RED_SUM_POSTDIV);
  EXPECT_EQ(op.nRanks, 7);
  EXPECT_EQ(mendRedOpResolve(ncclNumOps, ncclFloat32, 2, &op), ncclInvalidArgument);
  EXPECT_EQ(mendRedOpResolve((ncclRedOp_t)-1, ncclFloat32, 2, &op), ncclInvalidArgument);
  EXPECT_EQ(mendRedOpResolve(ncclSum, ncclNumTypes, 2, &op), ncclInvalidArgument);
  EXPECT_EQ(mendRedOpResolve(ncclSum, (ncclDataType_t)-1, 2, &op), ncclInvalidArgument);
  EXPECT_EQ(mendRedOpResolve(ncclSum, ncclFloat32, 0, &op), ncclInvalidArgument);
  EXPECT_EQ(mendRedOpResolve(ncclSum, ncclFloat32, 2, nullptr), ncclInvalidArgument);
  EXPECT_EQ(mendTypeSize(ncclFloat8e5m2), 1u);
  EXPECT_EQ(mendTypeSize(ncclNumTypes), 0u);
  EXPECT_STREQ(mendTypeName(ncclBfloat16), "bfloat16");
  EXPECT_STREQ(mendOpName(ncclAvg), "avg");
  EXPECT_STREQ(mendOpName((ncclRedOp_t)(ncclNumOps + 3)), "premulsum");
  EXPECT_STREQ(mendRedKindName(MEND_RED_SUM_POSTDIV), "sumpostdiv");
}

TEST(ReduceResolve, PreMulSumRejectsBadInput) {
  mendRedOp op;
  EXPECT_EQ(mendRedOpResolvePreMulSum(ncclFloat16, ncclScalarHostImmediate, 0, nullptr, ncclFloat32, &op),
            ncclInvalidArgument);  // datatype mismatch
  EXPECT_EQ(mendRedOpResolvePreMulSum(ncclFloat32, 7, 0, nullptr, ncclFloat32, &op), ncclInvalidArgument);
  EXPECT_EQ(mendRedOpResolvePreMulSum(ncclFloat32, ncclScalarDevice, 0, nullptr, ncclFloat32, &op),
            ncclInvalidArgument);  // NULL device scalar
  EXPECT_EQ(mendRedOpResolvePreMulSum(ncclNumTypes, ncclScalarHostImmediate, 0, nullptr, ncclNumTypes, &op),
            ncclInvalidArgument);
  EXPECT_EQ(mendRedOpResolvePreMulSum(ncclFloat32, ncclScalarHostImmediate, 0, nullptr, ncclFloat32, nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(mendRedOpResolveUser(nullptr, ncclFloat32, &op), ncclInvalidArgument);
  EXPECT_EQ(mendRedOpResolveComm(nullptr, ncclSum, ncclFloat32, &op), ncclInvalidArgument);
}

// Not a pass/fail check: prints float32 sum throughput (PERF_NOTES: c=a+b ~9.4 GB/s of output).
TEST(ReducePerf, Float32SumThroughput) {
  const size_t n = (64u << 20) / sizeof(float);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), d(n, 0.0f), e(n, 2.0f);
  mendRedOp op;
  ASSERT_EQ(mendRedOpResolve(ncclSum, ncclFloat32, 2, &op), ncclSuccess);
  double best = 1e9, bestInPlace = 1e9;
  for (int it = 0; it < 5; it++) {
    auto t0 = std::chrono::steady_clock::now();
    mendReduce(&op, d.data(), a.data(), b.data(), n, 0);
    auto t1 = std::chrono::steady_clock::now();
    mendReduce(&op, e.data(), a.data(), e.data(), n, 0);
    auto t2 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    bestInPlace = std::min(bestInPlace, std::chrono::duration<double>(t2 - t1).count());
  }
  EXPECT_EQ(d[n - 1], 3.0f);
  EXPECT_EQ(e[n - 1], 7.0f);
  printf("[ perf ] float32 sum, 64 MiB: %.2f GB/s (dst separate), %.2f GB/s (in place), output bytes\n",
         n * sizeof(float) / best / 1e9, n * sizeof(float) / bestInPlace / 1e9);
}
