"""ember.ir.native_build: generated C built once, cached on disk by its source, damaged
libraries rebuilt, compiler errors reported."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ember.ir import native_build

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "gcc")) is None, reason="no C compiler")

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject *answer(PyObject *m, PyObject *unused) { return PyLong_FromLong(%d); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, EMBER_MODULE_NAME, NULL, -1, methods};
PyMODINIT_FUNC EMBER_PYINIT(void) { return PyModule_Create(&def); }
"""


def test_built_once_and_loaded_from_the_cache(tmp_path: Path) -> None:
    src = SOURCE % 41
    assert not native_build.is_cached(src, "test", "ember_test", tmp_path)
    module = native_build.load_extension(src, "test", "ember_test", tmp_path)
    assert module.answer() == 41
    lib = native_build.cached_path(src, "test", "ember_test", tmp_path)
    assert lib.exists() and lib.is_relative_to(tmp_path / "test")
    built = lib.stat().st_mtime_ns
    assert native_build.load_extension(src, "test", "ember_test", tmp_path) is module
    assert native_build.is_cached(src, "test", "ember_test", tmp_path)
    assert lib.stat().st_mtime_ns == built
    other = native_build.load_extension(SOURCE % 42, "test", "ember_test", tmp_path)
    assert other.answer() == 42 and other is not module  # another source, another key


def test_damaged_library_is_rebuilt(tmp_path: Path) -> None:
    src = SOURCE % 7
    lib = native_build.cached_path(src, "test", "ember_dmg", tmp_path)
    name = lib.name.split(".")[0]
    native_build._compile(src, lib, lib.with_suffix(".json"), name, (), False)  # built, not loaded
    assert native_build.is_cached(src, "test", "ember_dmg", tmp_path)
    lib.write_bytes(lib.read_bytes()[:100])
    assert not native_build.is_cached(src, "test", "ember_dmg", tmp_path)
    assert not lib.exists()  # deleted, never loaded


def test_compiler_errors_are_reported(tmp_path: Path) -> None:
    with pytest.raises(native_build.NativeBuildError, match="failed"):
        native_build.load_extension("this is not C", "test", "ember_bad", tmp_path)
