"""CompileProfiler as the FAQ uses it: a backend, and a context manager that sets the
cache limit to 1 so every guard failure is recorded."""

from __future__ import annotations

import warnings

import torch

import ember.dynamo
from ember.dynamo import CompileProfiler


def test_context_manager_sets_the_cache_limit_to_one_and_restores_it() -> None:
    before = ember.dynamo.config.cache_size_limit
    with CompileProfiler() as prof:
        assert ember.dynamo.config.cache_size_limit == 1
        compiled = ember.dynamo.compile(lambda x: x * 2, backend=prof)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the cache limit it set
            for n in (2, 3, 4):
                torch.testing.assert_close(compiled(torch.ones(n)), torch.full((n,), 2.0))
    assert ember.dynamo.config.cache_size_limit == before
    report = prof.report()
    assert "Graphs compiled: 1" in report
    # the first guard failure is the reason; from then on that code runs eagerly
    assert "Cache limit hits: 1" in report
    assert "L['x'].size()[0] was 3, the graph assumed 2" in report
