"""A clean ember.dynamo (cache, config, stance) around every seed test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import ember.dynamo

# The seeds' examples assert what a compile does (timings, logs, counts); frames stored on
# disk by an earlier run would answer them without compiling (the test that saves cache
# artifacts turns the store back on for itself).
os.environ.setdefault("EMBER_FRAME_CACHE", "0")


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    ember.dynamo.reset()
    yield
    ember.dynamo.reset()
    ember.dynamo.config.reset()
    ember.dynamo.set_stance("default")


@pytest.fixture
def gloo_world_of_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A one-process gloo group on a free port (other test processes run such tests too).

    The test's DDP modules are freed before the group is destroyed: a DDP reducer
    destroyed after its group joins gloo's worker thread while holding the GIL, which
    hung a full run once.
    """
    import gc
    import socket

    import torch.distributed as dist

    monkeypatch.setenv("MASTER_ADDR", "localhost")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("MASTER_PORT", str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        gc.collect()
        dist.destroy_process_group()
