"""Subprocess checks: a backend that kills the process is minified, not fatal."""

from __future__ import annotations

import minifier_planted as planted
import pytest
import torch

from ember.minifier import BackendError, State, minify
from ember.minifier.state import compute_nodes
from ember.minifier.worker import Worker, crash_signature


def test_crash_signature_names_the_signal() -> None:
    assert str(crash_signature(-9)) == "process at crash time: killed by SIGKILL"
    assert crash_signature(3).message == "exited with status 3"


@pytest.mark.slow
def test_crashing_backend_is_minified_in_a_subprocess() -> None:
    gm, inputs = planted.small_graph()
    # every crash costs a fresh worker (a torch import): give it time on a loaded machine
    result = minify(gm, inputs, BackendError(planted.crashes_on_sigmoid), isolate=True,
                    progress=False, time_budget=600)
    assert not result.budget_exhausted
    assert result.failure.signature == crash_signature(-9)
    assert [n.target for n in compute_nodes(result.gm.graph)] == [torch.ops.aten.sigmoid.default]


@pytest.mark.slow
def test_worker_survives_a_crash_and_keeps_checking() -> None:
    gm, inputs = planted.small_graph()
    state = State(gm, tuple(inputs))
    worker = Worker()
    try:
        crashed = worker.check(BackendError(planted.crashes_on_sigmoid), state)
        assert crashed.failed and crashed.signature == crash_signature(-9)
        raised = worker.check(BackendError(planted.raises_on_sigmoid), state)
        assert raised.failed and raised.signature is not None
        assert raised.signature.exc_type == "builtins.NotImplementedError"
        assert not worker.check(BackendError(planted.healthy), state).failed
    finally:
        worker.close()
