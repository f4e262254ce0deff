"""Saving a GraphIR to disk: a directory with ``graph.json`` + ``weights.safetensors``.

See docs/decisions/0001-graph-ir-on-disk.md for why a directory. ``save``
writes the weights first and ``graph.json`` last, each through a temporary
file and an atomic rename, so a reader never sees a graph without its
weights. ``load`` checks that every parameter, buffer and constant the graph
lists is in the weights file with the recorded dtype and shape, restores
recorded strides and devices, and raises :class:`FormatError` naming the file
and the tensor otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from ember.ir.errors import FormatError
from ember.ir.graph import GraphIR, TensorMeta
from ember.ir.serialize import dumps, loads
from ember.ir.values import dtype_name

GRAPH_FILE = "graph.json"
WEIGHTS_FILE = "weights.safetensors"


def _write_atomic(target: Path, write: object) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if isinstance(write, str):
            tmp.write_text(write, encoding="utf-8")
        else:
            assert callable(write)
            write(str(tmp))
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def _cpu_tensors(ir: GraphIR) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    seen_storage: set[int] = set()
    for name in ir.tensor_metas():
        t = ir.tensors[name].detach()
        if t.device.type == "meta":
            raise FormatError(f"tensor {name!r} is on the meta device and has no data to save", field=name)
        t = t.to("cpu").contiguous()
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen_storage and t.numel() > 0:
            t = t.clone()  # safetensors refuses shared storage (tied or sliced weights)
        seen_storage.add(ptr)
        out[name] = t
    return out


def save(ir: GraphIR, path: str | os.PathLike[str]) -> Path:
    """Write ``ir`` to directory ``path`` (created if needed); returns the directory."""
    directory = Path(path)
    missing = ir.missing_tensors()
    if missing:
        raise FormatError(
            f"cannot save: no data for {len(missing)} tensor(s), first {missing[0]!r} "
            "(attach weights with GraphIR.with_tensors)",
            file=str(directory),
            field=missing[0],
        )
    text = dumps(ir)
    tensors = _cpu_tensors(ir)
    directory.mkdir(parents=True, exist_ok=True)
    weights_file = directory / WEIGHTS_FILE
    try:
        _write_atomic(weights_file, lambda p: save_file(tensors, p, metadata={"format": "ember.graph.weights"}))
    except (KeyError, ValueError, TypeError, SafetensorError) as e:
        dtypes = sorted({dtype_name(t.dtype) for t in tensors.values()})
        raise FormatError(
            f"safetensors cannot write these weights ({type(e).__name__}: {e}); dtypes present: {dtypes}",
            file=str(weights_file),
        ) from None
    _write_atomic(directory / GRAPH_FILE, text)
    return directory


def _restore(t: torch.Tensor, meta: TensorMeta, device: torch.device | None, file: str, name: str) -> torch.Tensor:
    if meta.is_static and tuple(t.stride()) != meta.stride and t.numel() > 0:
        strided = torch.empty_strided(t.shape, tuple(int(s) for s in meta.stride), dtype=t.dtype)
        strided.copy_(t)
        t = strided
    target = device if device is not None else meta.device
    if target.type != "cpu":
        try:
            t = t.to(target)
        except (RuntimeError, AssertionError) as e:
            raise FormatError(
                f"tensor {name!r} was saved from {meta.device} and cannot be placed there ({e}); "
                "pass device='cpu' to load()",
                file=file,
                field=name,
            ) from None
    return t


def load(path: str | os.PathLike[str], *, device: str | torch.device | None = None) -> GraphIR:
    """Read a directory written by :func:`save` (or its ``graph.json``) with its weights.

    ``device`` overrides where tensors go (default: the device each was saved from).
    """
    directory = Path(path)
    if directory.is_file():
        directory = directory.parent
    graph_file = directory / GRAPH_FILE
    try:
        text = graph_file.read_bytes()
    except OSError as e:
        raise FormatError(f"cannot read the graph IR: {e.strerror or e}", file=str(graph_file)) from None
    ir = loads(text, file=str(graph_file))
    metas = ir.tensor_metas()
    if not metas:
        return ir
    weights_file = directory / WEIGHTS_FILE
    target = torch.device(device) if device is not None else None
    tensors: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(weights_file), framework="pt") as f:
            stored = set(f.keys())
            for name, meta in metas.items():
                if name not in stored:
                    raise FormatError(
                        f"tensor {name!r} listed in {GRAPH_FILE} is missing from the weights file",
                        file=str(weights_file),
                        field=name,
                    )
                t = f.get_tensor(name)
                if t.dtype != meta.dtype or (meta.is_static and tuple(t.shape) != meta.shape):
                    raise FormatError(
                        f"tensor {name!r} is {dtype_name(t.dtype)}{list(t.shape)} in the weights file but "
                        f"{GRAPH_FILE} says {dtype_name(meta.dtype)}{list(meta.shape)}",
                        file=str(weights_file),
                        field=name,
                    )
                tensors[name] = _restore(t, meta, target, str(weights_file), name)
            extra = sorted(stored - set(metas))
    except (SafetensorError, OSError) as e:
        raise FormatError(f"cannot read the weights: {e}", file=str(weights_file)) from None
    if extra:
        raise FormatError(f"the weights file holds tensors the graph does not list: {extra[:5]}", file=str(weights_file))
    return ir.with_tensors(tensors)
