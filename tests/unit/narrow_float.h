// Reference decoding of the narrow float formats (half, bf16, fp8 e4m3/e5m2), written from their
// definitions and independent of the library's conversions, for the tests that check those.
#ifndef MEND_TESTS_UNIT_NARROW_FLOAT_H_
#define MEND_TESTS_UNIT_NARROW_FLOAT_H_

#include <math.h>
#include <stdint.h>

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

}  // namespace mendtest

#endif
