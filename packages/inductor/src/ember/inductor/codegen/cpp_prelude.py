"""The C++ text every kernel file starts with: includes and small inline helpers."""

from __future__ import annotations

# MVEC_FUNCS: the math functions glibc's libmvec has vector variants of (float and
# double), declared below; the ``op_table.OPS`` rows whose C++ is ``ember_<name>{f}(x)``.
from ..op_table import MVEC_FUNCS

#: Functions the helpers define inline (vectorized in place by gcc) instead of calling libm.
INLINE_MATH = frozenset({"ember_expf"})

_HELPERS = r"""
#include <cmath>
#include <cstdint>
#include <limits>

// Indirect indices (gather, index, embedding) are checked: an index outside
// [-size, size) sets this flag and reads element 0 instead; the Python side
// raises IndexError after the kernel returns (ember.inductor.KernelIndexError).
static int ember_index_error = 0;
extern "C" int ember_take_index_error() {
  int e = __atomic_exchange_n(&ember_index_error, 0, __ATOMIC_RELAXED);
  return e;
}
static inline int64_t ember_check_index(int64_t v, int64_t size) {
  int64_t w = v < 0 ? v + size : v;
  if (w < 0 || w >= size) {
    __atomic_store_n(&ember_index_error, 1, __ATOMIC_RELAXED);
    return 0;
  }
  return w;
}
template <typename T> static inline T ember_maximum(T a, T b) {
  return (a < b || b != b) ? b : a;
}
template <typename T> static inline T ember_minimum(T a, T b) {
  return (b < a || b != b) ? b : a;
}
template <typename T> static inline T ember_floordiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { return std::floor(a / b); }
  else { T q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
}
template <typename T> static inline T ember_mod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  } else { T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
}
template <typename T> static inline T ember_fmod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { return std::fmod(a, b); } else { return a % b; }
}
template <typename T> static inline T ember_sign(T x) {
  if constexpr (std::is_same_v<T, bool>) { return x; }
  else { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x); }
}
template <typename T> static inline bool ember_isnan(T x) {
  if constexpr (std::is_floating_point_v<T>) { return x != x; } else { return false; }
}
// exp for float, inline so gcc vectorizes it in place (no libmvec call per 8 lanes).
// exp(x) = 2^k * e^r, k = rint(x / ln 2), |r| <= ln2 / 2; e^r by Cephes' minimax
// polynomial (at most 1 ulp from the correctly rounded result for normal results);
// 2^k applied as two factors so overflow gives inf. Results below FLT_MIN
// (x < -87.34) are flushed to 0: computing a denormal costs a ~100-cycle microcode
// assist per lane, and a causal softmax has exp(-inf) in half its lanes. NaN propagates.
static inline float ember_expf(float x) {
  // lanes that will be flushed compute exp(-87) instead: no denormal anywhere
  float xc = x > 89.0f ? 89.0f : (x < -87.33654f ? -87.0f : x);
  float kf = __builtin_rintf(xc * 1.44269504088896341f);
  float r = xc - kf * 0.693359375f;
  r = r - kf * -2.12194440e-4f;
  float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * z + r + 1.0f;
  int32_t k = static_cast<int32_t>(kf);
  int32_t k1 = k >> 1;
  int32_t k2 = k - k1;
  float s1 = __builtin_bit_cast(float, (k1 + 127) << 23);
  float s2 = __builtin_bit_cast(float, (k2 + 127) << 23);
  float y = p * s1 * s2;
  return x < -87.33654f ? 0.0f : y;
}
template <typename T> static inline bool ember_isinf(T x) {
  if constexpr (std::is_floating_point_v<T>) { return std::isinf(x); } else { return false; }
}
"""


def prelude(use_mvec: bool) -> str:
    """Helpers plus, when libmvec is available, simd declarations of the vector math."""
    lines = [_HELPERS]
    for fn in MVEC_FUNCS:
        if use_mvec:
            for ctype, suffix in (("float", "f"), ("double", "")):
                if f"ember_{fn}{suffix}" in INLINE_MATH:
                    continue
                lines.append("#pragma omp declare simd notinbranch")
                lines.append(
                    f'extern "C" __attribute__((const, nothrow)) {ctype} ember_{fn}{suffix}({ctype}) '
                    f'__asm__("{fn}{suffix}");'
                )
        else:
            if f"ember_{fn}f" not in INLINE_MATH:
                lines.append(f"static inline float ember_{fn}f(float x) {{ return std::{fn}(x); }}")
            lines.append(f"static inline double ember_{fn}(double x) {{ return std::{fn}(x); }}")
    return "\n".join(lines) + "\n"
