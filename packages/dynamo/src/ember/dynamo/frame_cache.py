"""Whole compiled frames as data: kept for other module instances, and on disk for other processes.

After a capture, :func:`to_stored` turns the :class:`GuardedCode` into a
:class:`StoredFrame`: the guard IR with stable names beside every address
(``portable.py``) and a ``TENSOR_MATCH`` per parameter or buffer the graphs
read (their metadata, not their identity), the transformed bytecode
(``marshal``), per graph its ember.ir serialization (no weights), the
frame sources of its inputs and of its top-level attributes, and, for a
frame split at graph breaks, the code of each resume function it calls and
where and why it broke. A frame that cannot be written this way (a resume
function that shares the frame's cells, an object guarded by identity
alone, a graph the IR cannot hold, symbolic sizes) stays in its process, and the
``frame_cache`` log says why.

:func:`instantiate` is the other direction, for a call no cached entry
matches: bind the stored guards to the live frame (``portable.bind``), check
them, rebuild each graph with the frame's own parameters (``ember.ir.to_fx``)
and hand it to the backend (whose own caches, aotgrad's plans and inductor's
graphs and kernels, then hit), and install each resume function under a
fresh global name (its own frame is then found in the store like any other). No bytecode is interpreted. The same path
serves every instance of a block class in one process (regional
compilation: one capture, one backend compile, the other instances bound)
and a new process (warm start).

:class:`FrameStore` holds the stored frames of one runtime in memory and,
when the runtime names its backend by a registered name, in
``$EMBER_CACHE_DIR/frames`` (one checksummed file per frame key: damage is
a warning and a new capture, never a run). The key is the code's content,
the Python version, torch's version, ember's own source (``ember.ir``,
``ember.guards``, ``ember.dynamo``) and the runtime's backend and options.
``EMBER_FRAME_CACHE=0`` keeps frames in memory only.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import marshal
import os
import sys
import traceback
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.modules import module as module_globals

from ember import guards, ir
from ember.ir import module_spec
from ember.ir.cache_entry import (
    default_cache_dir,
    entry_path,
    load_entry,
    remember_stored_text,
    source_fingerprint,
    store_entry,
)

from .compiled_graph import graph_entry, rebound
from .eager_fallback import no_aliasing_guard
from .frame import CapturedGraph, CompilerFn, GraphBreak, GuardedCode
from .logs import get_logger
from .portable import bind, code_digest, identity_of, make_portable, resolve
from .rebuild import rebuild_object as _rebuild_object
from .resume import RESUME_PREFIX, resume_name
from .weight_guards import identity_guard, is_weight_identity, metadata_guard

log = get_logger("frame_cache")

# The transformed code calls ``rebuild.rebuild_object`` / ``rebuild_module`` (objects made
# while tracing) as constants, stored by name; ``resolve`` never imports, and a warm process
# that loads every frame imports no capture module that would have imported ``rebuild``.
assert _rebuild_object.__module__ == "ember.dynamo.rebuild"

#: Bumped when the stored layout changes.
FORMAT = 3

#: How a runtime hands a resume function to its own cache (``FrameHooks.wrap_function``).
WrapFn = Callable[[types.FunctionType], Callable[..., Any]]


def has_hooks(module: torch.nn.Module) -> bool:
    """Whether ``module`` (or every module, globally) has forward/backward hooks."""
    mod = module_globals
    own = (
        module._forward_hooks,
        module._forward_pre_hooks,
        module._backward_hooks,
        getattr(module, "_backward_pre_hooks", {}),
    )
    glob = (mod._global_forward_hooks, mod._global_forward_pre_hooks, mod._global_backward_hooks)
    return any(len(h) for h in own) or any(len(h) for h in glob)


def ember_fingerprint() -> str:
    """ember's own version: the source of the packages a stored frame depends on."""
    here = Path(__file__).resolve().parent
    parts = [source_fingerprint(here)]
    for module in (ir, guards):
        parts.append(source_fingerprint(Path(module.__file__ or "").resolve().parent))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def environment() -> dict[str, str]:
    """What makes stored frames and compiled artifacts foreign when it differs."""
    return {
        "python": sys.implementation.cache_tag or f"py{sys.version_info[0]}{sys.version_info[1]}",
        "torch": torch.__version__,
        "ember": ember_fingerprint(),
    }


def frame_key(code: types.CodeType, runtime_key: str) -> str:
    env = environment()
    text = "|".join(
        [
            f"frame {FORMAT}",
            code_digest(code),
            env["python"],
            env["torch"],
            env["ember"],
            runtime_key,
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class StoredGraph:
    name: str  # the global the transformed code calls
    ir: str  # ember.ir JSON, no weights
    inputs: tuple[str, ...]  # source of each graph input
    attrs: dict[str, str]  # top-level attribute of the graph module -> its source
    mutated: tuple[int, ...] = ()  # the inputs the graph changes in place

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ir": self.ir,
            "inputs": list(self.inputs),
            "attrs": self.attrs,
            "mutated": list(self.mutated),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> StoredGraph:
        return StoredGraph(
            str(data["name"]),
            str(data["ir"]),
            tuple(map(str, data["inputs"])),
            dict(data["attrs"]),
            tuple(int(i) for i in data["mutated"]),
        )


@dataclass(frozen=True)
class StoredBreak:
    """Where and why the frame was split: ``reason`` and (file, line, function) per user frame."""

    reason: str
    stack: tuple[tuple[str, int, str], ...]

    @staticmethod
    def of(brk: GraphBreak) -> StoredBreak:
        return StoredBreak(
            brk.reason, tuple((f.filename, f.lineno or 0, f.name) for f in brk.user_stack)
        )

    def live(self) -> GraphBreak:
        return GraphBreak(
            self.reason,
            [traceback.FrameSummary(f, n, name, line=None) for f, n, name in self.stack],
        )


@dataclass(frozen=True)
class StoredFrame:
    guards: str  # GuardSet.dumps() with stable names (portable.py)
    code: bytes  # marshal of the transformed code
    graphs: tuple[StoredGraph, ...]
    #: global name the transformed code calls -> marshal of that resume function's code
    resumes: tuple[tuple[str, bytes], ...] = ()
    breaks: tuple[StoredBreak, ...] = ()
    #: index in the transformed code's constants -> stable name of an object marshal
    #: cannot write (the callable a graph break calls, e.g. ``builtin:builtins.print``)
    consts: tuple[tuple[int, str], ...] = ()
    #: tensor sizes the capture saw per input source: a process that loads the frame folds
    #: them into the code's ``seen_sizes`` (automatic dynamic shapes), so a new size there
    #: compiles the dynamic frame at once, as it did in the process that stored this one
    input_sizes: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "input_sizes": [[src, list(sizes)] for src, sizes in self.input_sizes],
            "guards": self.guards,
            "code": base64.b64encode(self.code).decode(),
            "graphs": [g.to_json() for g in self.graphs],
            "resumes": [[name, base64.b64encode(code).decode()] for name, code in self.resumes],
            "breaks": [
                {"reason": b.reason, "stack": [list(f) for f in b.stack]} for b in self.breaks
            ],
            "consts": [[index, name] for index, name in self.consts],
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> StoredFrame:
        return StoredFrame(
            str(data["guards"]),
            base64.b64decode(data["code"]),
            tuple(StoredGraph.from_json(g) for g in data["graphs"]),
            tuple((str(name), base64.b64decode(code)) for name, code in data["resumes"]),
            tuple(
                StoredBreak(
                    str(b["reason"]),
                    tuple((str(f), int(n), str(name)) for f, n, name in b["stack"]),
                )
                for b in data["breaks"]
            ),
            tuple((int(index), str(name)) for index, name in data["consts"]),
            tuple(
                (str(src), tuple(int(n) for n in sizes))
                for src, sizes in data.get("input_sizes", [])
            ),
        )


@functools.lru_cache(maxsize=256)
def _guard_set(text: str) -> ir.GuardSet:
    """A stored frame's guard IR, parsed once (when its file is checked, then bound)."""
    return ir.GuardSet.loads(text)


@functools.lru_cache(maxsize=256)
def _graph_ir(text: str) -> ir.GraphIR:
    """A stored graph's IR (immutable; weights are attached per binding with ``with_tensors``),
    parsed once: when its file is checked, then per bound instance (regional compilation)."""
    return ir.loads(text)


def _dump(frames: list[StoredFrame]) -> str:
    return json.dumps(
        {"format": FORMAT, "frames": [f.to_json() for f in frames]}, separators=(",", ":")
    )


def _load(text: str) -> list[StoredFrame]:
    data = json.loads(text)
    if data.get("format") != FORMAT:
        raise ValueError(f"frame cache format {data.get('format')!r}, this ember writes {FORMAT}")
    frames = [StoredFrame.from_json(f) for f in data["frames"]]
    for frame in frames:  # everything must parse now, so a damaged entry never half-runs
        _guard_set(frame.guards)
        for g in frame.graphs:
            _graph_ir(g.ir)
            for src in (*g.inputs, *g.attrs.values()):
                ir.parse_source(src)
        for name, code in frame.resumes:
            if not name.startswith(RESUME_PREFIX) or not isinstance(
                marshal.loads(code), types.CodeType
            ):
                raise ValueError(f"stored resume function {name!r} is not a code object")
    return frames


class FrameStore:
    """Stored frames of one runtime: in memory, and on disk when ``cache_dir`` is given."""

    def __init__(self, runtime_key: str, cache_dir: str | None) -> None:
        self.runtime_key = runtime_key
        self.cache_dir = cache_dir
        self._frames: dict[str, list[StoredFrame]] = {}
        self._keys: dict[types.CodeType, str] = {}
        #: ``id`` of a stored graph -> (that graph, what its first binding compiled): the
        #: other instances of the block share it (``_shared_compile``)
        self.shared: dict[int, tuple[StoredGraph, Shared]] = {}
        _ALL_STORES.add(self)

    def key(self, code: types.CodeType) -> str:
        found = self._keys.get(code)
        if found is None:
            found = self._keys[code] = frame_key(code, self.runtime_key)
        return found

    def _path(self, key: str) -> Path | None:
        return entry_path(self.cache_dir, "frames", key) if self.cache_dir is not None else None

    def frames(self, code: types.CodeType) -> list[StoredFrame]:
        key = self.key(code)
        found = self._frames.get(key)
        if found is None:
            path = self._path(key)
            loaded = load_entry(path, _load, log) if path is not None else None
            if loaded and path is not None:
                with contextlib.suppress(OSError):
                    os.utime(path)  # last use, for eviction (atime is often not kept)
            found = self._frames[key] = loaded or []
        return found

    def add(self, code: types.CodeType, stored: StoredFrame) -> None:
        frames = self.frames(code)
        if stored in frames:
            return
        frames.append(stored)
        if len(frames) > MAX_FRAMES_PER_CODE:
            # Every process tries a code's stored frames in order: the oldest goes first.
            del frames[0]
            log.info("`%s` has %d stored frames: the oldest is dropped", code.co_name, len(frames))
        path = self._path(self.key(code))
        if path is not None:
            try:
                store_entry(path, _dump(frames), _load, log)
            except OSError as exc:
                log.info("frame of `%s` not written to %s: %s", code.co_name, path, exc)
                return
            evict(path.parent.parent, max_bytes_from_env(), keep=path)

    def drop(self, code: types.CodeType, stored: StoredFrame) -> None:
        for graph in stored.graphs:
            self.shared.pop(id(graph), None)
        frames = self.frames(code)
        if stored in frames:
            frames.remove(stored)
        path = self._path(self.key(code))
        if path is not None and path.exists():
            try:
                if frames:
                    store_entry(path, _dump(frames), _load, log)
                else:
                    path.unlink()
            except OSError:
                pass

    def clear(self) -> None:
        self._frames.clear()
        self.shared.clear()

    def forget_misses(self) -> None:
        """Look at the disk again for keys it had nothing for (new files arrived)."""
        for key in [k for k, v in self._frames.items() if not v]:
            del self._frames[key]


_ALL_STORES: weakref.WeakSet[FrameStore] = weakref.WeakSet()

#: Stored frames kept per code object (each is a guard set a miss may try).
MAX_FRAMES_PER_CODE = 8

#: Size cap of ``$EMBER_CACHE_DIR/frames`` without ``EMBER_FRAME_CACHE_MAX_MB``.
DEFAULT_MAX_MB = 256.0


def max_bytes_from_env() -> int:
    """``EMBER_FRAME_CACHE_MAX_MB`` (default 256) in bytes; a bad value is the default."""
    text = os.environ.get("EMBER_FRAME_CACHE_MAX_MB", "")
    try:
        mb = float(text) if text else DEFAULT_MAX_MB
    except ValueError:
        log.warning("EMBER_FRAME_CACHE_MAX_MB=%r is not a number; using %s", text, DEFAULT_MAX_MB)
        mb = DEFAULT_MAX_MB
    return max(0, int(mb * 1024 * 1024))


def evict(folder: Path, max_bytes: int, keep: Path | None = None) -> list[Path]:
    """Delete the least recently used frame files under ``folder`` until it holds at most
    ``max_bytes`` (``keep``, the file just written, stays). Returns what was deleted."""
    files: list[tuple[float, int, Path]] = []
    for path in folder.glob("*/*.json"):
        try:
            st = path.stat()
        except OSError:
            continue  # deleted meanwhile by another process
        files.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in files)
    removed: list[Path] = []
    for _, size, path in sorted(files, key=lambda f: f[0]):
        if total <= max_bytes:
            break
        if keep is not None and path == keep:
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
        total -= size
    if removed:
        log.info("frame cache over %d bytes: %d least recently used files deleted", max_bytes, len(removed))
    return removed


def forget_misses() -> None:
    """After ``load_cache_artifacts``: every store looks at the disk again."""
    for store in list(_ALL_STORES):
        store.forget_misses()


def store_dir_from_env() -> str | None:
    """The disk store's folder (under the compile cache), or None with ``EMBER_FRAME_CACHE=0``."""
    if os.environ.get("EMBER_FRAME_CACHE", "1") == "0":
        return None
    return default_cache_dir()


# -- capture -> stored --------------------------------------------------------------------------


def _tensor_source(graph: StoredGraph, name: str) -> ir.Source:
    """The frame source of a graph tensor named ``a.b.c`` (attribute ``a`` of the graph module)."""
    root, _, rest = name.partition(".")
    source = ir.parse_source(graph.attrs[root])
    for part in rest.split(".") if rest else ():
        source = ir.Attr(source, part)
    return source


def to_stored(
    guarded: GuardedCode, f_locals: dict[str, Any], f_globals: dict[str, Any]
) -> tuple[StoredFrame | None, str]:
    """``guarded`` as data that outlives the process, or ``(None, why it cannot)``."""
    if _symbolic(guarded):
        # Rebuilt from the store, a graph would be traced (and compiled) for the binding
        # call's sizes while its guards admit every size: symbolic frames are not stored yet.
        return None, "the frame has symbolic sizes (dynamic shapes are not stored yet)"
    consts = list(guarded.code.co_consts)
    named: list[tuple[int, str]] = []
    for index, const in enumerate(consts):
        try:
            marshal.dumps(const)
        except ValueError:
            name = identity_of(const)
            if name is None:
                return (
                    None,
                    f"the transformed code holds a `{type(const).__qualname__}` constant with no stable name",
                )
            consts[index] = None
            named.append((index, name))
    try:
        code = marshal.dumps(guarded.code.replace(co_consts=tuple(consts)))
    except ValueError as exc:
        return None, f"the transformed code holds a constant marshal cannot write ({exc})"
    resumes, why = _stored_resumes(guarded.code, f_globals)
    if resumes is None:
        return None, why
    graphs: list[StoredGraph] = []
    extra: list[ir.Guard] = []
    for captured in guarded.graphs:
        stored, why = _stored_graph(captured)
        if stored is None:
            return None, why
        graphs.append(stored)
        for name in ir.loads(stored.ir).tensor_metas():
            source = _tensor_source(stored, name)
            value = guards.eval_source(source, f_locals, f_globals)
            extra.append(metadata_guard(source, value))
    kept = [g for g in guarded.guard_set.guards if not is_weight_identity(g)]  # addresses
    guard_set = ir.GuardSet(tuple(dict.fromkeys((*kept, *extra))))
    portable, why = make_portable(guard_set, f_locals, f_globals)
    if portable is None:
        return None, why
    breaks = tuple(StoredBreak.of(b) for b in guarded.graph_breaks)
    sizes = tuple((src, tuple(int(n) for n in shape)) for src, shape in guarded.input_sizes.items())
    return (
        StoredFrame(portable.dumps(), code, tuple(graphs), resumes, breaks, tuple(named), sizes),
        "",
    )


def _stored_resumes(
    code: types.CodeType, f_globals: dict[str, Any]
) -> tuple[tuple[tuple[str, bytes], ...] | None, str]:
    """The resume functions ``code`` calls by global name, as marshalled code."""
    found: list[tuple[str, bytes]] = []
    for name in code.co_names:
        if not name.startswith(RESUME_PREFIX):
            continue
        fn = getattr(f_globals.get(name), "__wrapped__", None)
        if not isinstance(fn, types.FunctionType) or fn.__closure__ or fn.__defaults__:
            return None, f"resume function {name} is not a plain function of the frame's globals"
        try:
            found.append((name, marshal.dumps(fn.__code__)))
        except ValueError as exc:
            return None, f"resume function {name} holds a constant marshal cannot write ({exc})"
    return tuple(found), ""


def _symbolic(guarded: GuardedCode) -> bool:
    """Whether the frame was captured with size symbols (its guards bind them, or a graph input
    has them) or dynamic floats (ADR 0044)."""
    if guarded.guard_set.shape_relations or any(
        g.kind is ir.GuardKind.SHAPE_EXPR for g in guarded.guard_set.guards
    ):
        return True
    for captured in guarded.graphs:
        for node in captured.gm.graph.nodes:
            if node.op != "placeholder":
                continue
            value = node.meta.get("example_value")
            if isinstance(value, (torch.SymInt, torch.SymFloat)) or (
                isinstance(value, torch.Tensor)
                and not all(type(d) is int for d in (*value.shape, *value.stride()))
            ):
                return True
    return False


def _stateless_module(gm: torch.fx.GraphModule, name: str) -> bool:
    """Whether graph attribute ``name`` is a leaf module without tensors or hooks."""
    module = gm._modules.get(name)
    if not isinstance(module, torch.nn.Module):
        return False
    if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
        return False
    return not any(has_hooks(m) for m in module.modules())


def _stored_graph(captured: CapturedGraph) -> tuple[StoredGraph | None, str]:
    if captured.unstorable:
        return None, captured.unstorable
    missing = [
        name
        for name, src in captured.attr_sources.items()
        if src is None and not _stateless_module(captured.gm, name)
    ]
    if missing:
        return (
            None,
            f"graph attribute {missing[0]!r} was made while tracing (it has no frame source)",
        )
    try:
        graph_ir = ir.from_fx(captured.gm)
    except ir.FormatError as exc:
        return None, f"the graph IR cannot hold graph {captured.name}: {exc}"
    # A stateless leaf module made while tracing (``CrossEntropyLoss()`` inside ``forward``)
    # has no frame source: the graph IR's module record is all of it, and ``to_fx``
    # rebuilds it from that record.
    attrs = {name: src.expr() for name, src in captured.attr_sources.items() if src is not None}
    inputs = tuple(src.expr() for src in captured.input_sources)
    return StoredGraph(captured.name, ir.dumps(graph_ir), inputs, attrs, captured.mutated), ""


# -- stored -> a runnable entry --------------------------------------------------------------------


def instantiate(
    stored: StoredFrame,
    f_locals: dict[str, Any],
    f_globals: dict[str, Any],
    compiler: CompilerFn,
    wrap: WrapFn,
    shared: dict[int, tuple[StoredGraph, Shared]] | None = None,
) -> GuardedCode | None:
    """``stored`` bound to this frame, or None when its guards do not hold here.

    Its resume functions are made in ``f_globals`` and handed to the runtime with ``wrap``.

    Raises on an entry that parses but cannot be rebuilt (the caller drops it).
    """
    bound, why = bind(_guard_set(stored.guards), f_locals, f_globals)
    if bound is None:
        log.debug("stored frame does not bind: %s", why)
        return None
    # the live weights by identity too, as a capture in this process guards them
    # (``weight_guards.py``): ``m.weight = other`` later must not reach these graphs
    ids: list[ir.Guard] = []
    for graph in stored.graphs:
        for name in _graph_ir(graph.ir).tensor_metas():
            source = _tensor_source(graph, name)
            value = guards.eval_source(source, f_locals, f_globals)
            if isinstance(value, torch.Tensor):
                ids.append(identity_guard(source, value, name))
    bound = ir.GuardSet((*bound.guards, *ids))
    check_fn = guards.compile(bound, f_locals, f_globals)
    if not check_fn(f_locals, f_globals):
        log.debug("stored frame does not apply: %s", check_fn.explain(f_locals, f_globals))
        return None
    consts: dict[int, Any] = {}
    for index, name in stored.consts:
        consts[index] = resolve(name)
        if consts[index] is None:
            log.debug("stored frame does not apply: %s is not loaded in this process", name)
            return None
    parsed = [(g, _graph_ir(g.ir)) for g in stored.graphs]
    for graph, graph_ir in parsed:
        if not _modules_match(graph, graph_ir, f_locals, f_globals):
            log.debug("stored frame does not apply: a leaf module differs or has hooks")
            return None
    names: dict[str, str] = {}
    graphs: list[CapturedGraph] = []
    for graph, graph_ir in parsed:
        tensors = {
            name: guards.eval_source(_tensor_source(graph, name), f_locals, f_globals)
            for name in graph_ir.tensor_metas()
        }
        gm = ir.to_fx(graph_ir.with_tensors(tensors), lazy_code=True)
        remember_stored_text(gm, graph.ir)  # the backend's plan key, without serializing gm
        for path in graph_ir.modules:
            if path not in graph.attrs:
                continue  # made while tracing, without tensors: rebuilt from its record
            # The live leaf module itself, as capture registers it (its spec was checked
            # equal above): same object, same parameter order for the backend's caches.
            gm._modules[path] = guards.eval_source(
                ir.parse_source(graph.attrs[path]), f_locals, f_globals
            )
        sources = [ir.parse_source(s) for s in graph.inputs]
        example_inputs = [guards.eval_source(s, f_locals, f_globals) for s in sources]
        # a graph that changes an input in place runs in program order when that input
        # shares memory with another (``f(x, x)``), as it did where it was captured; not
        # checked per call where the stored guards check it (a frame stored with NO_ALIASING)
        no_alias = no_aliasing_guard(sources, example_inputs, graph.mutated)
        captured = graph_entry(
            gm,
            example_inputs,
            graph.mutated,
            functools.partial(_shared_compile, graph, gm, tensors, example_inputs, compiler, shared),
            f_globals,
            alias_guarded=no_alias in bound.guards,
            sources=sources,
            attr_sources={k: ir.parse_source(v) for k, v in graph.attrs.items()},
        )
        names[graph.name] = captured.name
        graphs.append(captured)
    for stored_name, resume in stored.resumes:
        offset = stored_name[len(RESUME_PREFIX) :].rpartition("_")[0]
        name = resume_name(int(offset) if offset.isdigit() else 0)
        f_globals[name] = wrap(types.FunctionType(marshal.loads(resume), f_globals, name))
        names[stored_name] = name
    code = marshal.loads(stored.code)
    code = code.replace(
        co_names=tuple(names.get(n, n) for n in code.co_names),
        co_consts=tuple(consts.get(i, c) for i, c in enumerate(code.co_consts)),
    )
    return GuardedCode(
        code,
        check_fn,
        bound,
        graphs,
        [b.live() for b in stored.breaks],
        input_sizes=dict(stored.input_sizes),
    )


@dataclass(frozen=True)
class Shared:
    """What the backend compiled for the first instance a stored graph was bound to."""

    compiler: CompilerFn
    compiled: Any  # the backend's result (``Runtime.compiler``), before ``AliasChecked``
    weights: dict[str, torch.Tensor]  # that instance's tensors, by graph name
    signature: tuple[Any, ...]  # ``_compile_signature`` of that binding


def _layout(t: Any) -> tuple[Any, ...]:
    if not isinstance(t, torch.Tensor):
        return (type(t),)
    return (type(t), t.device, t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset(),
            t.requires_grad)


def _compile_signature(tensors: dict[str, Any], example_inputs: list[Any]) -> tuple[Any, ...]:
    """Everything of one binding a backend may compile differently for: the layout of each
    weight and input, which weights share memory, grad and autocast modes."""
    storages: dict[tuple[Any, int], int] = {}
    shares: list[int] = []
    for t in tensors.values():
        if isinstance(t, torch.Tensor):
            key = (t.device, t.untyped_storage().data_ptr())
            shares.append(storages.setdefault(key, len(storages)))
    autocast = tuple(
        (d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")
    )
    return (
        tuple((name, _layout(t)) for name, t in tensors.items()),
        tuple(shares),
        tuple(_layout(x) for x in example_inputs),
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        autocast,
    )


def _shared_compile(
    graph: StoredGraph,
    gm: torch.fx.GraphModule,
    tensors: dict[str, Any],
    example_inputs: list[Any],
    compiler: CompilerFn,
    shared: dict[int, tuple[StoredGraph, Shared]] | None,
) -> Any:
    """``compiler(gm, example_inputs)``, or, for a further instance of a block whose stored
    graph was bound before with weights and inputs of the same layouts (same sharing, same
    grad and autocast modes), what the backend compiled then, reading this instance's weights
    (``compiled_graph.rebound``): no graph key, plan or wrapper is made again per block
    (regional compilation). A backend result that cannot be rebound is compiled per instance."""
    signature = _compile_signature(tensors, example_inputs) if shared is not None else ()
    if shared is not None:
        found = shared.get(id(graph))
        if found is not None and found[0] is graph:
            first = found[1]
            if first.compiler == compiler and first.signature == signature:
                new_for = {
                    id(old): tensors[name]
                    for name, old in first.weights.items()
                    if isinstance(old, torch.Tensor)
                }
                compiled = rebound(first.compiled, new_for, gm)
                if compiled is not None:
                    return compiled
    compiled = compiler(gm, example_inputs)
    if shared is not None and id(graph) not in shared:
        shared[id(graph)] = (graph, Shared(compiler, compiled, dict(tensors), signature))
    return compiled


def _share_capture(
    store: FrameStore,
    code: types.CodeType,
    stored: StoredFrame,
    guarded: GuardedCode,
    f_locals: dict[str, Any],
    f_globals: dict[str, Any],
    compiler: CompilerFn,
) -> None:
    """The backend results of a fresh capture, as the first binding of each of its stored
    graphs: the next instance of the block rebinds them (``_shared_compile``) instead of
    calling the backend again (the capture's instance was compiled once already)."""
    frames = store.frames(code)
    if stored not in frames:
        return
    kept = frames[frames.index(stored)]  # an equal frame stored before is the one bound
    for captured, graph in zip(guarded.graphs, kept.graphs, strict=True):
        if id(graph) in store.shared or captured.mutated:
            continue  # (a graph writing its inputs is wrapped in ``AliasChecked``)
        tensors = {
            name: guards.eval_source(_tensor_source(graph, name), f_locals, f_globals)
            for name in _graph_ir(graph.ir).tensor_metas()
        }
        signature = _compile_signature(tensors, list(captured.example_inputs))
        store.shared[id(graph)] = (graph, Shared(compiler, captured.compiled, tensors, signature))


def _modules_match(
    graph: StoredGraph, graph_ir: ir.GraphIR, f_locals: dict[str, Any], f_globals: dict[str, Any]
) -> bool:
    """Each leaf module the graph calls is configured here as it was when captured, without hooks."""
    for path, spec in graph_ir.modules.items():
        if path not in graph.attrs:
            continue  # made while tracing: the graph's own copy, rebuilt from ``spec``
        live = guards.eval_source(ir.parse_source(graph.attrs[path]), f_locals, f_globals)
        if not isinstance(live, torch.nn.Module) or has_hooks(live):
            return False
        if module_spec(live, path, {}, {}, {}) != spec:
            return False
    return True


def attempt(
    store: FrameStore,
    code: types.CodeType,
    f_locals: dict[str, Any],
    f_globals: dict[str, Any],
    compiler: CompilerFn,
    wrap: WrapFn,
    where: str,
) -> GuardedCode | None:
    """The first stored frame of ``code`` that binds to this call, or None."""
    for stored in list(store.frames(code)):
        try:
            guarded = instantiate(stored, f_locals, f_globals, compiler, wrap, store.shared)
        except Exception as exc:  # a stored frame that cannot be rebuilt is dropped, never run
            log.warning(
                "stored frame of %s could not be rebuilt (%s: %s); capturing it again",
                where,
                type(exc).__name__,
                exc,
            )
            store.drop(code, stored)
            continue
        if guarded is not None:
            return guarded
    return None


def seen_sizes(store: FrameStore, code: types.CodeType) -> list[dict[str, tuple[int, ...]]]:
    """The input sizes of every stored frame of ``code`` (automatic dynamic shapes' state)."""
    return [dict(stored.input_sizes) for stored in store.frames(code)]


def remember(
    store: FrameStore,
    code: types.CodeType,
    guarded: GuardedCode,
    f_locals: dict[str, Any],
    f_globals: dict[str, Any],
    where: str,
    compiler: CompilerFn | None = None,
) -> None:
    """Store a fresh capture if it can outlive its process; log which it is. With
    ``compiler`` (the runtime's, which compiled the capture's graphs), what it compiled is
    shared with the instances bound to the stored frame later (``_shared_compile``)."""
    try:
        stored, why = to_stored(guarded, f_locals, f_globals)
    except Exception as exc:  # storing is an optimisation: it never fails a compile
        stored, why = None, f"{type(exc).__name__}: {exc}"
    if stored is None:
        log.info("frame %s stays in this process: %s", where, why)
        return
    store.add(code, stored)
    if compiler is not None:
        _share_capture(store, code, stored, guarded, f_locals, f_globals, compiler)
    log.info(
        "frame %s stored%s",
        where,
        " on disk" if store.cache_dir is not None else " for other instances",
    )
