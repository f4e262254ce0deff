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
