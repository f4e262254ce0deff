"""The fake tensor mode every ember stage traces with: torch's, with eager's strides where
torch's meta kernel gives others.

Fake tensors carry the sizes and strides the real op would give, and ember lays out
buffers and graph outputs by them. Where a meta kernel's strides differ from the CPU
kernel's, the compiled program returns a tensor laid out otherwise than eager (and a
later ``view`` or layout-preserving op such as ``sort`` follows the wrong layout):

- ``aten.index.Tensor`` (``x[idx]``): the meta kernel returns a contiguous result;
  the CPU kernel is a ``TensorIterator`` over the source restrided to the result's
  shape and the index tensors, so the result follows their layout (fuzz seed 4208:
  ``x[x.clamp(0, 2)]`` of a transposed ``x`` has strides ``(3, 9, 1)`` in eager).

:class:`EagerLayoutFakeMode` computes such an op's fake result as usual, then lays it
out as eager would (a fresh fake tensor with eager's strides). Each stage that makes
a ``FakeTensorMode`` makes this one, so capture, tracing, functionalization and
lowering agree.

It also makes the checks eager's kernel makes and the meta kernel does not, so a
program eager rejects is rejected while it is traced (and runs eagerly, raising as eager
does) instead of compiling into code that returns something:

- ``index_add``: the source's sizes outside ``dim`` must be the destination's (fuzz
  seeds 45 and 170 on grown inputs: ``v.index_add_(0, idx, torch.ones(3, 5))`` on a
  ``v`` of 7 columns). With symbolic sizes the comparison is a guard.
- ``index_put``: the values must broadcast to the shape ``self[indices]`` has (fuzz
  seed 356 on grown inputs: ``torch.ones(2, 3)`` put at rows of a 7-column tensor).

And it counts the writes of the in-place foreach ops (``_foreach_add_``...) in the
written tensors' version counters, as eager does and torch's fake tensors do not:
capture finds the inputs a graph writes by their versions (fuzz seed 3 on grown inputs:
a foreach write to one input, read through another input sharing its memory, compiled
as if nothing were written).

And it gives results whose size depends on tensor data an *unbacked* size (ADR 0046):
``aten.nonzero`` (which boolean-mask indexing ``x[mask]`` calls) and ``aten.masked_select``
return fake tensors of ``u0`` rows, a fresh symbol of an ember ``ShapeEnv`` (the one the
arguments' symbolic sizes use, else :attr:`EagerLayoutFakeMode.unbacked_env`), where
torch's fake mode without its own ShapeEnv raises ``DynamicOutputShapeException``. The
count of a mask is remembered on the mask (until it is written), so ``x[m]`` and ``y[m]``
have the same size, as eager guarantees. ``aten._local_scalar_dense`` (``t.item()``) of
an integer or floating fake tensor returns an unbacked *value* (``v<N>``, ``vf<N>``; ADR
0060) of the same environment, where torch's fake mode raises
``DataDependentOutputException``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import _disable_current_modes

from ember.ir.shapes.shape_env import DataDependentError, ShapeEnv

aten = torch.ops.aten


class EagerLayoutFakeMode(FakeTensorMode):  # type: ignore[no-untyped-call]
    """``FakeTensorMode`` whose results have eager's strides for the ops listed above."""

    #: the shape environment unbacked sizes come from when no argument has symbolic sizes
    #: (made on first use when its owner set none)
    unbacked_env: ShapeEnv | None = None
    #: ``_local_scalar_dense`` (``.item()``) gives an unbacked value (ADR 0060); off, it raises
    #: as torch's fake mode does (ember.dynamo turns it on only for a ``.item()`` it captures,
    #: so an op reading a 0-d tensor's value inside, ``torch.arange(t)``, breaks as before)
    item_values: bool = True
    #: unbacked sizes to give out again, in order, instead of fresh ones (``rerun_like``)
    _reuse: list[Any] | None = None

    @contextlib.contextmanager
    def rerun_like(self, old: object) -> Iterator[None]:
        """Within: the data-dependent sizes ops make are ``old``'s (the value the op gave when
        it was first traced), so a pass that runs a traced op again on new fake tensors
        (functionalization) keeps the symbols the rest of the trace refers to."""
        sizes = [n for t in pytree.tree_leaves(old)
                 for n in (t.shape if isinstance(t, torch.Tensor) else (t,)) if _is_unbacked(n)]
        saved, self._reuse = self._reuse, sizes
        try:
            yield
        finally:
            self._reuse = saved

    def dispatch(
        self,
        func: Any,
        types: Sequence[type],
        args: Sequence[object] = (),
        kwargs: Mapping[str, object] | None = None,
    ) -> object:
        if func in _INDEX_ADD and len(args) >= 4:
            _check_index_add(args[0], args[1], args[3])
        elif func in _INDEX_PUT and len(args) >= 3:
            self._check_index_put(types, args[0], args[1], args[2])
        elif func is aten.nonzero.default and len(args) == 1 and isinstance(args[0], FakeTensor):
            return self._nonzero(types, args[0])
        elif func is aten.masked_select.default and len(args) == 2:
            return self._masked_select(types, args[0], args[1])
        elif (func is aten._local_scalar_dense.default and len(args) == 1 and self.item_values
              and isinstance(args[0], FakeTensor) and args[0].dtype in ITEM_VALUE_TYPES):
            return self._item(args[0])
        elif func is aten._assert_scalar.default and args and _is_value(args[0]):
            _assume(args[0])  # ``torch._check(k >= 0)`` of an ``.item()`` value
            return None
        elif func is aten.slice.Tensor and len(args) >= 1 and isinstance(args[0], FakeTensor):
            sliced = self._slice_by_value(types, *args, **(kwargs or {}))
            if sliced is not None:
                return sliced
        out = super().dispatch(func, types, args, kwargs or {})
        if args and _foreach_inplace(func):
            _count_writes(args[0])
        if func is aten.index.Tensor and isinstance(out, FakeTensor):
            stride = index_strides(args[0], args[1]) if len(args) > 1 else None
            if stride is not None and tuple(stride) != tuple(out.stride()):
                return super().dispatch(
                    aten.empty_strided.default, types, (out.shape, stride),
                    {"dtype": out.dtype, "device": out.device},
                )
        return out

    # -- data-dependent sizes ---------------------------------------------------------
    def _env(self, tensors: Sequence[Any]) -> ShapeEnv:
        for t in tensors:
            if isinstance(t, torch.Tensor):
                for size in t.shape:
                    env = getattr(getattr(size, "node", None), "env", None)
                    if isinstance(env, ShapeEnv):
                        return env
        if self.unbacked_env is None:
            self.unbacked_env = ShapeEnv()
        return self.unbacked_env

    def _count(self, mask: FakeTensor) -> Any:
        """The number of nonzero values of ``mask``: 0 for an empty mask, else an unbacked
        size, the same one for every op reading the same mask until it is written."""
        memo = getattr(mask, "_ember_nonzero", None)
        if memo is not None and memo[0] == mask._version:
            return memo[1]
        numel = mask.numel()
        if type(numel) is int and numel == 0:
            count: Any = 0
        elif self._reuse:
            count = self._reuse.pop(0)
        else:
            env = self._env([mask])
            upper = numel if type(numel) is int else None
            count = env.sym_int(env.new_unbacked(upper))
            self.cache_enabled = False  # torch's dispatch cache keys on its own ShapeEnv
        mask._ember_nonzero = (mask._version, count)  # type: ignore[attr-defined]
        return count

    def _nonzero(self, types: Sequence[type], mask: FakeTensor) -> object:
        count = self._count(mask)
        return super().dispatch(
            aten.empty_strided.default, types, ((count, mask.dim()), (1, count)),
            {"dtype": torch.int64, "device": mask.device},
        )

    def _masked_select(self, types: Sequence[type], src: Any, mask: Any) -> object:
        if not isinstance(src, FakeTensor) or not isinstance(mask, FakeTensor):
            return super().dispatch(aten.masked_select.default, types, (src, mask), {})
        if mask.dtype != torch.bool:
            raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {mask.dtype}")
        shape = torch.broadcast_shapes(src.shape, mask.shape)  # type: ignore[no-untyped-call]
        if tuple(shape) == tuple(mask.shape):
            count = self._count(mask)  # one value per True of the mask
        elif any(type(n) is int and n == 0 for n in shape):
            count = 0
        elif self._reuse:
            count = self._reuse.pop(0)
        else:
            env = self._env([src, mask])
            count = env.sym_int(env.new_unbacked())
            self.cache_enabled = False
        return super().dispatch(
            aten.empty_strided.default, types, ((count,), (1,)),
            {"dtype": src.dtype, "device": src.device},
        )

    def _item(self, t: FakeTensor) -> object:
        """``t.item()``: an unbacked value (ADR 0060), ``v<N>`` for an integer tensor and
        ``vf<N>`` for a floating one; a fresh symbol per read (the tensor may change)."""
        numel = t.numel()
        if type(numel) is int and numel != 1:
            raise RuntimeError(f"a Tensor with {numel} elements cannot be converted to Scalar")
        pytype = ITEM_VALUE_TYPES[t.dtype]
        if self._reuse:
            return self._reuse.pop(0)
        env = self._env([t])
        self.cache_enabled = False
        return env.sym_value(env.new_unbacked_value(pytype), pytype)

    def _slice_by_value(self, types: Sequence[type], t: Any, dim: Any = 0,
                        start: Any = None, end: Any = None, step: Any = 1) -> object:
        """``t[:k]`` with an end ``k`` read from data (an unbacked value, ADR 0060; torch's
        fake kernel would make a fresh unbacked size from its own ShapeEnv): the result's
        size along ``dim`` is a fresh unbacked size ``u<N>`` (``0 <= u<N> <= size``), as in
        torch; the op's result gives its value at run time. None where the slice is not
        of that kind (torch's kernel decides it). A start read from data raises
        :class:`DataDependentError` (the storage offset would depend on data)."""
        if not (_is_value(end) or _is_value(start)) or t.dim() == 0:
            return None
        if _is_value(start) or _is_value(step) or step != 1:
            raise DataDependentError(getattr(getattr(start, "node", None), "expr", start))
        if start is not None and not (type(start) is int and start == 0):
            return None
        dim = dim % t.dim()
        size = t.shape[dim]
        if self._reuse:
            new = self._reuse.pop(0)
        else:
            env = self._env([t, end])
            new = env.sym_int(env.new_unbacked(size if type(size) is int else None))
            self.cache_enabled = False
        sizes = list(t.shape)
        sizes[dim] = new
        return super().dispatch(aten.as_strided.default, types,
                                (t, sizes, list(t.stride()), t.storage_offset()), {})

    def _check_index_put(self, types: Sequence[type], dest: Any, indices: Any, values: Any) -> None:
        """Eager's ``index_put`` check (meta kernels skip it): ``values`` broadcasts to the
        shape of ``dest[indices]``."""
        if not isinstance(values, torch.Tensor) or not isinstance(dest, torch.Tensor):
            return
        if isinstance(indices, (list, tuple)) and any(
            isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) for t in indices
        ):
            return  # a mask: the shape depends on its data; the kernel checks it at run time
        try:
            target = super().dispatch(aten.index.Tensor, types, (dest, indices), {})
        except Exception:  # masks (a data-dependent shape), or indices eager rejects itself
            return
        if not isinstance(target, torch.Tensor):
            return
        want, have = list(target.shape), list(values.shape)
        try:
            fits = len(have) <= len(want) and all(
                h == 1 or h == w for h, w in zip(reversed(have), reversed(want))
            )
        except DataDependentError:
            return  # sizes that depend on data (indices from nonzero): the kernel checks them
        if not fits:
            raise RuntimeError(
                f"shape mismatch: value tensor of shape {have} cannot be broadcast to indexing "
                f"result of shape {want}"
            )


#: dtypes whose ``.item()`` is an unbacked value, and its Python type (bool and complex: not)
ITEM_VALUE_TYPES: dict[torch.dtype, type] = {
    **dict.fromkeys((torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64), int),
    **dict.fromkeys((torch.float16, torch.bfloat16, torch.float32, torch.float64), float),
}


def _assume(cond: Any) -> None:
    """``torch._check(cond)`` of an unbacked value (ADR 0060): a lower bound of one int value
    (``k >= c``, ``k > c``, ``c <= k``; ``torch._check_is_size(k)`` is ``k >= 0``) becomes its
    range, so tracing decides relations it implies (``new_zeros(k)`` asks ``k >= 0``); the
    graph keeps the check (``_assert_scalar``), which raises at run time as eager does. Any
    other condition raises :class:`DataDependentError` (capture breaks the graph there)."""
    import sympy
    node = cond.node
    env, expr = node.env, node.expr
    if env.static_value(expr) is True:
        return
    rels = (sympy.GreaterThan, sympy.StrictGreaterThan, sympy.LessThan, sympy.StrictLessThan)
    if isinstance(expr, rels):
        diff = sympy.expand(expr.lhs - expr.rhs)  # diff >= 0 / > 0 (<= 0 / < 0 for Le/Lt)
        if isinstance(expr, (sympy.LessThan, sympy.StrictLessThan)):
            diff = -diff
        syms = list(diff.free_symbols)
        if len(syms) == 1 and env.unbacked_values.get(syms[0]) is int:
            sym = syms[0]
            coeff = diff.coeff(sym)
            rest = sympy.expand(diff - coeff * sym)
            if coeff == 1 and rest.is_Integer:
                strict = isinstance(expr, (sympy.StrictGreaterThan, sympy.StrictLessThan))
                low = int(-rest) + (1 if strict else 0)
                env.lower[sym] = max(low, env.lower.get(sym, low))
                return
    raise DataDependentError(expr)


def _is_value(v: object) -> bool:
    """Whether ``v`` is a number read from tensor data (an unbacked value, ADR 0060)."""
    node = getattr(v, "node", None)
    env = getattr(node, "env", None)
    return isinstance(env, ShapeEnv) and any(
        s in env.unbacked_values for s in getattr(node.expr, "free_symbols", ()))  # type: ignore[union-attr]


def _is_unbacked(size: object) -> bool:
    node = getattr(size, "node", None)
    env = getattr(node, "env", None)
    return isinstance(env, ShapeEnv) and env.has_unbacked(node.expr)  # type: ignore[union-attr]


@functools.cache
def _foreach_inplace(func: Any) -> bool:
    """``aten._foreach_<op>_``: writes the tensors of its first list argument."""
    name = getattr(getattr(func, "overloadpacket", None), "__name__", "")
    return name.startswith("_foreach_") and name.endswith("_")


def _count_writes(tensors: Any) -> None:
    for t in tensors if isinstance(tensors, (list, tuple)) else ():
        if isinstance(t, torch.Tensor):
            with contextlib.suppress(RuntimeError):  # an inference tensor: no version counter
                torch.autograd.graph.increment_version(t)


_INDEX_PUT = frozenset({aten.index_put.default, aten.index_put_.default,
                        aten._index_put_impl_.default})
_INDEX_ADD = frozenset({aten.index_add.default, aten.index_add_.default, aten.index_add.out})


def _check_index_add(self: Any, dim: Any, source: Any) -> None:
    """Eager's ``index_add`` shape check (its CPU and CUDA kernels make it, the meta kernel
    does not): the sizes outside ``dim``, dims counted, must be equal."""
    if not isinstance(self, torch.Tensor) or not isinstance(source, torch.Tensor):
        return
    if not isinstance(dim, int):
        return
    def outside(t: torch.Tensor) -> list[Any]:
        sizes = list(t.shape)
        if sizes:
            del sizes[dim % len(sizes)]
        return sizes
    mine, theirs = outside(self), outside(source)
    if len(mine) != len(theirs) or any(a != b for a, b in zip(mine, theirs)):
        raise RuntimeError(
            "source tensor shape must match self tensor shape, excluding the specified "
            f"dimension. Got self.shape = {list(self.shape)} source.shape = {list(source.shape)}"
        )


def _ints(values: Sequence[Any]) -> list[int] | None:
    return [int(v) for v in values] if all(type(v) is int for v in values) else None


def index_strides(self: Any, indices: Any) -> list[int] | None:
    """The strides of eager's ``aten.index.Tensor(self, indices)`` result on CPU (None where
    they are not computed here: symbolic sizes, masks, no index, an empty result).

    This follows ATen's ``make_info``/``AdvancedIndex`` (indices broadcast together, the
    indexed dims moved to the front when not adjacent, the source restrided to the
    result's shape with stride 0 in the indexed dims, each index reshaped with size-1
    dims around it) and ``TensorIterator``'s output layout (``compute_strides``,
    ``reorder_dimensions``, ``compatible_stride``).
    """
    if not isinstance(self, torch.Tensor) or not isinstance(indices, (list, tuple)):
        return None
    if self.device.type != "cpu":
        return None
    idx = list(indices)
    defined = [t for t in idx if t is not None]
    if not defined or not all(isinstance(t, torch.Tensor) for t in defined):
        return None
    if any(t.dtype in (torch.bool, torch.uint8) for t in defined):
        return None  # masks: a data-dependent shape, never traced
    src_size, src_stride = _ints(self.shape), _ints(self.stride())
    if src_size is None or src_stride is None or len(idx) > len(src_size):
        return None
    metas = []
    for t in defined:
        size, stride = _ints(t.shape), _ints(t.stride())
        if size is None or stride is None:
            return None
        metas.append((size, stride))
    # broadcast the indices together (expand: stride 0 where a dim is new or of size 1)
    ndim_i = max(len(s) for s, _ in metas)
    repl = [1] * ndim_i
    for size, _ in metas:
        for k, n in enumerate(size):
            d = ndim_i - len(size) + k
            if n != 1:
                if repl[d] not in (1, n):
                    return None  # eager raises: not broadcastable
                repl[d] = n
    expanded: list[list[int]] = []
    for size, stride in metas:
        out = [0] * ndim_i
        for k, (n, st) in enumerate(zip(size, stride)):
            d = ndim_i - len(size) + k
            out[d] = st if n == repl[d] else 0
        expanded.append(out)
    idx_strides: list[list[int] | None] = []
    it = iter(expanded)
    for t in idx:
        idx_strides.append(None if t is None else next(it))
    idx_strides += [None] * (len(src_size) - len(idx_strides))
    positions = [d for d, s in enumerate(idx_strides) if s is not None]
    if positions != list(range(positions[0], positions[-1] + 1)):
        # not adjacent: self and the indices are transposed so that the indexed dims lead
        order = positions + [d for d in range(len(src_size)) if d not in positions]
        src_size = [src_size[d] for d in order]
        src_stride = [src_stride[d] for d in order]
        idx_strides = [idx_strides[d] for d in order]
    before = next(d for d, s in enumerate(idx_strides) if s is not None)
    n_indexed = sum(1 for s in idx_strides if s is not None)
    after = len(src_size) - before - n_indexed
    shape = src_size[:before] + repl + src_size[before + n_indexed:]
    if any(n == 0 for n in shape):
        return None
    operands = [src_stride[:before] + [0] * len(repl) + src_stride[before + n_indexed:]]
    for s in idx_strides:
        if s is not None:
            operands.append(_reshaped_strides(repl, s, before, after))
    # compute_strides: a size-1 dim broadcast to a larger one has stride 0
    op_sizes = [shape] + [[1] * before + repl + [1] * after] * (len(operands) - 1)
    op_sizes[0] = shape
    strides = [
        [0 if n == 1 and shape[d] != 1 else st for d, (n, st) in enumerate(zip(sizes, ops))]
        for sizes, ops in zip(op_sizes, operands)
    ]
    return _iterator_output_strides(shape, strides)


def _reshaped_strides(repl: list[int], stride: list[int], before: int, after: int) -> list[int]:
    """Strides of ``index.reshape([1] * before + repl + [1] * after)`` (ATen's
    ``reshape_indexer``) for an index expanded to ``repl`` with ``stride``."""
    with _disable_current_modes():
        meta = torch.empty_strided(repl, stride, device="meta")
        return list(meta.reshape([1] * before + repl + [1] * after).stride())


def _iterator_output_strides(shape: list[int], strides: list[list[int]]) -> list[int]:
    """The strides ``TensorIterator`` gives a new output over ``shape`` with inputs laid
    out by ``strides`` (``reorder_dimensions`` then ``compatible_stride``)."""
    ndim = len(shape)
    if ndim <= 1:
        return [1] * ndim

    def should_swap(dim0: int, dim1: int) -> int:
        for st in strides:
            s0, s1 = st[dim0], st[dim1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[dim0] > shape[dim1]:
                return 1
        return 0

    perm = list(range(ndim - 1, -1, -1))  # perm[0] is the fastest-moving dim
    for i in range(1, ndim):
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            c = should_swap(perm[dim0], perm[dim1])
            if c > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif c < 0:
                break
    out = [0] * ndim
    step = 1
    for d in perm:
        out[d] = step
        step *= shape[d]
    return out


__all__ = ["ITEM_VALUE_TYPES", "EagerLayoutFakeMode", "index_strides"]


def symbolic_dispatch(symbolic: bool) -> contextlib.AbstractContextManager[Any]:
    """Where sizes are symbolic: torch's Python dispatcher, which runs ops' Python meta
    kernels and decompositions; they read sizes as symbols, where composite C++ kernels
    (``constant_pad_nd``: ``F.pad``) read them as ints, specializing every dynamic size
    they touch (a recompile per size). Static traces do without it (it costs tracing
    time)."""
    if not symbolic:
        return contextlib.nullcontext()
    from torch._dispatch.python import enable_python_dispatcher

    return enable_python_dispatcher()


def has_symbols(values: Any) -> bool:
    """Whether a symbolic size, or a tensor with one, is among ``values`` (nested)."""
    sym = (torch.SymInt, torch.SymFloat, torch.SymBool)
    for v in torch.utils._pytree.tree_leaves(values):
        if isinstance(v, sym):
            return True
        if isinstance(v, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in v.shape):
            return True
    return False
