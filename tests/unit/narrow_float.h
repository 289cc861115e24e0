// Reference decoding of the narrow float formats (half, bf16, fp8 e4m3/e5m2), written from their
// definitions and independent of the library's conversions, for the tests that check those.
#ifndef MEND_TESTS_UNIT_NARROW_FLOAT_H_
#define MEND_TESTS_UNIT_NARROW_FLOAT_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cmath>

namespace mendtest {

// v holds the format's bits (sign, ebits of exponent, mbits of mantissa, bias); e4m3 has no
// infinities and only S.1111.111 is NaN.
inline double decodeNarrow(uint32_t v, int ebits, int mbits, int bias, bool e4m3) {
  int sign = (v >> (ebits + mbits)) & 1;
  uint32_t e = (v >> mbits) & ((1u << ebits) - 1), m = v & ((1u << mbits) - 1);
  uint32_t emax = (1u << ebits) - 1;
  double r;
  if (e4m3 ? (e == emax && m == (1u << mbits) - 1) : (e == emax && m != 0)) r = NAN;
  else if (!e4m3 && e == emax) r = INFINITY;
  else if (e == 0) r = std::ldexp((double)m, 1 - bias - mbits);
  else r = std::ldexp(1.0 + std::ldexp((double)m, -mbits), (int)e - bias);
  return sign ? -r : r;
}

// The element of NCCL datatype `type` (ncclInt8 = 0 .. ncclFloat8e5m2 = 11) at p, as a double.
inline double decodeElem(int type, const void* p) {
  static const struct {
    int bytes, ebits, mbits, bias;
    bool e4m3;
  } f[12] = {{1, 0, 0, 0, false}, {1, 0, 0, 0, false}, {4, 0, 0, 0, false},   {4, 0, 0, 0, false},
             {8, 0, 0, 0, false}, {8, 0, 0, 0, false}, {2, 5, 10, 15, false}, {4, 0, 0, 0, false},
             {8, 0, 0, 0, false}, {2, 8, 7, 127, false}, {1, 4, 3, 7, true},  {1, 5, 2, 15, false}};
  uint64_t u = 0;
  memcpy(&u, p, (size_t)f[type].bytes);
  switch (type) {
  case 0: return (int8_t)u;
  case 1: return (uint8_t)u;
  case 2: return (int32_t)u;
  case 3: return (uint32_t)u;
  case 4: return (double)(int64_t)u;
  case 5: return (double)u;
  case 7: { float x; memcpy(&x, p, 4); return x; }
  case 8: { double x; memcpy(&x, p, 8); return x; }
  default: return decodeNarrow((uint32_t)u, f[type].ebits, f[type].mbits, f[type].bias, f[type].e4m3);
  }
}

}  // namespace mendtest

#endif
