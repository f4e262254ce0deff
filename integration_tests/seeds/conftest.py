"""A clean ember.dynamo (cache, config, stance) around every seed test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ember.dynamo


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    ember.dynamo.reset()
    yield
    ember.dynamo.reset()
    ember.dynamo.config.reset()
    ember.dynamo.set_stance("default")
