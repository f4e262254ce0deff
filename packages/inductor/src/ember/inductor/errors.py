"""Errors raised by ember.inductor."""

from __future__ import annotations


class InductorError(Exception):
    """Base class of ember.inductor's errors."""


class LoweringError(InductorError):
    """A graph could not be lowered (malformed input, not a missing lowering).

    Example::

        LoweringError: node 'add_1' (aten.add.Tensor) has no tensor metadata (meta['val']);
        pass example_inputs so ember.inductor can propagate shapes.
    """


class CppCompileError(InductorError):
    """The C++ compiler rejected a generated kernel.

    Example::

        CppCompileError: g++ failed (exit 1) compiling kernel 'kernel0' (/tmp/ember/ab/abcd.cpp):
        <first compiler error lines>. This is a bug in ember.inductor's code generation; please
        report it with the source file. Meanwhile options.force_fallback can avoid the op.
    """


class KernelIndexError(InductorError, IndexError, RuntimeError):
    """A generated kernel met an index out of range (gather, index, index_select, embedding).

    Eager raises here too (IndexError or RuntimeError depending on the op), so this
    is both. Example::

        KernelIndexError: index out of range in generated kernel buf3 (an indirect
        index from gather/index/index_select/embedding was outside its dimension)
    """


class InputMismatchError(InductorError):
    """A compiled graph was called with inputs unlike its example inputs.

    Example::

        InputMismatchError: input 0 has size (4, 8), the graph was compiled for (2, 8).
        Recompile for the new shapes (ember.dynamo does this automatically).
    """


class InductorOptionsError(InductorError, ValueError):
    """An ``options=`` key ember.inductor does not know (neither its own nor torch's).

    Example::

        ember.inductor: unknown options key 'max_fusion'; ember.inductor accepts
        cache_dir, compile_threads, ..., shape_padding, trace.*, triton.* (InductorOptions
        fields, and torch.compile's names it maps or explains)
    """
