"""The fuzzer's own logic: generation, every check of the oracle against planted bugs,
shrinking, reproducers and replay. Planted backends wrap eager (no compiler runs), so
these tests say nothing about ember; ``integration_tests/test_fuzz_seeds.py`` does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_map

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuzz import cli
from fuzz.backends import Backend, get_backend
from fuzz.compare import compare_values
from fuzz.generate import eager_ok, generate
from fuzz.inputs import InputSpec, build_inputs
from fuzz.oracle import check
from fuzz.program import Program, Stmt
from fuzz.repro import reproducer
from fuzz.runner import classes_table, summary_table
from fuzz.shrink import shrink


def planted(name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Backend:
    return Backend(name, wrap, lambda: None)


def _prog(lines: list[str], outputs: tuple[str, ...], inputs: tuple[InputSpec, ...],
          *, backward: bool = True, single: bool = False) -> Program:
    body = tuple(Stmt((ln,), tuple(ln.split(" = ")[0].split(", ")) if " = " in ln else ())
                 for ln in lines)
    return Program(3, inputs, body, outputs, single=single, backward=backward)


X = InputSpec("x0", (3, 4))
X_GRAD = InputSpec("x0", (3, 4), grad="leaf")
X_OFFSET = InputSpec("x0", (3, 4), layout=("offset",))

EAGER = planted("eager", lambda fn: fn)


def _copies_outputs(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *a: tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, fn(*a))


def _on_copies(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *a: fn(*[t.clone() for t in a])


def _perturbed(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*a: Any) -> Any:
        return tree_map(lambda t: t + 1e-3 if isinstance(t, torch.Tensor)
                        and t.is_floating_point() else t, fn(*a))
    return run


def _in_float64(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*a: Any) -> Any:
        out = fn(*[t.double() for t in a])
        return tree_map(lambda t: t.float() if isinstance(t, torch.Tensor) else t, out)
    return run


def test_generate_is_deterministic_and_runs_eagerly() -> None:
    for seed in range(12):
        p = generate(seed)
        assert p.source() == generate(seed).source()
        assert eager_ok(p)[0]
        assert Program.from_json(json.loads(json.dumps(p.to_json()))).source() == p.source()


def test_input_layouts() -> None:
    specs = [InputSpec("x0", (3, 4), layout=("offset",)), InputSpec("x1", (3, 4), layout=("gapped",)),
             InputSpec("x2", (3, 4), layout=("transposed",)),
             InputSpec("x3", (3, 4), layout=("expanded",)),
             InputSpec("x4", (2, 3, 4, 5), layout=("channels_last",)),
             InputSpec("x5", (3, 0), grad="leaf"), InputSpec("x6", (3, 4), grad="nonleaf")]
    (off, gap, tr, ex, cl, empty, nonleaf), leaves = build_inputs(specs, 0)
    assert off.storage_offset() > 0 and off.is_contiguous()
    assert gap.stride() == (8, 2)
    assert tr.stride() == (1, 3)
    assert 0 in ex.stride()
    assert cl.is_contiguous(memory_format=torch.channels_last) and not cl.is_contiguous()
    assert empty.numel() == 0 and empty.is_leaf and empty.requires_grad
    assert not nonleaf.is_leaf and leaves[1].is_leaf
    up, _ = build_inputs(specs, 0, upcast=True)
    assert up[0].dtype == torch.float64 and torch.equal(up[0].float(), off)
    assert up[1].stride() == gap.stride()


def test_eager_against_itself_is_ok() -> None:
    for seed in range(8):
        assert check(generate(seed), EAGER).status == "ok"


def test_view_returned_as_copy_is_an_alias_error() -> None:
    p = _prog(["v0 = x0.t()"], ("v0",), (X_OFFSET,))
    got = check(p, planted("copies", _copies_outputs))
    assert (got.status, got.kind) == ("wrong", "alias")


def test_view_at_wrong_offset_is_an_alias_layout_error() -> None:
    def shifted(fn: Callable[..., Any]) -> Callable[..., Any]:
        return lambda x: (x.as_strided((4, 3), (1, 4), 0),)

    p = _prog(["v0 = x0.t()"], ("v0",), (X_OFFSET,))
    assert check(p, planted("shifted", shifted)).kind == "alias layout"


def test_lost_input_mutation() -> None:
    p = _prog(["x0.mul_(2)", "v0 = x0 + 1"], ("v0",), (X,))
    got = check(p, planted("no-mutation", _on_copies))
    assert (got.status, got.kind) == ("wrong", "mutation")


def test_wrong_values_and_float64_rejudging() -> None:
    p = _prog(["v0 = (x0 @ x0.t()).exp().sum(0)"], ("v0",), (X,))
    assert check(p, planted("off", _perturbed)).kind == "value"
    # more accurate than eager is not wrong
    assert check(p, planted("float64", _in_float64)).status == "ok"


def test_dtype_shape_stride_and_structure() -> None:
    p = _prog(["v0 = x0.t() * 2"], ("v0",), (X,))
    as_double = planted("double", lambda fn: lambda *a: tuple(t.double() for t in fn(*a)))
    assert check(p, as_double).kind == "dtype"
    dense = planted("dense", lambda fn: lambda *a: tuple(t.contiguous() for t in fn(*a)))
    assert check(p, dense).kind == "stride"
    as_list = planted("list", lambda fn: lambda *a: list(fn(*a)))
    assert check(p, as_list).kind == "structure"


def test_output_aliasing_each_other() -> None:
    p = _prog(["v0 = x0 * 2", "v1 = v0[1:]"], ("v0", "v1"), (X,))
    assert check(p, planted("copies", _copies_outputs)).kind == "output alias"


def test_gradients_and_requires_grad() -> None:
    p = _prog(["v0 = x0.sin()"], ("v0",), (X_GRAD,))
    detached = planted("detached", lambda fn: lambda *a: tuple(t.detach() for t in fn(*a)))
    assert check(p, detached).kind == "requires_grad"

    def doubled_grad(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(x: torch.Tensor) -> Any:
            (v,) = fn(x)
            return ((v * 2 - v.detach()),)
        return run

    assert check(p, planted("grad", doubled_grad)).kind == "grad"


def test_exceptions_both_ways() -> None:
    p = _prog(["v0 = x0 + 1"], ("v0",), (X,))

    def raises(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any) -> Any:
            raise RuntimeError("internal compiler error")
        return run

    got = check(p, planted("raises", raises))
    assert (got.status, got.kind) == ("error", "RuntimeError")
    assert got.signature == "error:RuntimeError"
    # eager raising on the second call (other values) must be matched
    q = _prog(["v0 = x0[x0.sum() > 0]"], ("v0",), (X,))
    assert check(q, EAGER).status == "ok"


def test_compare_values_unstable_outputs_are_not_judged() -> None:
    e = torch.tensor([1.0, 2.0])
    assert compare_values(e, e + 1e-7).ok
    bad = compare_values(e, e + 1.0)
    assert not bad.ok and bad.needs_reference
    assert not compare_values(e, e + 1.0, e.double()).ok
    # eager's own float32 value is far from float64: no verdict against the compiler
    assert compare_values(e, e + 1.0, e.double() + 5).ok


def test_shrink_keeps_the_failure_and_removes_the_rest() -> None:
    body = ["v0 = x0 * 2", "v1 = v0.sum(0)", "v2 = x0.t()", "v3 = torch.sin(v1)", "v4 = v3 + 1"]
    p = _prog(body, ("v4", "v2"), (InputSpec("x0", (3, 4), layout=("offset", "transposed"),
                                             grad="leaf"),))
    backend = planted("copies", _copies_outputs)
    outcome = check(p, backend)
    assert outcome.kind == "alias"
    small = shrink(p, backend, outcome)
    assert check(small, backend).signature == outcome.signature
    assert [s.lines for s in small.body] == [("v2 = x0.t()",)]
    assert small.outputs == ("v2",)
    assert small.inputs[0].grad == "none" and small.inputs[0].layout in ((), ("offset",))


def test_reproducer_runs_standalone(tmp_path: Path) -> None:
    p = _prog(["v0 = x0[1:].t()", "v1 = v0 * 2"], ("v0", "v1"), (X_OFFSET,))
    outcome = check(p, get_backend("ember-eager"))
    path = tmp_path / "repro.py"
    path.write_text(reproducer(p, "ember-eager", outcome))
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "compiled matches eager" in done.stdout


def test_replay_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _prog(["v0 = x0.t()"], ("v0",), (X_OFFSET,))
    saved = tmp_path / "seed3.json"
    saved.write_text(json.dumps({"backend": "ember-eager", "program": p.to_json()}))
    assert cli.main(["replay", str(saved)]) == 0
    assert "ember-eager: ok" in capsys.readouterr().out
    assert cli.main(["show", "5"]) == 0
    assert "def fn(" in capsys.readouterr().out


def test_tables() -> None:
    records = [
        {"backend": "b", "status": "ok", "seed": 1, "signature": "ok", "detail": ""},
        {"backend": "b", "status": "wrong", "seed": 2, "signature": "wrong:alias", "detail": "d"},
        {"backend": "b", "status": "error", "seed": 3, "signature": "error:crash", "detail": "x"},
    ]
    table = summary_table(records)
    assert "| b | 3 | 1 | 1 | 1 | 33.33% | 0 | 0 |" in table
    assert "| b | wrong:alias | 1 | 2 | d |" in classes_table(records)


def test_unknown_backend_name() -> None:
    with pytest.raises(ValueError, match="unknown backend"):
        get_backend("inductor")


def test_eager_that_depends_on_the_layout_is_no_reference() -> None:
    # median(dim) of an expanded input is wrong in eager on some CPUs (seed 3137: the
    # median of four copies of one value comes out as another row's value; other CPUs get
    # it right, so the test cannot rely on it). A backend reading the input as a contiguous
    # copy gets eager's result for those values laid out contiguously: the program is
    # invalid as a test, not a wrong result. A program that reads the stride is eager
    # depending on the layout on every machine.
    spec = InputSpec("x0", (4, 2, 4), layout=("expanded",), grad="leaf")
    p = _prog(["v0 = x0 * (1 + x0.stride(0))"], ("v0",), (spec,))
    contiguous = planted("contiguous", lambda fn: lambda x: fn(x.contiguous()))
    outcome = check(p, contiguous)
    assert (outcome.status, outcome.kind) == ("invalid", "eager depends on layout")

    # a result eager gives under neither layout is still wrong
    def doubled(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(x: torch.Tensor) -> Any:
            (v,) = fn(x)
            return ((v * 2 - v.detach()),)
        return run

    p_sum = _prog(["v0 = x0.sum(0)"], ("v0",), (spec,))
    assert check(p_sum, planted("grad", doubled)).kind == "grad"
    assert check(p_sum, planted("perturbed", _perturbed)).kind == "value"


def _wrong_after_first_shape(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A compiler right for the sizes it first saw and off for any other (a bad recompile
    or a symbolic-size bug)."""
    first: list[Any] = []

    def run(*a: Any) -> Any:
        shapes = [tuple(t.shape) for t in a]
        if not first:
            first.append(shapes)
        out = fn(*a)
        return out if shapes == first[0] else _perturbed(lambda: out)()
    return run


def test_resize_checks_grown_inputs() -> None:
    y = InputSpec("x1", (4,))
    p = _prog(["v0 = x0 * x1"], ("v0",), (X, y), backward=False)
    planted_bug = planted("size-bug", _wrong_after_first_shape)
    assert check(p, planted_bug).status == "ok"  # the same sizes on both calls
    got = check(p, planted_bug, resize=True)
    assert (got.status, got.kind) == ("wrong", "value") and "sizes +2" in got.detail
    # every size above 1 grows the same, so inputs that broadcast still do
    assert check(p, EAGER, resize=True).status == "ok"
    from fuzz.inputs import resized

    assert [s.shape for s in resized([X, y, InputSpec("x2", (1, 0, 3))], 2)] == [
        (5, 6), (6,), (1, 0, 5)]


def test_resize_reproducer_replays_every_call(tmp_path: Path) -> None:
    from fuzz.oracle import Outcome

    p = _prog(["v0 = x0 * 2"], ("v0",), (X,), backward=False)
    text = reproducer(p, "ember-eager", Outcome("wrong", "value", "call 3"), resize=True)
    assert "CALLS = [(make_inputs_0, SEED + 0), (make_inputs_0, SEED + 7919), " \
        "(make_inputs_1, SEED + 15838), (make_inputs_2, SEED + 23757)]" in text
    path = tmp_path / "repro.py"
    path.write_text(text)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and "compiled matches eager" in done.stdout, done.stdout + done.stderr


def test_recompiles_counts_late_compiles_with_reasons() -> None:
    """``recompiles``: a program that specializes a size (a loop over it) compiles again
    on every grown call; one that does not, once, when sizes first grow."""
    from fuzz.recompiles import stability, stability_table

    steady = _prog(["v0 = x0 * 2"], ("v0",), (X,), backward=False)
    looped = _prog(["v0 = sum(x0[i] for i in range(x0.shape[0]))"], ("v0",), (X,),
                   backward=False)
    for backend in ("ember-eager", "torch-eager"):
        s = stability(steady, backend)
        assert not s.skipped and s.compiles[:3] == [1, 0, 1] and s.late == 0, s
    s = stability(looped, "ember-eager")
    assert s.late == 2 and len(s.reasons) == 2 and "size()[0] was" in s.reasons[0], s
    table = stability_table({"ember-eager": [s]})
    assert "| ember-eager | 1 | 1 (3) | 2 | 0 |" in table and "size()[#] was #" in table


# -- training mode (train_gen.py, train_oracle.py, train_repro.py) ------------------------


def _train_prog(*forward: str, init: tuple[str, ...] = (), head: str = "hidden") -> Any:
    from fuzz.train_gen import Block, TrainProgram

    embed = Block("embed", ("self.emb1 = nn.Embedding(11, 8)",), ("h = self.emb1(x)",))
    body = Block("planted", init, forward)
    return TrainProgram(5, 2, (4, 7, 11), 8, 11, "ids", head, (embed, body))


def _model_backend(name: str, wrap: Callable[[torch.nn.Module, int], Any]) -> Backend:
    """A planted 'compiler' of modules: ``wrap(model, call index)`` runs one call."""

    def compile_fn(model: Any) -> Any:
        calls = [0]

        def run(*a: Any) -> Any:
            calls[0] += 1
            return wrap(model, calls[0])(*a)
        return run

    return Backend(name, compile_fn, lambda: None)


def test_training_programs_are_deterministic_and_train_eagerly() -> None:
    from fuzz.train_gen import eager_trains, generate_train

    kinds: set[str] = set()
    for seed in range(12):
        p = generate_train(seed)
        assert p == generate_train(seed)
        assert eager_trains(p)
        assert p.lengths[0] < p.lengths[1] < p.lengths[2]
        kinds |= {b.kind for b in p.blocks}
    # the constructs the mode exists for appear within a dozen seeds
    assert {"embed", "pos_slice"} <= kinds and any(k.startswith("attention_") for k in kinds)


def test_training_oracle_eager_is_ok_and_finds_gradient_bugs() -> None:
    from fuzz.train_oracle import check_train

    p = _train_prog("h = h + self.pos1[: h.shape[1]]", init=("self.pos1 = nn.Parameter("
                                                            "torch.randn(20, 8))",), head="lm")
    assert check_train(p, _model_backend("eager", lambda m, k: m))[0].status == "ok"

    def wrong_grad_at_third_length(model: Any, call: int) -> Any:
        def run(x: torch.Tensor, y: torch.Tensor) -> Any:
            loss, *aux = model(x, y)
            if call == 3:  # the same loss, a gradient scaled by 2 through pos1
                extra = (model.pos1[: x.shape[1]] * 0).sum() + loss
                loss = extra + (loss - loss.detach())
            return (loss, *aux)
        return run

    got, _ = check_train(p, _model_backend("bad-grad", wrong_grad_at_third_length))
    assert (got.status, got.kind) == ("wrong", "grad") and "length 11 (call 3)" in got.detail

    def backward_raises(model: Any, call: int) -> Any:
        class Boom(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
                return t.clone()

            @staticmethod
            def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
                raise RuntimeError("planted backward failure")

        def run(x: torch.Tensor, y: torch.Tensor) -> Any:
            loss, *aux = model(x, y)
            return (Boom.apply(loss) if call == 2 else loss, *aux)
        return run

    got, _ = check_train(p, _model_backend("bad-backward", backward_raises))
    assert (got.status, got.kind) == ("error", "backward RuntimeError")
    assert "call 2" in got.detail


def test_training_oracle_counts_ember_fallbacks() -> None:
    import logging

    from fuzz.train_oracle import check_train

    def logs_a_fallback(model: Any, call: int) -> Any:
        logging.getLogger("ember.aotgrad").warning("planted: ran a graph eagerly")
        return model

    p = _train_prog("h = h.flip(1)")
    got, fallbacks = check_train(p, _model_backend("fallback", logs_a_fallback))
    assert got.status == "ok" and fallbacks == ["planted: ran a graph eagerly"] * 3


def test_training_program_under_ember_aot_eager_and_its_reproducer(tmp_path: Path) -> None:
    from fuzz.oracle import Outcome
    from fuzz.train_gen import generate_train
    from fuzz.train_oracle import check_train
    from fuzz.train_repro import reproducer_train

    p = generate_train(4)
    backend = get_backend("ember-aot_eager")
    try:
        got, fallbacks = check_train(p, backend)
    finally:
        backend.reset()
    assert got.status == "ok" and not fallbacks, (got, fallbacks)
    path = tmp_path / "repro.py"
    path.write_text(reproducer_train(p, "ember-aot_eager", Outcome("wrong", "grad", "-")))
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "no difference" in done.stdout, done.stdout + done.stderr
    assert cli.main(["show", "4", "--train"]) == 0


def test_shrink_train_keeps_the_failing_block() -> None:
    from fuzz.train_gen import Block
    from fuzz.train_oracle import check_train
    from fuzz.train_repro import shrink_train

    p = _train_prog("h = torch.tanh(h)")
    p = type(p)(p.seed, p.batch, p.lengths, p.dim, p.vocab, p.inputs, p.head,
                (*p.blocks, Block("flip", (), ("h = h.flip(1)",)), Block("act", (), ("h = F.gelu(h)",))))

    def breaks_flip(model: Any, call: int) -> Any:
        import inspect

        flips = "flip(1)" in inspect.getsource(type(model).forward)

        def run(x: torch.Tensor, y: torch.Tensor) -> Any:
            out = model(x, y)
            return (out[0] + 1e-2, *out[1:]) if flips else out
        return run

    backend = _model_backend("flip-bug", breaks_flip)
    outcome, _ = check_train(p, backend)
    assert outcome.status == "wrong"
    small = shrink_train(p, backend, outcome)
    assert [b.kind for b in small.blocks] == ["embed", "flip"]
