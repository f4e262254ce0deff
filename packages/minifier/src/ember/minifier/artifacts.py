"""Repro and dump directories: the graph as ember.ir, inputs, the failure, ``repro.py``.

Layout (the same for a dump of an unminified graph and for a minified repro)::

    graph/               the graph, written by ember.ir.save
    inputs.safetensors   input tensors kept as data
    inputs.json          one entry per placeholder: data, a seed, or a scalar
    failure.json         failure kind, backend, error signature or tolerance
    repro.py             standalone script (only where a backend is named)

Random inputs are replaced by seeds (``torch.randn`` from a seeded generator)
where the failure still reproduces with them, so most repros carry no data.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
from safetensors.torch import load_file, save_file

from ember.minifier.backends import BackendRef, ref_for
from ember.minifier.errors import ReproFormatError
from ember.minifier.failure import BackendError, Failure, Inaccuracy, Predicate, Signature
from ember.minifier.graphio import load_graph, save_graph
from ember.minifier.repro_script import render
from ember.minifier.state import State

SEED_BASE = 1234


def seeded_value(like: torch.Tensor, seed: int) -> torch.Tensor:
    """``torch.randn`` of ``like``'s shape, dtype and strides from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    flat = torch.randn(tuple(like.shape), generator=gen, dtype=like.dtype)
    out = torch.empty_strided(tuple(like.shape), like.stride(), dtype=like.dtype)
    out.copy_(flat)
    return out.requires_grad_(like.requires_grad)


def _seedable(value: Any) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and value.is_floating_point()
        and value.device.type == "cpu"
        and value.numel() > 0
    )


def replace_with_seeds(
    state: State, still_fails: Callable[[State], bool], max_single: int = 16
) -> tuple[State, set[int]]:
    """``state`` with floating inputs replaced by seeded random tensors where it still fails.

    Tries all inputs at once, then (if that no longer fails) one input at a time.
    Returns the new state and the indices of seeded inputs.
    """
    idx = [i for i, v in enumerate(state.inputs) if _seedable(v)]
    if not idx:
        return state, set()

    def with_seeds(chosen: set[int], base: tuple[Any, ...]) -> State:
        vals = [seeded_value(v, SEED_BASE + i) if i in chosen else v for i, v in enumerate(base)]
        return State(state.gm, tuple(vals))

    cand = with_seeds(set(idx), state.inputs)
    if still_fails(cand):
        return cand, set(idx)
    chosen: set[int] = set()
    cur = state
    for i in idx[:max_single]:
        cand = with_seeds(chosen | {i}, state.inputs)
        if still_fails(cand):
            chosen.add(i)
            cur = cand
    return cur, chosen


def _tensor_entry(value: torch.Tensor, key: str) -> dict[str, Any]:
    return {
        "kind": "tensor",
        "key": key,
        "dtype": str(value.dtype).removeprefix("torch."),
        "shape": list(value.shape),
        "stride": list(value.stride()),
        "requires_grad": bool(value.requires_grad),
    }


def write_inputs(directory: Path, inputs: Sequence[Any], seeded: Collection[int] = ()) -> None:
    """Write ``inputs.json`` and ``inputs.safetensors``."""
    entries: list[dict[str, Any]] = []
    data: dict[str, torch.Tensor] = {}
    for i, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            entry = _tensor_entry(value, f"input{i}")
            if i in seeded:
                entry.update(kind="seed", seed=SEED_BASE + i)
                del entry["key"]
            else:
                data[f"input{i}"] = value.detach().cpu().contiguous()
            entries.append(entry)
        elif isinstance(value, (bool, int, float)) or value is None:
            entries.append({"kind": "scalar", "value": value})
        else:
            raise ReproFormatError(str(directory), f"input {i}",
                                   f"a {type(value).__name__} cannot be saved as a graph input")
    (directory / "inputs.json").write_text(json.dumps({"inputs": entries}, indent=1) + "\n")
    if data:
        save_file(data, str(directory / "inputs.safetensors"))


def read_inputs(directory: Path) -> list[Any]:
    """The inputs written by `write_inputs` (seeds regenerated)."""
    spec_path = directory / "inputs.json"
    if not spec_path.exists():
        raise ReproFormatError(str(directory), "inputs.json", "file is missing")
    try:
        spec = json.loads(spec_path.read_text())["inputs"]
    except (ValueError, KeyError) as exc:
        raise ReproFormatError(str(directory), "inputs.json", f"malformed ({exc})") from exc
    blob = directory / "inputs.safetensors"
    data = load_file(str(blob)) if blob.exists() else {}
    out: list[Any] = []
    for i, item in enumerate(spec):
        kind = item.get("kind")
        if kind == "scalar":
            out.append(item["value"])
            continue
        if kind not in ("tensor", "seed"):
            raise ReproFormatError(str(directory), f"inputs.json input {i}", f"unknown kind {kind!r}")
        dtype = getattr(torch, item["dtype"])
        like = torch.empty_strided(item["shape"], item["stride"], dtype=dtype)
        if kind == "seed":
            out.append(seeded_value(like.requires_grad_(item["requires_grad"]), item["seed"]))
            continue
        if item["key"] not in data:
            raise ReproFormatError(str(directory), f"inputs.safetensors[{item['key']}]", "missing")
        like.copy_(data[item["key"]])
        out.append(like.requires_grad_(item["requires_grad"]))
    return out


def failure_json(failure: Failure, ref: BackendRef | None, **extra: Any) -> dict[str, Any]:
    """The ``failure.json`` record for ``failure``."""
    rec: dict[str, Any] = {"backend": ref.to_json() if ref else None, **extra}
    if isinstance(failure, BackendError):
        sig = failure.signature
        rec.update(kind="error", signature=None if sig is None else {
            "phase": sig.phase, "exc_type": sig.exc_type, "message": sig.message})
    elif isinstance(failure, Inaccuracy):
        rec.update(kind="accuracy", tol=failure.tol, multiplier=failure.multiplier)
    else:
        rec.update(kind="predicate", label=failure.label)
    return rec


def failure_from_json(directory: Path, rec: dict[str, Any], backend: Any = None) -> Failure:
    """The `Failure` recorded in ``failure.json``; ``backend`` overrides the recorded one."""
    ref = rec.get("backend")
    chosen = backend if backend is not None else (ref or {}).get("name")
    if chosen is None:
        raise ReproFormatError(str(directory), "failure.json backend",
                               "no backend recorded; pass one (--backend NAME)")
    if isinstance(chosen, str) and ref and ref.get("path") and chosen == ref["name"]:
        import sys

        if ref["path"] not in sys.path:
            sys.path.insert(0, ref["path"])
    kind = rec.get("kind")
    if kind == "accuracy":
        return Inaccuracy(chosen, rec.get("tol", 1e-5), rec.get("multiplier", 2.0))
    sig = rec.get("signature")
    return BackendError(chosen, Signature(**sig) if sig and backend is None else None)


@dataclass(frozen=True, slots=True)
class Dump:
    """A graph directory read back: the graph, its inputs and the failure record (may be empty)."""

    gm: fx.GraphModule
    inputs: list[Any]
    record: dict[str, Any]


def write_dump(directory: str | Path, gm: fx.GraphModule, inputs: Sequence[Any],
               record: dict[str, Any] | None = None, seeded: Collection[int] = ()) -> Path:
    """Write a graph directory (graph/, inputs, failure.json)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    save_graph(gm, inputs, path / "graph")
    write_inputs(path, inputs, seeded)
    (path / "failure.json").write_text(json.dumps(record or {}, indent=1, sort_keys=True) + "\n")
    return path


def read_dump(directory: str | Path) -> Dump:
    """Read a graph directory written by `write_dump` or `write_repro`."""
    path = Path(directory)
    if not (path / "graph").exists():
        raise ReproFormatError(str(path), "graph", "the graph (an ember.ir save) is missing")
    rec: dict[str, Any] = {}
    if (path / "failure.json").exists():
        try:
            rec = json.loads((path / "failure.json").read_text())
        except ValueError as exc:
            raise ReproFormatError(str(path), "failure.json", f"malformed ({exc})") from exc
    return Dump(load_graph(path / "graph"), read_inputs(path), rec)


def write_repro(
    result: Any,
    directory: str | Path,
    *,
    seeds: bool = True,
    still_fails: Callable[[State], bool] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a repro directory for a `MinifyResult` (graph, inputs, failure.json, repro.py).

    With ``seeds``, floating inputs are replaced by seeds where the failure still
    reproduces (checked with ``still_fails``, by default the result's failure in
    this process). Returns the directory.
    """
    failure: Failure = result.failure
    state = State(result.gm, tuple(result.inputs))
    seeded: set[int] = set()
    if seeds and not isinstance(failure, Predicate):
        if still_fails is None and result.isolated:  # the backend may kill this process
            from ember.minifier.worker import Worker

            worker = Worker()
            try:
                state, seeded = replace_with_seeds(
                    state, lambda s: worker.check(failure, s).failed)
            finally:
                worker.close()
        else:
            check = still_fails or (lambda s: failure.check(s).failed)
            state, seeded = replace_with_seeds(state, check)
    ref = None if isinstance(failure, Predicate) else ref_for(failure.backend)
    summary = result.summary()
    record = failure_json(failure, ref, start_nodes=result.start_nodes,
                          final_nodes=result.final_nodes, summary=summary, **(extra or {}))
    path = write_dump(directory, state.gm, state.inputs, record, seeded)
    if ref is not None:
        safe = summary.replace('"""', "'''").replace("\\", "/")
        (path / "repro.py").write_text(render(safe, ref.name))
    return path
