"""The one table to add an elementwise op to: its name in loop bodies, each backend's syntax,
and the ATen ops lowered straight to it.

A row is everything ember.inductor knows about ``ops.<name>``:

- ``arity``, ``bool_result`` (the value is a ``bool`` whatever the operands are) and
  ``heavy`` (a libm-style evaluation, not one instruction: what makes recomputing a value
  costly, ``ops_handler.DepsOps``);
- ``cpp`` and ``triton``: the expression each backend emits, ``{0}``/``{1}`` the operands,
  ``{f}`` C++'s ``f`` suffix of a float32 math call, ``{zero}``/``{one}`` literals of the
  operand's dtype; ``None`` where the backend's handler has a method ``op_<name>`` instead
  (a value that depends on the dtype: ``bitwise_not`` of a bool, integer ``floordiv``);
- ``lower``: how ``lowering/pointwise.py`` registers it for the ATen ops ``aten`` (packet
  names) on the ``overloads`` listed: with torch's type promotion ``"default"``,
  ``"int_to_float"``, ``"complex_to_float"``; ``"bool"`` (computed in the operands' common
  dtype, a bool result); ``"rounding"`` (the identity on integers); ``None``: a lowering
  of its own (``add`` with ``alpha``, ``div`` with a rounding mode, ``pow``'s exponents).

A new op is one row; :mod:`ember.inductor.ops_handler` makes ``ops.<name>`` of it, the C++
and Triton handlers read their column, and the lowering registers the ATen ops.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Op:
    name: str
    arity: int
    cpp: str | None
    triton: str | None
    lower: str | None = None
    aten: tuple[str, ...] = ()
    overloads: tuple[str, ...] = ("default",)
    bool_result: bool = False
    heavy: bool = False


#: C++ of a math function with a libmvec vector variant (``cpp_prelude.py`` declares it)
MVEC = "ember_{name}{{f}}({{0}})"


def _math(name: str, triton: str, *, heavy: bool = True, cpp: str | None = MVEC) -> Op:
    """A float math function (integer operands are computed in the default float dtype)."""
    return Op(name, 1, cpp and cpp.format(name=name), triton, "int_to_float", (name,), heavy=heavy)


def _libdevice(name: str) -> str:
    return f"libdevice.{name}({{0}})"


_TENSOR_SCALAR = ("Tensor", "Scalar")


def _cmp(name: str, sign: str) -> Op:
    return Op(name, 2, f"{{0}} {sign} {{1}}", f"({{0}} {sign} {{1}})", "bool", (name,), _TENSOR_SCALAR,
              bool_result=True)


def _logical(name: str, c_op: str, t_op: str) -> Op:
    return Op(name, 2, f"({{0}} != 0) {c_op} ({{1}} != 0)", f"(({{0}} != 0) {t_op} ({{1}} != 0))", "bool",
              (name,), bool_result=True)


def _bitwise(name: str, sign: str) -> Op:
    return Op(name, 2, f"{{0}} {sign} {{1}}", f"({{0}} {sign} {{1}})", "default", (name,),
              ("Tensor", "Scalar", "default"))


#: every elementwise op, unary ones first (their order is ``ops_handler.UNARY_OPS``')
OPS: tuple[Op, ...] = (
    _math("exp", "tl.exp({0})"),
    _math("exp2", "tl.exp2({0})"),
    _math("expm1", _libdevice("expm1")),
    _math("log", "tl.log({0})"),
    _math("log2", "tl.log2({0})"),
    _math("log10", _libdevice("log10")),
    _math("log1p", _libdevice("log1p")),
    _math("sqrt", "tl.sqrt({0})", heavy=False, cpp="std::sqrt({{0}})"),
    _math("rsqrt", "tl.rsqrt({0})", heavy=False, cpp="{{one}} / std::sqrt({{0}})"),
    _math("sin", "tl.sin({0})"),
    _math("cos", "tl.cos({0})"),
    _math("tan", _libdevice("tan")),
    _math("asin", _libdevice("asin")),
    _math("acos", _libdevice("acos")),
    _math("atan", _libdevice("atan")),
    _math("sinh", _libdevice("sinh")),
    _math("cosh", _libdevice("cosh")),
    _math("tanh", _libdevice("tanh")),
    _math("asinh", _libdevice("asinh")),
    _math("acosh", _libdevice("acosh")),
    _math("atanh", _libdevice("atanh")),
    _math("erf", "tl.erf({0})"),
    _math("erfc", _libdevice("erfc")),
    _math("sigmoid", "tl.sigmoid({0})", cpp=None),  # C++: two values (CppOps.op_sigmoid)
    Op("reciprocal", 1, "(1 / {0})", "1.0 / {0}", "int_to_float", ("reciprocal",)),
    Op("floor", 1, "std::floor({0})", "tl.floor({0})", "rounding", ("floor",)),
    Op("ceil", 1, "std::ceil({0})", "tl.ceil({0})", "rounding", ("ceil",)),
    Op("trunc", 1, "std::trunc({0})", _libdevice("trunc"), "rounding", ("trunc",)),
    Op("round", 1, "std::nearbyint({0})", _libdevice("nearbyint"), "rounding", ("round",)),
    Op("neg", 1, "-{0}", "-{0}", "default", ("neg",)),
    Op("abs", 1, "std::abs({0})", None, "complex_to_float", ("abs",)),
    Op("sign", 1, "ember_sign({0})", None, "default", ("sign",)),
    Op("relu", 1, "{0} < 0 ? {zero} : {0}", "tl.where({0} < 0, {zero}, {0})", "default", ("relu",)),
    Op("logical_not", 1, "!{0}", "({0} == 0)", "bool", ("logical_not",), bool_result=True),
    Op("bitwise_not", 1, None, None, "default", ("bitwise_not",)),
    Op("isnan", 1, "ember_isnan({0})", "({0} != {0})", "bool", ("isnan",), bool_result=True),
    Op("isinf", 1, "ember_isinf({0})", None, "bool", ("isinf",), bool_result=True),
    Op("add", 2, "{0} + {1}", "({0} + {1})"),
    Op("sub", 2, "{0} - {1}", "({0} - {1})"),
    Op("mul", 2, "{0} * {1}", "({0} * {1})", "default", ("mul",), ("Tensor", "Scalar", "default")),
    Op("truediv", 2, "{0} / {1}", "({0} / {1})"),
    Op("floordiv", 2, "ember_floordiv({0}, {1})", None, "default", ("floor_divide",), ("default", "Scalar")),
    Op("mod", 2, "ember_mod({0}, {1})", None, "default", ("remainder",), _TENSOR_SCALAR),
    Op("fmod", 2, "ember_fmod({0}, {1})", None, "default", ("fmod",), _TENSOR_SCALAR),
    Op("pow", 2, "std::pow({0}, {1})", None, heavy=True),
    Op("maximum", 2, "ember_maximum({0}, {1})", "tl.where(({0} < {1}) | ({1} != {1}), {1}, {0})", "default",
       ("maximum",), ("Tensor", "Scalar", "default")),
    Op("minimum", 2, "ember_minimum({0}, {1})", "tl.where(({0} > {1}) | ({1} != {1}), {1}, {0})", "default",
       ("minimum",), ("Tensor", "Scalar", "default")),
    Op("atan2", 2, "std::atan2({0}, {1})", "libdevice.atan2({0}, {1})", "int_to_float", ("atan2",), heavy=True),
    Op("hypot", 2, "std::hypot({0}, {1})", "libdevice.hypot({0}, {1})", "int_to_float", ("hypot",)),
    _cmp("eq", "=="),
    _cmp("ne", "!="),
    _cmp("lt", "<"),
    _cmp("le", "<="),
    _cmp("gt", ">"),
    _cmp("ge", ">="),
    _logical("logical_and", "&&", "&"),
    _logical("logical_or", "||", "|"),
    _logical("logical_xor", "!=", "^"),
    _bitwise("bitwise_and", "&"),
    _bitwise("bitwise_or", "|"),
    _bitwise("bitwise_xor", "^"),
)

#: name -> row
BY_NAME: dict[str, Op] = {op.name: op for op in OPS}

#: the math functions C++ kernels call through libmvec (``cpp_prelude.py`` declares them)
MVEC_FUNCS: tuple[str, ...] = tuple(sorted(op.name for op in OPS if op.cpp == MVEC.format(name=op.name)))

__all__ = ["BY_NAME", "MVEC_FUNCS", "OPS", "Op"]
