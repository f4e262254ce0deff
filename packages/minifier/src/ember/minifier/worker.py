"""Checks in a worker subprocess, so a backend that kills the process is a failure, not the end.

One long-lived worker (``python -m ember.minifier.worker``) reads a pickled
``(failure, graph, inputs)`` per check from stdin and answers a `Verdict` on
its stdout (length-prefixed; the backend's own prints go to stderr). When it
dies (segfault, abort, ``os._exit``) the check reports a ``crash`` signature
and the next check starts a fresh worker. The failure must pickle: a backend
by name or an importable module-level callable. The worker gets this process's
``sys.path``, so callables from scripts and test directories import there too.
"""

from __future__ import annotations

import io
import os
import select
import signal
import struct
import subprocess
import sys
from typing import IO, Any

import torch
import torch.fx as fx

from ember.minifier.failure import BackendError, Failure, Signature, Verdict
from ember.minifier.state import State, detach_attributes, fresh_module

_LEN = struct.Struct("<Q")


def _pack(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _unpack(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)


def portable(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm`` that pickles: node type annotations (which name arbitrary
    user types) are dropped; the computation is unchanged."""
    out = fresh_module(gm)
    for node in out.graph.nodes:
        node.type = None
    out.recompile()
    return out


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    chunks = []
    while n:
        chunk = stream.read(n)
        if not chunk:
            raise EOFError("worker pipe closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv(stream: IO[bytes]) -> bytes:
    (n,) = _LEN.unpack(_read_exact(stream, _LEN.size))
    return _read_exact(stream, n)


def _send(stream: IO[bytes], data: bytes) -> None:
    stream.write(_LEN.pack(len(data)) + data)
    stream.flush()


def serve() -> None:
    """The worker's loop: one message in, one verdict out, until an empty message or EOF."""
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the backend's prints must not corrupt the protocol
    inp = sys.stdin.buffer
    while True:
        try:
            data = _recv(inp)
        except EOFError:
            return
        if not data:
            return
        failure, gm, inputs = _unpack(data)
        detach_attributes(gm)
        try:
            verdict = failure.check(State(gm, tuple(inputs)))
        except Exception as exc:
            verdict = Verdict(False, f"the check itself raised {type(exc).__name__}: {exc}")
        _send(proto, _pack(verdict))


def crash_signature(exitcode: int | None) -> Signature:
    """How a dead worker is described: by signal name or exit code."""
    if exitcode is not None and exitcode < 0:
        try:
            what = f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            what = f"killed by signal {-exitcode}"
    else:
        what = f"exited with status {exitcode}"
    return Signature("crash", "process", what)


class Worker:
    """A restartable checking subprocess; ``check`` has the in-process checker's signature."""

    def __init__(self, timeout: float = 300.0) -> None:
        self.timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "ember.minifier.worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
            )
        return self._proc

    def check(self, failure: Failure, state: State) -> Verdict:
        proc = self._ensure()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            _send(proc.stdin, _pack((failure, portable(state.gm), list(state.inputs))))
            ready, _, _ = select.select([proc.stdout], [], [], self.timeout)
            if not ready:
                self._stop()
                return Verdict(False, f"the check timed out after {self.timeout:g}s")
            verdict: Verdict = _unpack(_recv(proc.stdout))
            return verdict
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = proc.wait(10)
            sig = crash_signature(code)
            self._stop()
            wanted = isinstance(failure, BackendError) and failure.signature in (None, sig)
            return Verdict(wanted, str(sig), sig)

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()

    def close(self) -> None:
        """Stop the worker (politely first)."""
        proc = self._proc
        if proc is not None and proc.poll() is None and proc.stdin is not None:
            try:
                _send(proc.stdin, b"")
                proc.wait(10)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        self._stop()


if __name__ == "__main__":
    serve()
