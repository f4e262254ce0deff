"""The C++ text every kernel file starts with: includes and small inline helpers."""

from __future__ import annotations

#: Math functions glibc's libmvec has vector variants of (float and double).
MVEC_FUNCS = (
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "cos",
    "cosh",
    "erf",
    "erfc",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log10",
    "log1p",
    "log2",
    "sin",
    "sinh",
    "tan",
    "tanh",
)

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
                lines.append("#pragma omp declare simd notinbranch")
                lines.append(
                    f'extern "C" __attribute__((const, nothrow)) {ctype} ember_{fn}{suffix}({ctype}) '
                    f'__asm__("{fn}{suffix}");'
                )
        else:
            lines.append(f"static inline float ember_{fn}f(float x) {{ return std::{fn}(x); }}")
            lines.append(f"static inline double ember_{fn}(double x) {{ return std::{fn}(x); }}")
    return "\n".join(lines) + "\n"
