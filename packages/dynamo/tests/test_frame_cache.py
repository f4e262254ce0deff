"""The frame cache: compiled frames reused by a new process (warm start), by other
instances of a block (regional compilation), and carried as one blob (artifacts).

The cross-process tests run real subprocesses over a private ``EMBER_CACHE_DIR``.
In the warm process capture is made impossible (``ember.dynamo.convert_frame``
is set to None in ``sys.modules``, so importing the bytecode interpreter
raises): a hit must run without interpreting bytecode. Results are compared
with eager PyTorch in the same process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.dynamo as ed
from ember.dynamo import api, artifacts, frame_cache

MODEL = textwrap.dedent(
    """
    import torch

    SCALE = {scale}

    class Block(torch.nn.Module):
        def __init__(self, hidden={hidden}):
            super().__init__()
            self.fc = torch.nn.Linear(8, hidden)
            self.ln = torch.nn.LayerNorm(hidden)
            self.act = torch.nn.functional.gelu

        def forward(self, x):
            return self.act(self.ln(self.fc(x))) * SCALE {extra}
    """
)

DRIVER = textwrap.dedent(
    """
    import json, sys, importlib.util
    import torch
    import ember.dynamo as ed
    from ember.dynamo import api, frame_cache

    events = []
    api.STATE.listeners.append(lambda e: events.append(e.reason or "captured"))

    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod

    def run(path, block_capture=False):
        mod = load(path, "warm_model")
        torch.manual_seed(0)
        m = mod.Block()
        x = torch.randn(3, 8)
        if block_capture:
            sys.modules["ember.dynamo.convert_frame"] = None
        events.clear()
        out = ed.compile(m, backend="eager")(x)
        sys.modules.pop("ember.dynamo.convert_frame", None) if block_capture else None
        return {"equal": bool(torch.allclose(out, m(x))), "events": list(events)}

    result = {}
    for step in json.loads(sys.argv[1]):
        kind, path = step[0], step[1]
        if kind == "new_version":
            frame_cache.ember_fingerprint = lambda: "another ember"
            continue
        if kind == "save":
            blob, info = ed.save_cache_artifacts()
            open(path, "wb").write(blob)
            continue
        if kind == "load":
            result["loaded_frames"] = len(ed.load_cache_artifacts(open(path, "rb").read()).frames)
            continue
        result[kind] = run(path, block_capture=(kind == "hit"))
    result["modules"] = {
        name: name in sys.modules
        for name in ("ember.dynamo.symbolic_convert", "ember.dynamo.convert_frame", "torch._dynamo")
    }
    print(json.dumps(result))
    """
)


def _model(tmp_path: Path, name: str, scale: float = 2.0, hidden: int = 16, extra: str = "") -> str:
    (tmp_path / "models").mkdir(exist_ok=True)
    path = tmp_path / "models" / f"model_{name}.py"
    path.write_text(MODEL.format(scale=scale, hidden=hidden, extra=extra))
    return str(path)


def _run(tmp_path: Path, cache: Path, steps: list[list[str]]) -> tuple[dict[str, Any], str]:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache), EMBER_FRAME_CACHE="1")
    env.pop("EMBER_COMPILE_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, str(driver), json.dumps(steps)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_second_process_runs_the_stored_frame_and_misses_on_changes(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    base = _model(tmp_path, "base")
    first, _ = _run(tmp_path, cache, [["cold", base]])
    assert first["cold"] == {"equal": True, "events": ["captured"]}
    assert list((cache / "frames").rglob("*.json")), "the frame was not stored"

    steps = [
        ["hit", base],
        ["code", _model(tmp_path, "code", extra="+ 1.0")],
        ["global", _model(tmp_path, "glob", scale=3.0)],
        ["shape", _model(tmp_path, "shape", hidden=24)],
        ["new_version", ""],
        ["version", base],
    ]
    second, _ = _run(tmp_path, cache, steps)
    # A hit: no bytecode interpreted (capture cannot even be imported), results as eager.
    assert second["hit"] == {"equal": True, "events": ["frame cache"]}
    for change in ("code", "global", "shape", "version"):
        assert second[change] == {"equal": True, "events": ["captured"]}, change


def test_warm_hit_imports_neither_capture_nor_torchdynamo(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    base = _model(tmp_path, "base")
    _run(tmp_path, cache, [["cold", base]])
    warm, _ = _run(tmp_path, cache, [["hit", base]])
    assert warm["hit"]["events"] == ["frame cache"]
    assert warm["modules"]["ember.dynamo.symbolic_convert"] is False
    assert warm["modules"]["torch._dynamo"] is False


BROKEN_MODEL = textwrap.dedent(
    """
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 16)
            self.out = torch.nn.Linear(16, 4)

        def forward(self, x):
            h = torch.relu(self.fc(x))
            print("graph break")  # splits the frame: a graph, a resume function, a graph
            return self.out(h).sum(-1, keepdim=True) + h.mean()
    """
)


def test_a_frame_split_at_a_graph_break_warm_starts_with_its_resume_function(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    (tmp_path / "models").mkdir()
    path = tmp_path / "models" / "model_broken.py"
    path.write_text(BROKEN_MODEL)
    first, _ = _run(tmp_path, cache, [["cold", str(path)]])
    # the frame and its resume function are each captured once
    assert first["cold"] == {"equal": True, "events": ["captured", "captured"]}
    warm, _ = _run(tmp_path, cache, [["hit", str(path)]])
    # both come from the store, with capture impossible; results as eager
    assert warm["hit"] == {"equal": True, "events": ["frame cache", "frame cache"]}
    assert warm["modules"]["ember.dynamo.symbolic_convert"] is False


TRANSFORMERS_LIKE_MODEL = textwrap.dedent(
    """
    import dataclasses, enum
    import torch

    class Mode(str, enum.Enum):  # transformers' `Action`: a str enum read by the frame
        SUM = "sum"
        MEAN = "mean"

    MODE = Mode.MEAN

    @dataclasses.dataclass
    class Out:  # made in the frame and kept: the transformed code rebuilds it
        loss: torch.Tensor
        h: torch.Tensor

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            h = self.fc(x)
            reduction = "mean" if MODE is Mode.MEAN else "sum"
            # a stateless module made while tracing: no frame source, rebuilt from the IR
            loss_fct = torch.nn.CrossEntropyLoss(reduction=reduction)
            target = torch.zeros(x.shape[0], dtype=torch.long)
            self.last = Out(loss_fct(h, target), h)
            return self.last.loss * 2 + h.sum()
    """
)


def test_frames_like_transformers_models_warm_start(tmp_path: Path) -> None:
    """What kept transformers' GPT-2 and the ViT+GPT-2 captioner from the store: a str
    enum member read by the frame (stored as a plain str, so it never matched again), an
    object rebuilt by ``ember.dynamo.rebuild`` (not imported by a warm process), and a
    ``CrossEntropyLoss()`` made inside ``forward`` (a graph attribute with no frame source)."""
    cache = tmp_path / "cache"
    (tmp_path / "models").mkdir()
    path = tmp_path / "models" / "model_tf_like.py"
    path.write_text(TRANSFORMERS_LIKE_MODEL)
    first, _ = _run(tmp_path, cache, [["cold", str(path)]])
    assert first["cold"] == {"equal": True, "events": ["captured"]}
    warm, _ = _run(tmp_path, cache, [["hit", str(path)], ["hit", str(path)]])
    assert warm["hit"] == {"equal": True, "events": ["frame cache"]}
    stored = json.loads(next((cache / "frames").rglob("*.json")).read_text().partition("\n")[2])
    assert len(stored["frames"]) == 1  # the warm process added no second copy of the frame


class BrokenBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc(x))
        print("graph break")
        return h.cos() + x


def test_blocks_split_at_a_graph_break_share_the_stored_frame_and_its_break() -> None:
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList([BrokenBlock(), BrokenBlock()])
    events, listen = _captures()
    breaks: list[str] = []

    def on_capture(e: Any) -> None:
        if e.kind == "capture" and e.guarded is not None:
            breaks.extend(b.reason for b in e.guarded.graph_breaks)

    api.STATE.listeners.append(on_capture)
    try:
        ed.compile(blocks, backend="eager")
        for b in blocks:
            x = torch.randn(2, 8)
            torch.testing.assert_close(b(x), b.forward.__wrapped__(b, x))
    finally:
        api.STATE.listeners.remove(listen)
        api.STATE.listeners.remove(on_capture)
    # block 1: the frame and its resume function captured; block 2: both from the store
    assert events == ["captured", "captured", "frame cache", "frame cache"]
    # the stored frame still says where and why it was split
    assert len(breaks) == 2 and breaks[0] == breaks[1] and "print" in breaks[0]


def test_corrupted_or_truncated_entry_is_rebuilt_with_a_warning(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    base = _model(tmp_path, "base")
    _run(tmp_path, cache, [["cold", base]])
    (entry,) = (cache / "frames").rglob("*.json")
    good = entry.read_bytes()
    for damage in (good[: len(good) // 2], good.replace(b'"code":"', b'"code":"AAAA', 1)):
        entry.write_bytes(damage)
        result, stderr = _run(tmp_path, cache, [["again", base]])
        assert result["again"] == {"equal": True, "events": ["captured"]}
        assert "corrupted or unreadable" in stderr
        assert entry.read_bytes() != damage  # written again by the new capture


def test_artifacts_saved_in_one_process_load_in_another(tmp_path: Path) -> None:
    base = _model(tmp_path, "base")
    blob = tmp_path / "artifacts.bin"
    _run(tmp_path, tmp_path / "cache1", [["cold", base], ["save", str(blob)]])
    fresh = tmp_path / "cache2"
    result, _ = _run(tmp_path, fresh, [["load", str(blob)], ["hit", base]])
    assert result["loaded_frames"] == 1
    assert result["hit"] == {"equal": True, "events": ["frame cache"]}


# -- in process -------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames stored by earlier runs must not answer these tests' first calls."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "private-cache"))


class Block(torch.nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(width, width)
        self.ln = torch.nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.ln(self.fc(x))) + x


class Tower(torch.nn.Module):
    def __init__(self, depth: int = 12, width: int = 8) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


class Counter:
    def __init__(self) -> None:
        self.graphs: list[str] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        self.graphs.append(gm.code)
        return gm.forward


def _captures() -> tuple[list[str], Any]:
    events: list[str] = []

    def listen(e: Any) -> None:
        if e.kind == "capture":
            events.append(e.reason or "captured")

    api.STATE.listeners.append(listen)
    return events, listen


def test_regional_compilation_of_a_module_list_captures_one_block() -> None:
    torch.manual_seed(0)
    model = Tower(depth=12)
    x = torch.randn(4, 8, requires_grad=True)  # as every later block's input
    expected = model(x)
    counter = Counter()
    events, listen = _captures()
    try:
        blocks = ed.compile(model.blocks, backend=counter)
        assert blocks is model.blocks
        out = model(x)
        again = model(x)
    finally:
        api.STATE.listeners.remove(listen)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(again, expected)
    # One capture (one block graph); the other 11 blocks reuse it with their own weights.
    assert events == ["captured"] + ["frame cache"] * 11
    assert len(set(counter.graphs)) == 1
    assert list(model.state_dict()) == list(Tower(depth=12).state_dict())


def _counting_inductor_compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Calls of ember.inductor's graph compile (a cache hit or not): one per backend call."""
    from ember.inductor import compile_fx

    calls: list[int] = []
    real = compile_fx._compile

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(compile_fx, "_compile", counting)
    return calls


def test_regional_inductor_blocks_share_one_compiled_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The blocks after the first binding reuse what the backend compiled, each with its own
    weights (no plan, graph key or wrapper made again per block), and still read their own
    weights after ``.data =`` or an in-place change."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    calls = _counting_inductor_compiles(monkeypatch)
    torch.manual_seed(0)
    model = Tower(depth=6)
    x = torch.randn(4, 8)
    with torch.no_grad():
        expected = model(x)
        ed.compile(model.blocks, backend="inductor")
        torch.testing.assert_close(model(x), expected)
        # one capture compiled; the five other blocks rebind what it compiled (ADR 0048)
        assert len(calls) == 1
        model.blocks[4].fc.weight.data = torch.randn(8, 8)
        model.blocks[3].ln.bias.add_(1.0)
        model.blocks[5].fc.bias.zero_()
        got = model(x)
        for block in model.blocks:
            block.forward = block.forward.__wrapped__.__get__(block)  # eager again
        torch.testing.assert_close(got, model(x))
    assert len(calls) == 1


def test_regional_blocks_whose_weights_share_memory_otherwise_compile_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block whose weights share memory where the first bound one's did not (a tied bias)
    passes the guards but is compiled for itself, not rebound."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    calls = _counting_inductor_compiles(monkeypatch)
    torch.manual_seed(0)
    model = Tower(depth=4)
    model.blocks[3].ln.bias = model.blocks[3].fc.bias
    x = torch.randn(4, 8)
    with torch.no_grad():
        expected = model(x)
        ed.compile(model.blocks, backend="inductor")
        torch.testing.assert_close(model(x), expected)
        model.blocks[3].fc.bias.add_(0.5)  # both names see it
        got = model(x)
        for block in model.blocks:
            block.forward = block.forward.__wrapped__.__get__(block)
        torch.testing.assert_close(got, model(x))
    assert len(calls) == 2  # capture (shared with the bound blocks), the tied block


class Local(Block):
    pass


def test_compile_applied_to_a_block_class() -> None:
    original = Local.forward
    torch.manual_seed(0)
    blocks = [Local() for _ in range(3)]
    x = torch.randn(2, 8)
    expected = [b(x) for b in blocks]
    events, listen = _captures()
    try:
        ed.compile(Local, backend="eager")
        outs = [b(x) for b in blocks]
    finally:
        api.STATE.listeners.remove(listen)
        Local.forward = original  # type: ignore[method-assign]
    for out, want in zip(outs, expected, strict=True):
        torch.testing.assert_close(out, want)
    assert events == ["captured", "frame cache", "frame cache"]


def test_a_block_with_other_weights_shape_is_captured_again() -> None:
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList([Block(8), Block(8), Block(4)])
    events, listen = _captures()
    try:
        ed.compile(blocks, backend="eager")
        for b, width in zip(blocks, (8, 8, 4), strict=True):
            x = torch.randn(2, width)
            torch.testing.assert_close(b(x), b.forward.__wrapped__(b, x))
    finally:
        api.STATE.listeners.remove(listen)
    assert events == ["captured", "frame cache", "captured"]


LOCAL_TYPES: list[type] = []


def test_identity_only_guard_keeps_the_frame_in_its_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Marker:
        pass

    LOCAL_TYPES.append(Marker)

    def fn(x: torch.Tensor) -> torch.Tensor:
        if LOCAL_TYPES[0] is Marker:
            return x + 1
        return x - 1

    caplog.set_level("INFO", logger="ember.frame_cache")
    try:
        out = ed.compile(fn, backend="eager")(torch.ones(2))
    finally:
        LOCAL_TYPES.clear()
    torch.testing.assert_close(out, torch.full((2,), 2.0))
    assert any("stays in this process" in r.getMessage() for r in caplog.records)


def test_corrupted_artifacts_are_rejected_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "src"))
    (tmp_path / "src" / "frames" / "ab").mkdir(parents=True)
    (tmp_path / "src" / "frames" / "ab" / "abc.json").write_text("x\n{}")
    blob, info = artifacts.save_cache_artifacts()
    assert info.frames == ["ab/abc.json"]
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "dst"))
    with pytest.warns(RuntimeWarning, match="corrupted or truncated"):
        assert len(ed.load_cache_artifacts(blob[:-10])) == 0
    with pytest.warns(RuntimeWarning, match="not an ember cache artifact"):
        assert len(ed.load_cache_artifacts(b"garbage")) == 0
    assert not (tmp_path / "dst").exists()
    assert ed.load_cache_artifacts(blob).frames == ["ab/abc.json"]
    assert (tmp_path / "dst" / "frames" / "ab" / "abc.json").read_text() == "x\n{}"


def test_foreign_artifacts_are_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "src"))
    (tmp_path / "src" / "kernels" / "00").mkdir(parents=True)
    (tmp_path / "src" / "kernels" / "00" / "k.so").write_bytes(b"\x7fELF")
    blob, info = artifacts.save_cache_artifacts()
    assert info.kernels == ["00/k.so"]
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "dst"))
    monkeypatch.setattr(artifacts, "host_cpu", lambda: "another cpu")
    assert len(ed.load_cache_artifacts(blob)) == 0
    monkeypatch.undo()
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "dst"))
    monkeypatch.setattr(frame_cache, "ember_fingerprint", lambda: "another ember")
    assert len(ed.load_cache_artifacts(blob)) == 0
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_frames_with_symbolic_sizes_are_not_reused_at_their_first_sizes(backend: str) -> None:
    """A frame compiled with symbolic sizes must serve every size its guards admit; rebuilt
    from the store, its graph would be compiled for the binding call's sizes only."""
    torch.manual_seed(0)
    model = Tower(depth=3)
    events, listen = _captures()
    try:
        ed.compile(model.blocks, backend=backend, dynamic=True)
        with torch.no_grad():
            for n in (3, 5, 7):
                x = torch.randn(n, 8)
                want = x
                for block in model.blocks:
                    want = block.forward.__wrapped__(block, want)
                torch.testing.assert_close(model(x), want)
    finally:
        api.STATE.listeners.remove(listen)
    assert "frame cache" not in events


SIZES_DRIVER = textwrap.dedent(
    """
    import json, sys
    import torch
    import ember.dynamo as ed
    from ember.dynamo import api

    events = []

    def listen(e):
        if e.kind == "capture":
            dynamic = bool(getattr(e.guarded, "dynamic", None))
            events.append((e.reason or "captured") + (" dynamic" if dynamic else ""))

    api.STATE.listeners.append(listen)

    def f(x, w):
        return torch.cat([x, x[:1]]) @ w + x.shape[0]

    torch.manual_seed(0)
    w = torch.randn(8, 3)
    compiled = ed.compile(f, backend=sys.argv[2])
    ok = []
    for n in json.loads(sys.argv[1]):
        x = torch.randn(n, 8)
        out = compiled(x, w)
        want = f(x, w)
        ok.append(out.shape == want.shape and bool(torch.allclose(out, want)))
    print(json.dumps({"events": events, "ok": ok}))
    """
)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_warm_process_keeps_automatic_dynamic_state_and_right_sizes(
    tmp_path: Path, backend: str
) -> None:
    """The static frame is stored with the sizes it saw; a warm process that meets a new
    size compiles the dynamic frame at once (as the process that stored it did at its
    second size), and every size gives eager's output and shape."""
    driver = tmp_path / "sizes.py"
    driver.write_text(SIZES_DRIVER)
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "cache"), EMBER_FRAME_CACHE="1")
    env.pop("EMBER_COMPILE_DEBUG", None)

    def run(sizes: list[int]) -> dict[str, Any]:
        proc = subprocess.run(
            [sys.executable, str(driver), json.dumps(sizes), backend],
            capture_output=True, text=True, env=env, timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return result

    cold = run([3, 5, 6])
    assert cold == {"events": ["captured", "captured dynamic"], "ok": [True] * 3}
    warm = run([3, 7, 9, 4])
    assert warm == {"events": ["frame cache", "captured dynamic"], "ok": [True] * 4}
    fresh = run([7, 9])  # a process whose first size the stored static frame does not fit
    assert fresh == {"events": ["captured dynamic"], "ok": [True] * 2}


def _synthetic_frame(i: int) -> frame_cache.StoredFrame:
    from ember.ir import GuardSet

    return frame_cache.StoredFrame(GuardSet(()).dumps(), b"code %d" % i, ())


def _code(i: int) -> Any:
    namespace: dict[str, Any] = {}
    exec(f"def f{i}(x):\n    return x + {i}\n", namespace)
    return namespace[f"f{i}"].__code__


def test_stored_frames_per_code_are_capped_oldest_first(tmp_path: Path) -> None:
    store = frame_cache.FrameStore("test", str(tmp_path))
    code = _code(0)
    frames = [_synthetic_frame(i) for i in range(frame_cache.MAX_FRAMES_PER_CODE + 3)]
    for f in frames:
        store.add(code, f)
    assert store.frames(code) == frames[3:]
    fresh = frame_cache.FrameStore("test", str(tmp_path))  # another process reads the file
    assert fresh.frames(code) == frames[3:]


def test_frame_cache_folder_is_capped_least_recently_used_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = frame_cache.FrameStore("test", str(tmp_path))
    codes = [_code(i) for i in range(6)]
    store.add(codes[0], _synthetic_frame(0))
    one = next((tmp_path / "frames").rglob("*.json")).stat().st_size
    # room for three files: each new file evicts the least recently used one
    monkeypatch.setenv("EMBER_FRAME_CACHE_MAX_MB", str(3.5 * one / (1024 * 1024)))
    def written(i: int) -> Path:
        return frame_cache.entry_path(str(tmp_path), "frames", store.key(codes[i]))

    os.utime(written(0), (0, 0))
    for i, code in enumerate(codes[1:], start=1):
        store.add(code, _synthetic_frame(i))
        if written(i).exists():
            os.utime(written(i), (i, i))  # file times are coarse: make the order explicit
        # ... except a file that was just used: reading codes[1] again keeps it
        if i == 3:
            store.clear()
            assert store.frames(codes[1])  # a load marks the file used now
    left = {p.stem for p in (tmp_path / "frames").rglob("*.json")}
    assert len(left) == 3
    assert store.key(codes[5]) in left and store.key(codes[1]) in left
    assert store.key(codes[0]) not in left


ENCODER_DRIVER = textwrap.dedent(
    """
    import json, sys
    import torch
    import ember.dynamo as ed
    from ember.dynamo import api

    events = []
    api.STATE.listeners.append(
        lambda e: events.append(e.reason or "captured") if e.kind == "capture" else None
    )
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    if sys.argv[1] == "hit":
        sys.modules["ember.dynamo.convert_frame"] = None  # capture impossible
    with torch.no_grad():  # eval + no grad + batched: the native fast path op
        out = ed.compile(layer, backend=sys.argv[2])(x)
        want = layer(x)
    print(json.dumps({"events": events, "equal": bool(torch.allclose(out, want, atol=1e-5))}))
    """
)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_transformer_encoder_layer_warm_starts(tmp_path: Path, backend: str) -> None:
    """nn.TransformerEncoderLayer's graph calls F._canonical_mask, F._none_or_dtype and, in
    inference, torch._transformer_encoder_layer_fwd: none was in the IR's allow-list, so the
    frame stayed in its process and every warm start captured it again."""
    driver = tmp_path / "encoder.py"
    driver.write_text(ENCODER_DRIVER)
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "cache"), EMBER_FRAME_CACHE="1")
    env.pop("EMBER_COMPILE_DEBUG", None)

    def run(kind: str) -> dict[str, Any]:
        proc = subprocess.run(
            [sys.executable, str(driver), kind, backend],
            capture_output=True, text=True, env=env, timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return result

    assert run("cold") == {"events": ["captured"], "equal": True}
    assert run("hit") == {"events": ["frame cache"], "equal": True}


IN_PLACE_DRIVER = textwrap.dedent(
    """
    import json, sys
    import torch
    import ember.dynamo as ed
    from ember.dynamo import api

    events = []
    api.STATE.listeners.append(lambda e: events.append(e.reason or "captured"))

    def f(a, b):
        a.add_(torch.tensor(1.0, dtype=torch.float64))
        return b * torch.tensor(2.0, dtype=torch.float64)

    g = ed.compile(f, backend=sys.argv[1])
    y = torch.zeros(3, dtype=torch.float64)
    g(y, y.clone())
    x, ex = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    out, expected = g(x, x), f(ex, ex)
    print(json.dumps({"events": events, "out": out.tolist(), "expected": expected.tolist(),
                      "x": x.tolist(), "ex": ex.tolist()}))
    """
)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_stored_frame_that_changes_an_input_runs_in_order_when_inputs_share_memory(
    tmp_path: Path, backend: str
) -> None:
    # rebuilt from the store, the graph lost the check that runs it in program order when
    # the input it writes is also read as another input: inductor gave [2, 2, 0]
    driver = tmp_path / "driver.py"
    driver.write_text(IN_PLACE_DRIVER)
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "cache"), EMBER_FRAME_CACHE="1")
    runs = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, str(driver), backend], capture_output=True, text=True, env=env, timeout=600
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert "frame cache" in runs[1]["events"], runs[1]
    for run in runs:
        assert run["out"] == run["expected"] == [2.0, 2.0, 2.0], run
        assert run["x"] == run["ex"] == [1.0, 1.0, 1.0], run
