"""Errors raised by ember.aotgrad.

Every error says what happened, where (the op or graph node involved), why,
and what to do about it. They all derive from :class:`AotGradError`, so a
caller (the ``aot_eager`` backend, ember.dynamo) can catch one type and fall
back to eager with the message as the logged reason.
"""

from __future__ import annotations


class AotGradError(RuntimeError):
    """Base class of every ember.aotgrad error.

    Example::

        >>> try:
        ...     raise TraceError("aten::foo has no fake-tensor kernel")
        ... except AotGradError as e:
        ...     print(type(e).__name__)
        TraceError
    """


class TraceError(AotGradError):
    """The function could not be traced to an ATen graph.

    Raised, for example, when a tensor that is neither an input nor created
    inside the function reaches an op::

        ember.aotgrad.errors.TraceError: while tracing aten.add.Tensor: argument 1
        is a fake tensor from another trace; pass it as an input instead of
        capturing it
    """


class FunctionalizationError(AotGradError):
    """A mutation in the traced graph cannot be turned into functional ops.

    Example::

        ember.aotgrad.errors.FunctionalizationError: node 'resize__1'
        (aten.resize_.default) changes the shape or strides of its input in
        place; metadata mutations are not supported. Use an out-of-place op
        (e.g. x = x.reshape(...)) instead.
    """


class PartitionError(AotGradError):
    """The joint graph could not be split into a forward and a backward graph.

    Example::

        ember.aotgrad.errors.PartitionError: backward graph is not computable from
        the saved values and tangents: node 'mul_3' needs 'sin_1', which the
        forward does not save
    """


class VerifyError(AotGradError):
    """A graph broke one of aotgrad's invariants (a bug in aotgrad).

    The message names the bad node and prints it with its neighbours::

        ember.aotgrad.errors.VerifyError: forward graph returns 3 values, expected
        2 user outputs + 2 saved values
    """


class DoubleBackwardError(AotGradError):
    """Backward through a compiled backward (double backward) was requested.

    Example::

        ember.aotgrad.errors.DoubleBackwardError: double backward through a
        function compiled by ember.aotgrad is not supported (backward was called
        with create_graph=True). Run that part eagerly, or compute the
        higher-order gradient without compiling.
    """
