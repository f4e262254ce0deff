"""Direct launches of compiled Triton kernels (``codegen/triton_direct.py``), on CPU.

The key that decides when a compiled kernel is reused is checked against Triton's own
specialization; the launcher's bookkeeping runs with a stand-in for ``JITFunction`` and
its ``CompiledKernel``. The launch itself needs a GPU: ``test_cuda.py`` with
``EMBER_TRITON_DIRECT_LAUNCH=1``.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

from ember.inductor.codegen import triton_direct
from ember.inductor.codegen.triton_configs import Config
from ember.inductor.codegen.triton_runtime import Launcher

triton = pytest.importorskip("triton")


def _samples() -> list[Any]:
    base = torch.zeros(64, dtype=torch.float32)
    tensors: list[Any] = [base[i:] for i in range(6)]  # offsets 0, 4, ... 20 bytes
    tensors += [torch.zeros(8, dtype=d)[1:] for d in (torch.float16, torch.int64, torch.bool)]
    tensors += [torch.zeros(8, dtype=d) for d in (torch.float16, torch.int64, torch.bool, torch.bfloat16)]
    ints = [0, 1, -1, 2, 15, 16, 17, 32, 48, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16,
            -(2**31), -(2**31) - 16, 2**40, 2**63 - 16, 2**63, 2**63 + 16]
    return [*tensors, *ints, True, False, 1.0, 2.5]


def _triton_spec(arg: Any) -> Any:
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    return native_specialize_impl(BaseBackend, arg, False, True, True)


def test_equal_keys_mean_triton_specializes_equally() -> None:
    # a compiled kernel is reused for every argument list with its key: any two Triton
    # would compile differently must have different keys
    samples = _samples()
    for a, b in itertools.combinations(samples, 2):
        ka, kb = triton_direct.spec_key([a]), triton_direct.spec_key([b])
        if ka == kb:
            assert _triton_spec(a) == _triton_spec(b), (a, b, ka)
    assert triton_direct.spec_key([object()]) is None
    assert triton_direct.spec_key([2**64]) is None  # Triton refuses it: its own path raises


class _Kernel:
    """What ``JITFunction.run`` returns: a launcher and what it launches with."""

    def __init__(self, log: list[Any], fail: bool = False) -> None:
        self.log, self.fail = log, fail
        self.function, self.packed_metadata = "cufunction", "metadata"

    def run(self, *args: Any) -> None:
        if self.fail:
            raise TypeError("function takes 12 arguments")
        self.log.append(("direct", args))


class _JitFunction:
    arg_names = ["in_ptr0", "out_ptr0", "xnumel", "XBLOCK"]

    def __init__(self, fail: bool = False) -> None:
        self.log: list[Any] = []
        self.fail = fail

    def __getitem__(self, grid: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> _Kernel:
            self.log.append(("triton", grid, args, kwargs))
            return _Kernel(self.log, self.fail)

        return run


@pytest.fixture
def gpu_standin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_TRITON_DIRECT_LAUNCH", "1")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)


def _launcher(fn: _JitFunction) -> Launcher:
    config = Config((("XBLOCK", 128),), num_warps=4, num_stages=1)
    meta = {"kind": "pointwise", "n_tensors": 2}
    return Launcher("kernel0", fn, meta, [config], torch.device("cuda", 0), None)


def test_a_kernel_is_launched_directly_only_for_arguments_it_was_compiled_for(gpu_standin: None) -> None:
    fn = _JitFunction()
    launcher = _launcher(fn)
    assert launcher.direct is not None
    buf = torch.zeros(300)
    x, out = buf[:256], buf[256:]  # both 16-byte aligned (256 * 4 bytes in)
    launcher(x, out, 256)
    launcher(x, out, 256)
    assert [e[0] for e in fn.log] == ["triton", "direct"]
    # Triton's arguments: grid, stream, function, metadata, no launch hooks, then every
    # parameter in signature order, the constexpr XBLOCK last
    assert fn.log[1][1] == (2, 1, 1, 7, "cufunction", "metadata", None, None, None, x, out, 256, 128)
    launcher(buf[1:257], out, 256)  # misaligned input: compiled anew by Triton
    launcher(x, out, 17)  # another integer specialization
    launcher(x, out, 512)  # same specialization as 256 (divisible by 16): direct
    assert [e[0] for e in fn.log] == ["triton", "direct", "triton", "triton", "direct"]
    assert launcher.direct.direct == 2


def test_a_direct_launch_that_raises_goes_back_to_triton(gpu_standin: None) -> None:
    fn = _JitFunction(fail=True)
    launcher = _launcher(fn)
    x, out = torch.zeros(256), torch.zeros(256)
    launcher(x, out, 256)
    launcher(x, out, 256)  # the direct launch raises: Triton launches instead
    launcher(x, out, 256)
    assert [e[0] for e in fn.log] == ["triton", "triton", "triton"]
    assert launcher.direct is None


def test_launch_hooks_send_launches_through_triton(
    gpu_standin: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triton import knobs

    fn = _JitFunction()
    launcher = _launcher(fn)
    x, out = torch.zeros(256), torch.zeros(256)
    launcher(x, out, 256)
    chain = type(knobs.runtime.launch_enter_hook)()
    chain.add(lambda metadata: None)  # a profiler's hook: Triton must call it
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", chain)
    launcher(x, out, 256)
    assert [e[0] for e in fn.log] == ["triton", "triton"]


def test_off_by_default(monkeypatch: pytest.MonkeyPatch, gpu_standin: None) -> None:
    monkeypatch.delenv("EMBER_TRITON_DIRECT_LAUNCH")
    assert _launcher(_JitFunction()).direct is None
