import pytest
import sympy

from ember.ir import FormatError, parse_sym_expr, size_symbol, sym_text

s0, s1 = size_symbol("s0"), size_symbol("s1")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Eq(Mod(s0*s1, 8), 0)", sympy.Eq(sympy.Mod(s0 * s1, 8), 0)),
        ("2*s0", 2 * s0),
        ("s0 - 1", s0 - 1),
        ("((s0 - 1)//2) + 1", sympy.floor((s0 - 1) / 2) + 1),
        ("s0/2", s0 / 2),
        ("-s0**2", -(s0**2)),
        ("2**3**2", sympy.Integer(512)),
        ("s0 < 5", sympy.Lt(s0, 5)),
        ("(s0 > 1) & Ne(s1, 2)", sympy.And(sympy.Gt(s0, 1), sympy.Ne(s1, 2))),
        ("ModularIndexing(s0, 2, 4)", sympy.Mod(sympy.floor(s0 / 2), 4)),
        ("FloorDiv(s0, 3)", sympy.floor(s0 / 3)),
        ("Max(s0, s1)", sympy.Max(s0, s1)),
        ("1.5*s0", sympy.Float("1.5") * s0),
    ],
)
def test_parse(text: str, expected: sympy.Basic) -> None:
    got = parse_sym_expr(text)
    assert got == expected
    assert parse_sym_expr(str(got)) == got


def test_size_symbols_are_positive_integers() -> None:
    assert s0.is_integer and s0.is_positive
    assert parse_sym_expr("s0").free_symbols == {s0}
    assert size_symbol("u0").is_integer and size_symbol("u0").is_positive is None


def test_sym_text_normalises_torch_spellings() -> None:
    assert sym_text(parse_sym_expr("FloorDiv(s0, 2)")) == "floor(s0/2)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("__import__('os')", "position 11"),
        ("eval(s0)", "function 'eval' is not allowed"),
        ("s0 +", "unexpected end"),
        ("Eq(s0)", "Eq takes 2 argument"),
        ("s0 $ 2", "position 3"),
        ("(s0", "expected '\\)'"),
        ("", "non-empty"),
    ],
)
def test_bad_expressions(text: str, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        parse_sym_expr(text)


def test_sym_text_reads_torch_size_functions() -> None:
    from torch.utils._sympy import functions as tf  # what SymInt expressions are built from

    cases = {
        tf.FloorDiv(s0 * s1, 2): sympy.floor(s0 * s1 / 2),
        tf.CeilDiv(s0, 4): sympy.floor((s0 + 3) / 4),
        tf.ModularIndexing(s0, 2, 4): sympy.Mod(sympy.floor(s0 / 2), 4),
        tf.PowByNatural(s0, 2): s0**2,
        tf.LShift(s0, s1): s0 * 2**s1,
        tf.PythonMod(s0, 3): sympy.Mod(s0, 3),
    }
    for torch_expr, expected in cases.items():
        assert parse_sym_expr(sym_text(torch_expr)) == expected, torch_expr
    with pytest.raises(FormatError, match="function 'RoundToInt' is not allowed"):
        sym_text(tf.RoundToInt(s0 / 3))
