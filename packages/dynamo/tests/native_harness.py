"""Shared setup of the tests that run ember.dynamo's captures under native guard checks:
the skip when no C compiler is there, the environment (native checks from the first call,
strict: a native verdict that differs from the Python one raises, a cache directory of
their own), and the native checks alive now."""

from __future__ import annotations

import gc
import os
import shutil

import pytest

from ember.guards import CheckFn

needs_compiler = pytest.mark.skipif(
    shutil.which(os.environ.get("CC", "gcc")) is None, reason="no C compiler for native guards"
)


def native_env(monkeypatch: pytest.MonkeyPatch, cache_dir: os.PathLike[str] | str) -> None:
    monkeypatch.setenv("EMBER_NATIVE_GUARDS", "eager")
    monkeypatch.setenv("EMBER_STRICT", "1")  # a native verdict that differs raises
    monkeypatch.setenv("EMBER_CACHE_DIR", str(cache_dir))


def native_checks() -> list[CheckFn]:
    return [o for o in gc.get_objects() if type(o) is CheckFn and o.native_fn is not None]
