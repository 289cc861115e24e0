// The vector loops of the narrow floats (every set the CPU has: AVX2 with F16C, src/device/reduce_x86_v3.h;
// AVX-512, reduce_x86.h and friends; bf16's with AVX512_BF16 rounding; and the generated V3/V4 loops) and the fp8 result tables (src/device/reduce_fp8.h) give the same bits as the baseline
// loops and as dtypes.h's element functions: every fp8 pair, every half/bf16 value against a set of
// partners that covers the special values, every kind, unaligned pointers and every tail length.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "device/dtypes.h"
#include "device/reduce.h"

namespace {

const int kKinds[] = {MEND_RED_SUM, MEND_RED_PROD, MEND_RED_MAX, MEND_RED_MIN, MEND_RED_PREMULSUM,
                      MEND_RED_SUM_POSTDIV};

mendRedOp makeOp(ncclDataType_t type, int kind, uint64_t scalar, int nRanks) {
  mendRedOp op;
  memset(&op, 0, sizeof op);
  op.kind = (uint8_t)kind;
  op.type = (uint8_t)type;
  op.scalar = scalar;
  op.nRanks = kind == MEND_RED_SUM_POSTDIV ? nRanks : 1;
  return op;
}

// The element a kind computes, from dtypes.h directly (flags: both pre- and post-op on).
template <typename S>
S reference(ncclDataType_t type, const mendRedOp& op, S a, S b) {
  S s;
  memcpy(&s, &op.scalar, sizeof s);
#define REF_CASE(T, Tag)                                                              \
  case T:                                                                             \
    switch (op.kind) {                                                                \
      case MEND_RED_SUM: return (S)mendSum##Tag(a, b);                                \
      case MEND_RED_PROD: return (S)mendProd##Tag(a, b);                              \
      case MEND_RED_MAX: return (S)mendMax##Tag(a, b);                                \
      case MEND_RED_MIN: return (S)mendMin##Tag(a, b);                                \
      case MEND_RED_PREMULSUM: return (S)mendSum##Tag(mendProd##Tag(a, s), b);        \
      default: return (S)mendDiv##Tag(mendSum##Tag(a, b), (uint32_t)op.nRanks);       \
    }
  switch (type) {
    REF_CASE(ncclFloat16, F16)
    REF_CASE(ncclBfloat16, Bf16)
    REF_CASE(ncclFloat8e4m3, E4m3)
    REF_CASE(ncclFloat8e5m2, E5m2)
    default: return 0;
  }
#undef REF_CASE
}

template <typename S>
bool isNan(ncclDataType_t type, S v) {
  float f = type == ncclFloat16    ? mendHalfToFloat(v)
            : type == ncclBfloat16 ? mendBf16ToFloat(v)
            : type == ncclFloat8e4m3 ? mendE4m3ToFloat((uint8_t)v)
                                     : mendE5m2ToFloat((uint8_t)v);
  return f != f;
}

// got equals want, bit for bit; except that when both operands of the float operation are NaN,
// IEEE leaves open which one's payload the result carries (x86 takes the first source, and which
// source a compiler puts first varies), so any NaN is right there.
template <typename S>
bool same(ncclDataType_t type, const mendRedOp& op, S a, S b, S want, S got) {
  if (want == got) return true;
  S s;
  memcpy(&s, &op.scalar, sizeof s);
  S x = a;
  if (op.kind == MEND_RED_PREMULSUM) x = reference<S>(type, makeOp(type, MEND_RED_PROD, 0, 1), a, s);
  bool bothNan = isNan(type, x) && isNan(type, b);
  if (op.kind == MEND_RED_PREMULSUM && isNan(type, a) && isNan(type, s)) bothNan = true;  // the product's
  return bothNan && isNan(type, want) && isNan(type, got);
}

// Runs both loop sets over (a, b) and checks them against each other and against the reference.
template <typename S>
void checkPairs(ncclDataType_t type, const std::vector<S>& a, const std::vector<S>& b, uint64_t scalar) {
  const int flags = MEND_RED_PREOP | MEND_RED_POSTOP;
  size_t n = a.size();
  std::vector<S> base(n), vec(n);
  for (int set = 1; set <= mendReduceVecAvailable(); set++) {
  for (int kind : kKinds) {
    mendRedOp op = makeOp(type, kind, scalar, 3);
    mendReduceWith(0, &op, base.data(), a.data(), b.data(), n, flags);
    mendReduceWith(set, &op, vec.data(), a.data(), b.data(), n, flags);
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++) {
      S want = reference<S>(type, op, a[i], b[i]);
      if (!same(type, op, a[i], b[i], want, base[i]) || !same(type, op, a[i], b[i], want, vec[i])) {
        if (first == n) first = i;
        bad++;
      }
    }
    if (bad) {
      ADD_FAILURE() << mendTypeName(type) << " " << mendRedKindName(kind) << " set " << set << ": " << bad << " of " << n
                    << " differ; first a=0x" << std::hex << (unsigned)a[first] << " b=0x" << (unsigned)b[first]
                    << " reference 0x" << (unsigned)reference<S>(type, op, a[first], b[first]) << " baseline 0x"
                    << (unsigned)base[first] << " vector 0x" << (unsigned)vec[first];
    }
    // The copy forms: pre-multiplication of the own input, division of a final value.
    // (A NaN times a NaN scalar may carry either payload: compared as in same().)
    mendReduceCopyWith(0, &op, base.data(), a.data(), n, flags);
    mendReduceCopyWith(set, &op, vec.data(), a.data(), n, flags);
    S sc;
    memcpy(&sc, &op.scalar, sizeof sc);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
      bool nanPair = kind == MEND_RED_PREMULSUM && isNan(type, a[i]) && isNan(type, sc);
      if (base[i] != vec[i] && !(nanPair && isNan(type, base[i]) && isNan(type, vec[i]))) bad++;
    }
    EXPECT_EQ(0u, bad) << mendTypeName(type) << " copy " << mendRedKindName(kind) << " set " << set;
  }
  }
}

void skipWithoutVec() {
  if (!mendReduceVecAvailable()) GTEST_SKIP() << "no AVX2 with F16C on this CPU: only the baseline loops exist";
}

}  // namespace

TEST(ReduceVec, Fp8EveryPairEveryKind) {
  skipWithoutVec();
  for (ncclDataType_t type : {ncclFloat8e4m3, ncclFloat8e5m2}) {
    std::vector<uint8_t> a(65536), b(65536);
    for (uint32_t i = 0; i < 65536; i++) {
      a[i] = (uint8_t)(i >> 8);
      b[i] = (uint8_t)i;
    }
    for (uint64_t s : {0x38u, 0x00u, 0x80u, 0x7fu, 0x7eu, 0x01u, 0xb5u}) checkPairs<uint8_t>(type, a, b, s);
  }
}

// PreMulSum rounds the product to fp8 before the sum: every scalar, against every own input and a
// set of peer inputs (zeros, subnormals, max finite, NaN, and values either side of a rounding tie).
TEST(ReduceVec, Fp8PreMulSumEveryScalar) {
  skipWithoutVec();
  const uint8_t partners[] = {0x00, 0x80, 0x01, 0x81, 0x07, 0x08, 0x38, 0xb8,
                              0x7e, 0xfe, 0x7f, 0x7b, 0x7c, 0x3c, 0x44, 0xc9};
  for (ncclDataType_t type : {ncclFloat8e4m3, ncclFloat8e5m2}) {
    std::vector<uint8_t> a, b;
    for (uint8_t p : partners) {
      for (uint32_t v = 0; v < 256; v++) {
        a.push_back((uint8_t)v);
        b.push_back(p);
      }
    }
    for (uint32_t s = 0; s < 256; s++) checkPairs<uint8_t>(type, a, b, s);
  }
}

TEST(ReduceVec, HalfAndBf16EveryValueAgainstSpecials) {
  skipWithoutVec();
  // Partners: zeros, smallest/largest subnormals, smallest normal, one, max finite, infinities,
  // quiet and signalling NaNs with payloads (both signs), and random values.
  std::vector<uint16_t> partners = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x7bff,
                                    0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01, 0x7d55, 0x0080, 0x7f7f,
                                    0xff80, 0x7f80, 0x7fc0, 0xffc1, 0x7f81, 0x3f80, 0x0001, 0x8080};
  std::mt19937 rng(7);
  while (partners.size() < 32) partners.push_back((uint16_t)rng());
  for (ncclDataType_t type : {ncclFloat16, ncclBfloat16}) {
    for (uint64_t s : {0x3c00u, 0x3f80u, 0x7fc0u}) {
      std::vector<uint16_t> a, b;
      a.reserve(65536 * partners.size());
      for (uint16_t p : partners) {
        for (uint32_t v = 0; v < 65536; v++) {
          a.push_back((uint16_t)v);
          b.push_back(p);
        }
      }
      checkPairs<uint16_t>(type, a, b, s);
      checkPairs<uint16_t>(type, b, a, s);  // the special on the other side
    }
  }
}

template <typename S>
void checkUnaligned(ncclDataType_t type, std::mt19937& rng) {
  const int flags = MEND_RED_PREOP | MEND_RED_POSTOP;
  for (size_t n = 0; n <= 70; n++) {
    for (size_t off = 0; off < 4; off++) {
      size_t bytes = n * sizeof(S) + 8;
      std::vector<uint8_t> a(bytes), b(bytes), base(bytes), vec(bytes);
      for (auto& x : a) x = (uint8_t)rng();
      for (auto& x : b) x = (uint8_t)rng();
      for (int k = 0; k < (int)(sizeof kKinds / sizeof kKinds[0]) * mendReduceVecAvailable(); k++) {
        int kind = kKinds[k % (sizeof kKinds / sizeof kKinds[0])], set = 1 + k / (int)(sizeof kKinds / sizeof kKinds[0]);
        mendRedOp op = makeOp(type, kind, sizeof(S) == 2 ? 0x3c00 : 0x38, 4);
        memset(base.data(), 0xa5, bytes);
        memset(vec.data(), 0xa5, bytes);
        mendReduceWith(0, &op, base.data() + off, a.data() + off, b.data() + off, n, flags);
        mendReduceWith(set, &op, vec.data() + off, a.data() + off, b.data() + off, n, flags);
        // Nothing written outside the n elements; inside, both equal the reference.
        for (size_t i = 0; i < bytes; i++) {
          if (i < off || i >= off + n * sizeof(S)) {
            ASSERT_TRUE(base[i] == 0xa5 && vec[i] == 0xa5) << mendTypeName(type) << " wrote outside, n=" << n;
          }
        }
        for (size_t i = 0; i < n; i++) {
          S x, y, p, q;
          memcpy(&x, a.data() + off + i * sizeof(S), sizeof(S));
          memcpy(&y, b.data() + off + i * sizeof(S), sizeof(S));
          memcpy(&p, base.data() + off + i * sizeof(S), sizeof(S));
          memcpy(&q, vec.data() + off + i * sizeof(S), sizeof(S));
          S want = reference<S>(type, op, x, y);
          ASSERT_TRUE(same(type, op, x, y, want, p) && same(type, op, x, y, want, q))
              << mendTypeName(type) << " " << mendRedKindName(kind) << " set " << set << " n=" << n << " offset " << off
              << " element " << i;
        }
      }
    }
  }
}

TEST(ReduceVec, UnalignedPointersAndEveryTail) {
  skipWithoutVec();
  std::mt19937 rng(11);
  checkUnaligned<uint16_t>(ncclFloat16, rng);
  checkUnaligned<uint16_t>(ncclBfloat16, rng);
  checkUnaligned<uint8_t>(ncclFloat8e4m3, rng);
  checkUnaligned<uint8_t>(ncclFloat8e5m2, rng);
}

TEST(ReduceVec, InPlaceMatchesOutOfPlace) {
  skipWithoutVec();
  std::mt19937 rng(3);
  for (ncclDataType_t type : {ncclFloat16, ncclBfloat16, ncclFloat8e4m3}) {
    size_t n = 1000, bytes = n * mendTypeSize(type);
    std::vector<uint8_t> a(bytes), b(bytes), out(bytes);
    for (auto& x : a) x = (uint8_t)rng();
    for (auto& x : b) x = (uint8_t)rng();
    for (int kind : kKinds) {
      mendRedOp op = makeOp(type, kind, mendTypeSize(type) == 2 ? 0x3c00 : 0x38, 2);
      std::vector<uint8_t> inA = a, inB = b;
      const int set = mendReduceVecAvailable();  // the best set
      mendReduceWith(set, &op, out.data(), a.data(), b.data(), n, MEND_RED_PREOP);
      mendReduceWith(set, &op, inA.data(), inA.data(), b.data(), n, MEND_RED_PREOP);  // dst == local
      mendReduceWith(set, &op, inB.data(), a.data(), inB.data(), n, MEND_RED_PREOP);  // dst == peer
      EXPECT_EQ(out, inA) << mendTypeName(type) << " " << mendRedKindName(kind);
      EXPECT_EQ(out, inB) << mendTypeName(type) << " " << mendRedKindName(kind);
    }
  }
}

// Collectives use the best vector loops the CPU has when MEND_REDUCE_VEC is left at 1.
TEST(ReduceVec, ChosenFromTheCpuByDefault) {
  if (getenv("MEND_REDUCE_VEC")) GTEST_SKIP() << "MEND_REDUCE_VEC is set";
  EXPECT_EQ(mendReduceVecAvailable(), mendReduceVec());
}
