"""Per-group optimizer guards (ADR 0058): a compiled step checks each group's own guards
and one native loop over its parameters, gradients and state, not one guard per tensor.
Every change that makes the compiled step wrong still recompiles (or is read as an input),
the loop's verdict is the per-tensor check's on every change, and the results are eager's."""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

import ember.dynamo
from ember.dynamo.optimizer import CompiledOptimizerStep
from ember.dynamo.optimizer_guards import StepGuards, step_locals
from ember.dynamo.testing import CompileCounterWithBackend

sys.path.insert(0, os.path.dirname(__file__))
from native_harness import native_env

pytestmark = pytest.mark.skipif(
    shutil.which(os.environ.get("CC", "gcc")) is None or shutil.which(os.environ.get("CXX", "g++")) is None,
    reason="no C/C++ compiler for native guards",
)


@pytest.fixture(autouse=True)
def _native(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    native_env(monkeypatch, tmp_path_factory.getbasetemp() / "native-guards-optimizer")


def params(n: int, seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(3, 2, generator=gen)) for _ in range(n)]


def set_grads(ps: list[torch.nn.Parameter], seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for p in ps:
        p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)


def direct_reads() -> bool:
    """Whether the tensor helper reads tensors directly in this process: it stops for good
    once ``torch.Tensor`` or ``Parameter`` changed (their version tags; ``test_native.py``
    adds and removes a property), and the loop then leaves every verdict to the per-tensor
    check. The results are checked either way; the loop's own verdicts only with this."""
    from ember.dynamo.optimizer_guards import layout_spec
    from ember.guards import native

    p = torch.nn.Parameter(torch.randn(2))
    p.grad = torch.randn(2)
    opt = torch.optim.SGD([p], lr=0.1)
    helper = native.tensor_helper(wait=True)
    assert helper is not None, native.tensor_helper_error()
    check = native.layout_check(layout_spec(opt, [[]], helper[0]), type(opt.state))
    assert check is not None
    return check(opt.param_groups, opt.state) is not None


def decided(step: Any, opt: torch.optim.Optimizer) -> bool:
    """The loop decided (and gathered) the step's layout, where it reads directly."""
    return only_guards(step).match(opt)[1] is not None or not direct_reads()


def guards_of(step: Any) -> list[StepGuards]:
    assert isinstance(step, CompiledOptimizerStep)
    return [check for check, _, _ in step._guarded]


def only_guards(step: Any) -> StepGuards:
    checks = guards_of(step)
    assert checks and checks[-1].layout is not None, checks[-1].native_error if checks else "no layout"
    return checks[-1]


def agree(step: Any, opt: torch.optim.Optimizer) -> None:
    """Each layout's loop says what its per-tensor check says (or leaves it undecided)."""
    for check in guards_of(step):
        if check.layout is None:
            continue
        full = bool(check.full.py_fn(step_locals(opt), {}))
        groups_ok = bool(check.groups.py_fn({"groups": opt.param_groups}, {}))
        if not groups_ok:
            assert not full
            continue
        found = check.layout(opt.param_groups, opt.state)
        if found is not None:
            assert (found is not False) is full, (found, full, check.explain(opt))


def test_guard_parts_do_not_grow_with_the_number_of_tensors() -> None:
    sizes = {}
    for n in (4, 64):
        ps = params(n)
        set_grads(ps, 1)
        opt = torch.optim.Adam(ps, lr=1e-3)
        opt.step()
        step = ember.dynamo.compile(opt.step, backend="eager")
        step()
        step()
        check = only_guards(step)
        sizes[n] = (len(check.groups.parts), check.parts, len(check.full.parts))
    assert sizes[4][:2] == sizes[64][:2]  # per group: the groups' guards and one loop
    assert sizes[64][2] > sizes[4][2]  # the per-tensor check (explanations) does grow
    assert sizes[64][1] < 20


def test_the_loop_gathers_the_same_inputs_as_the_plan() -> None:
    if not direct_reads():
        pytest.skip("torch.Tensor changed in this process: the loop leaves every verdict to the per-tensor check")
    ps = params(5)
    set_grads(ps, 1)
    ps[2].grad = None
    opt = torch.optim.Adam([{"params": ps[:3]}, {"params": ps[3:], "lr": 0.1}], lr=1e-3)
    opt.step()
    step = ember.dynamo.compile(opt.step, backend="eager")
    step()
    check, plan, _ = step._guarded[-1]
    ok, inputs = check.match(opt)
    assert ok and inputs is not None
    want = plan.inputs(opt)[: len(inputs)]
    assert len(inputs) == len(want) == len(plan.params) * 5
    assert all(a is b for a, b in zip(inputs, want, strict=True))


Change = Callable[[torch.optim.Optimizer, list[torch.nn.Parameter]], None]


def _replace_param(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    new = torch.nn.Parameter(ps[1].detach().clone())
    new.grad = ps[1].grad.clone()  # type: ignore[union-attr]
    opt.state[new] = copy.deepcopy(opt.state[ps[1]])
    opt.param_groups[0]["params"][1] = new
    ps[1] = new


def _add_param(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    new = torch.nn.Parameter(torch.randn(3, 2))
    new.grad = torch.randn(3, 2)
    opt.param_groups[0]["params"].append(new)
    ps.append(new)


def _remove_param(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    gone = opt.param_groups[0]["params"].pop(0)
    ps[:] = [p for p in ps if p is not gone]


def _add_group(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    new = torch.nn.Parameter(torch.randn(4))
    new.grad = torch.randn(4)
    opt.add_param_group({"params": [new], "lr": 0.05})
    ps.append(new)


def _replace_state_same_layout(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    opt.state[ps[0]]["exp_avg"] = torch.full((3, 2), 0.25)  # same metadata: an input, read per step


def _replace_state_other_strides(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    opt.state[ps[0]]["exp_avg"] = opt.state[ps[0]]["exp_avg"].t().contiguous().t()


def _replace_state_dict(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    opt.state[ps[2]] = {k: v.clone() for k, v in opt.state[ps[2]].items()}


def _drop_state(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    del opt.state[ps[3]]


def _load_state_dict(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    saved = copy.deepcopy(opt.state_dict())
    for state in saved["state"].values():
        state["exp_avg_sq"] = state["exp_avg_sq"] * 2
    opt.load_state_dict(saved)


def _grad_none(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    ps[1].grad = None


def _grad_strided(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    ps[0].grad = torch.randn(2, 3).t()  # same shape, other strides


def _data_other_dtype(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    for p in ps:  # module.double() keeps the parameter objects (``.data =``)
        p.data = p.data.double()
        p.grad = p.grad.double()  # type: ignore[union-attr]
    for state in opt.state.values():
        for k in ("exp_avg", "exp_avg_sq"):
            state[k] = state[k].double()


def _data_other_shape(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    ps[0].data = torch.randn(6)
    ps[0].grad = torch.randn(6)
    opt.state[ps[0]]["exp_avg"] = torch.zeros(6)
    opt.state[ps[0]]["exp_avg_sq"] = torch.zeros(6)


def _requires_grad_off(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    ps[3].requires_grad_(False)


def _lr_value(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    opt.param_groups[0]["lr"] = 0.3  # an input: no recompile


def _lr_tensor(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    opt.param_groups[0]["lr"] = torch.tensor(0.02)


def _betas(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    opt.param_groups[0]["betas"] = (0.5, 0.9)


def _step_count(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    opt.state[ps[1]]["step"] = torch.tensor(100.0)  # a value: read per step


def _params_list_replaced(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
    opt.param_groups[0]["params"] = list(reversed(opt.param_groups[0]["params"]))


# name: (change, recompiles); a change that makes the layout's guards fail but finds a
# compiled step again (the state a step re-creates, the same structure) does not recompile
CHANGES: dict[str, tuple[Change, bool]] = {
    "a parameter replaced": (_replace_param, True),
    "a parameter added": (_add_param, True),
    "a parameter removed": (_remove_param, True),
    "a group added": (_add_group, True),
    "the params list reordered": (_params_list_replaced, True),
    "a state tensor replaced, same layout": (_replace_state_same_layout, False),
    "a state tensor replaced, other strides": (_replace_state_other_strides, True),
    "a state dict replaced": (_replace_state_dict, False),
    "a state dropped": (_drop_state, False),  # re-created as zeros, as eager's step does
    "load_state_dict": (_load_state_dict, False),
    "a gradient became None": (_grad_none, True),
    "a gradient with other strides": (_grad_strided, True),
    ".data = another dtype": (_data_other_dtype, True),
    ".data = another shape": (_data_other_shape, True),
    "requires_grad turned off": (_requires_grad_off, True),
    "lr changed": (_lr_value, False),
    "lr became a tensor": (_lr_tensor, True),
    "betas changed": (_betas, True),
    "the step count replaced": (_step_count, False),
}


#: the layout's guards fail (a state to re-create, "params" moved last in a group's keys),
#: and the step finds the same compiled graph again
EXPLAINED = ("a state dropped", "load_state_dict")


@pytest.mark.parametrize("name", list(CHANGES))
def test_a_change_between_steps_is_seen_and_the_result_is_eagers(name: str) -> None:
    change, recompiles = CHANGES[name]
    eager_ps, ps = params(4), params(4)
    eager_opt, opt = torch.optim.Adam(eager_ps, lr=0.01), torch.optim.Adam(ps, lr=0.01)
    counter = CompileCounterWithBackend("eager")
    step = ember.dynamo.compile(opt.step, backend=counter)
    for seed in range(3):
        set_grads(eager_ps, seed)
        set_grads(ps, seed)
        eager_opt.step()
        step()
    assert counter.frame_count == 1
    assert decided(step, opt)  # the loop decided, and gathered
    torch.manual_seed(7)
    change(eager_opt, eager_ps)
    torch.manual_seed(7)
    change(opt, ps)
    agree(step, opt)
    assert (step.explain()[0] != "") is (recompiles or name in EXPLAINED), step.explain()
    for seed in range(3, 5):
        gen = torch.Generator().manual_seed(seed)
        for p, q in zip(eager_ps, ps, strict=True):
            if p.grad is not None:  # new values, the layout the change left
                p.grad = torch.randn(p.grad.shape, generator=gen, dtype=p.grad.dtype).as_strided(
                    p.grad.shape, p.grad.stride())
                q.grad = p.grad.clone().as_strided(p.grad.shape, p.grad.stride())
        eager_opt.step()
        step()
        agree(step, opt)
    assert counter.frame_count == (2 if recompiles else 1)
    for p, q in zip(eager_ps, ps, strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    for p, q in zip(eager_ps, ps, strict=True):
        a, b = eager_opt.state.get(p, {}), opt.state.get(q, {})
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)


def test_explanations_are_the_per_tensor_checks() -> None:
    ps = params(3)
    set_grads(ps, 0)
    opt = torch.optim.Adam(ps, lr=0.01)
    step = ember.dynamo.compile(opt.step, backend="eager")
    step()
    step()
    ps[2].grad = None
    assert step.explain() == [
        "L['groups'][0]['params'][2].grad was a NoneType, the graph assumed a tensor (torch.Tensor)"]


class _Mode(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def test_the_loop_leaves_subclasses_and_modes_to_the_per_tensor_check() -> None:
    if not direct_reads():
        pytest.skip("torch.Tensor changed in this process: the loop leaves every verdict to the per-tensor check")
    class Sub(torch.nn.Parameter):
        pass

    ps = params(3)
    set_grads(ps, 0)
    opt = torch.optim.Adam(ps, lr=0.01)
    step = ember.dynamo.compile(opt.step, backend="eager")
    step()
    check = only_guards(step)
    with _Mode():
        assert check.layout(opt.param_groups, opt.state) is None  # type: ignore[misc]
        assert check.match(opt) == (True, None)
    grad = ps[0].grad
    ps[0].grad = torch.randn(3, 2).as_subclass(Sub)  # another class: the class test fails first
    assert check.layout(opt.param_groups, opt.state) is False  # type: ignore[misc]
    assert check.match(opt) == (False, None)
    ps[0].grad = grad
    assert check.match(opt)[0] is True

    sub = params(2)
    sub[0] = Sub(sub[0].detach())  # a Parameter subclass: only the getters can say what it holds
    set_grads(sub, 0)
    opt = torch.optim.Adam(sub, lr=0.01)
    step = ember.dynamo.compile(opt.step, backend="eager")
    step()
    check = only_guards(step)
    assert check.layout(opt.param_groups, opt.state) is None  # type: ignore[misc]
    assert check.match(opt) == (True, None)
    sub[1].grad = None
    assert check.match(opt) == (False, None)


def _set_entry(key: str, value: Any) -> Change:
    def change(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
        opt.state[ps[0]][key] = value

    return change


def _restore(saved: dict[str, Any]) -> Change:
    def change(opt: torch.optim.Optimizer, ps: list[torch.nn.Parameter]) -> None:
        opt.state[ps[0]].update(saved)

    return change


def test_random_changes_give_the_per_tensor_verdict() -> None:
    """Sequences of changes (the ones above, and state entries that are not tensors: ints,
    floats, nan, strings, bools, changed in value and type), the loop's verdict compared
    with the per-tensor check's after each."""
    import random

    extra = {"count": 3, "ratio": 0.5, "note": "x", "flag": True, "nan": float("nan"), "none": None}
    entry_changes = [
        _set_entry("count", 4), _set_entry("count", 3.0), _set_entry("ratio", 0.25), _set_entry("note", "y"),
        _set_entry("flag", False), _set_entry("nan", 1.0), _set_entry("none", 0), _set_entry("ratio", True),
        _restore(extra),
    ]
    for seed in range(int(os.environ.get("EMBER_GUARD_FUZZ", "12"))):
        rng = random.Random(seed)
        ps = params(4, seed)
        set_grads(ps, seed)
        opt = torch.optim.Adam(ps, lr=0.01)
        opt.step()
        opt.state[ps[0]].update(extra)
        step = ember.dynamo.compile(opt.step, backend="eager")
        step()
        assert decided(step, opt)
        changes = [c for c, _ in CHANGES.values()] + entry_changes
        for _ in range(6):
            # a change that does not apply now (a gradient already gone) is skipped, half made
            with contextlib.suppress(AttributeError, KeyError, RuntimeError, IndexError, ValueError, TypeError):
                rng.choice(changes)(opt, ps)
            agree(step, opt)


def test_without_native_guards_the_per_tensor_check_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_NATIVE_GUARDS", "0")
    ps = params(3)
    set_grads(ps, 0)
    opt = torch.optim.Adam(ps, lr=0.01)
    counter = CompileCounterWithBackend("eager")
    step = ember.dynamo.compile(opt.step, backend=counter)
    step()
    check = guards_of(step)[-1]
    assert check.layout is None and check.native_error == "EMBER_NATIVE_GUARDS=0"
    assert check.parts == len(check.full.parts)
    assert check.match(opt) == (True, None)
    ps[0].grad = None
    assert check.match(opt) == (False, None)
    step()
    assert counter.frame_count == 2


def test_the_loop_is_made_once_the_tensor_helper_is_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the helper is being built the per-tensor check decides; the loop is made at
    the first later call that check passes, from the optimizer as it is then."""
    from ember.guards import native

    monkeypatch.setenv("EMBER_NATIVE_GUARDS", "1")
    real = native.tensor_helper
    assert real(wait=True) is not None, native.tensor_helper_error()
    building = [True]
    monkeypatch.setattr(native, "tensor_helper", lambda wait=False: None if building[0] else real(wait))
    ps = params(3)
    set_grads(ps, 0)
    opt = torch.optim.Adam(ps, lr=0.01)
    step = ember.dynamo.compile(opt.step, backend="eager")
    step()
    check = guards_of(step)[-1]
    assert check.layout is None and check.native_error is None
    assert check.match(opt) == (True, None)
    building[0] = False
    ps[0].grad = None
    assert check.match(opt) == (False, None) and check.layout is None  # made only after a pass
    set_grads(ps, 1)
    assert check.match(opt) == (True, None)  # this call passes, and makes the loop
    assert check.layout is not None
    assert check.match(opt)[0] is True
    if direct_reads():
        assert check.match(opt)[1] is not None
    ps[1].grad = None
    assert check.match(opt) == (False, None)
