"""Tensors: graph values. Operations on them become FX nodes.

Each tracker holds its FX node and a fake tensor ("example") with the same
metadata, so shapes, dtypes and devices are known while tracing without
computing anything. Metadata reads (``x.shape``, ``x.dtype``) fold to
constants; they are safe because the input's TENSOR_MATCH guard pins them.
A dynamic dimension reads as a :class:`~.sym.SymNodeVariable` instead
(``x.size(0)`` in the graph), so arithmetic on it stays symbolic.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
import torch.fx

from ember.ir import Source
from ember.ir.shapes import ITEM_VALUE_TYPES  # dtypes whose .item() is captured

from ..errors import Unsupported
from ..tensor_subclass import DTENSOR_METHODS, is_dtensor
from .base import VariableTracker
from .constant import ConstantVariable, OpaqueConstantVariable
from .known_scalars import Known, known_value
from .lists import ListVariable, TupleVariable
from .sym import is_symbolic

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx

# Attributes that are metadata: folded to constants.
META_ATTRS = frozenset(
    {
        "shape",
        "dtype",
        "device",
        "ndim",
        "requires_grad",
        "is_cuda",
        "is_cpu",
        "is_meta",
        "is_sparse",
        "is_quantized",
        "is_leaf",
        "layout",
        "is_nested",
        "itemsize",
    }
)
# Attributes that are tensors: become ``getattr`` nodes.
TENSOR_ATTRS = frozenset({"T", "mT", "H", "mH", "real", "imag", "data"})


class TensorVariable(VariableTracker):
    def __init__(
        self,
        node: torch.fx.Node,
        example: torch.Tensor,
        source: Source | None = None,
        cls: type = torch.Tensor,
    ) -> None:
        super().__init__(source)
        self.node = node
        self.example = example
        self.cls = cls
        #: the value of a 0-d int tensor made from ints while tracing (``known_scalars``),
        #: valid while ``example``'s version counter is still ``known_version``
        self.known: Known | None = None
        self.known_version = 0

    def python_type(self) -> type:
        return self.cls

    def describe(self) -> str:
        shape = tuple(self.example.shape)
        return f"tensor `{self.node.name}` {shape}"

    def __repr__(self) -> str:
        return f"Tensor({self.node.name})"

    def truth(self, tx: Tx) -> bool:
        raise Unsupported(
            "data-dependent control flow: the truth value of a tensor "
            f"(`{self.node.name}`) is only known when the graph runs"
        )

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        if name == "__class__":
            return tx.wrap(self.cls, None)
        if name == "shape":
            return size_tuple(tx, self)
        if name in META_ATTRS:
            return ConstantVariable(getattr(self.example, name))
        if name in TENSOR_ATTRS:
            return tx.output.create_op(
                "call_function", getattr, [self, ConstantVariable(name)], {}
            )
        if name in ("placements", "device_mesh") and is_dtensor(self.example):
            # fixed by the inputs' guarded placements and meshes (ADR 0069)
            value = getattr(self.example, name)
            if name == "placements":
                return TupleVariable([OpaqueConstantVariable(p) for p in value])
            return OpaqueConstantVariable(value)
        if name == "grad":
            raise Unsupported("reading `.grad` of a tensor inside a graph is not supported")
        if callable(getattr(torch.Tensor, name, None)):
            return TensorMethodVariable(self, name)
        raise Unsupported(f"tensor attribute `{name}` cannot be traced")

    def store_attr(self, tx: Tx, name: str, value: VariableTracker) -> None:
        raise Unsupported(f"setting tensor attribute `{name}` inside a compiled region")

    def call_method(
        self,
        tx: Tx,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name in DTENSOR_METHODS and is_dtensor(self.example):
            # its mesh and placement arguments bound into one node (ADR 0069)
            return tx.output.create_bound_op(getattr(self.cls, name), [self, *args], kwargs)
        return tensor_method(tx, self, name, args, kwargs)

    def unpack(self, tx: Tx) -> list[VariableTracker]:
        if self.example.dim() == 0:
            raise Unsupported("iteration over a 0-d tensor")
        n = int(self.example.shape[0])  # iterating unrolls: the length is specialized
        return [
            tx.output.create_op("call_function", _getitem, [self, ConstantVariable(i)], {})
            for i in range(n)
        ]

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.load_tensor(self)


_getitem = operator.getitem


class SizeVariable(TupleVariable):
    """``x.shape`` when a dimension is dynamic: a ``torch.Size`` of ints and symbolic sizes."""

    def python_type(self) -> type:
        return torch.Size

    def describe(self) -> str:
        return f"torch.Size of {len(self.items)}"

    def new(self, items: Sequence[VariableTracker]) -> VariableTracker:
        return SizeVariable(list(items))

    def reconstruct_items(self, cg: PyCodegen) -> None:
        cg.load_callable_const(torch.Size)
        super().reconstruct_items(cg)
        cg.call(1)

    def call_method(
        self, tx: Tx, name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if name == "numel" and not args and not kwargs:
            total: VariableTracker = ConstantVariable(1)
            for item in self.items:
                total = tx.binary(operator.mul, total, item)
            return total
        return super().call_method(tx, name, args, kwargs)


def size_item(tx: Tx, tensor: TensorVariable, dim: int) -> VariableTracker:
    """``tensor.size(dim)``: a constant, or a symbolic size read in the graph."""
    value = tensor.example.shape[dim]
    if not is_symbolic(value):
        return ConstantVariable(int(value))
    return tx.output.size_of(tensor, dim % tensor.example.dim())


def size_tuple(tx: Tx, tensor: TensorVariable) -> VariableTracker:
    """``tensor.shape``: a constant ``torch.Size``, or a :class:`SizeVariable`."""
    shape = tensor.example.shape
    if not any(is_symbolic(s) for s in shape):
        return ConstantVariable(torch.Size(int(s) for s in shape))
    return SizeVariable([size_item(tx, tensor, d) for d in range(len(shape))])

# Methods that produce a Python value from tensor *data*: always a break.
DATA_METHODS = frozenset({"item", "tolist", "numpy", "__bool__", "__int__", "__float__"})
#: ... except where the value is known while tracing (``known_scalars``)
KNOWN_READS = frozenset({"item", "tolist", "__int__", "__index__"})


#: the reads :func:`item` captures as graph nodes (``capture_scalar_outputs``, ADR 0060)
SCALAR_READS = frozenset({"item", "__int__", "__float__", "__index__"})


def item(tx: Tx, tensor: TensorVariable, name: str = "item") -> VariableTracker:
    """``tensor.item()`` (``int(t)``, ``float(t)``): a graph node whose value is an unbacked
    symbolic int (``v<N>``) or float (``vf<N>``), as torch.compile captures it (ADR 0060).
    Nothing is guarded on the value, so a new one reuses the graph; a decision on it
    (``if s > 0``) raises ``DataDependentError``, a graph break. A bool or complex value, a
    conversion to the other type (``int`` of a float tensor), a tensor not of one value,
    or ``capture_scalar_outputs=False``: a graph break, as before."""
    pytype = ITEM_VALUE_TYPES.get(tensor.example.dtype)
    want = {"__int__": int, "__index__": int, "__float__": float}.get(name, pytype)
    reason = None
    if not tx.options.capture_scalar_outputs:
        reason = "with `config.capture_scalar_outputs = False`"
    elif pytype is None:
        reason = f"of a {tensor.example.dtype} tensor (only integer and floating values are captured)"
    elif want is not pytype:
        reason = f"as {want.__name__ if want else '?'} of a {tensor.example.dtype} tensor"
    elif is_symbolic(tensor.example.numel()) or tensor.example.numel() != 1:
        reason = "of a tensor that may not have exactly one value"
    if reason is not None:
        shown = "item" if name == "item" else name
        raise Unsupported(
            f"`Tensor.{shown}()` needs the tensor's data, which is only known when the graph "
            f"runs ({reason})"
        )
    mode = tx.output.fake_mode
    saved, mode.item_values = mode.item_values, True
    try:
        return tx.output.create_op("call_method", "item", [tensor], {})
    finally:
        mode.item_values = saved


#: the most values ``tolist`` reads one by one into the graph (a longer list breaks)
TOLIST_LIMIT = 64


def tolist(tx: Tx, tensor: TensorVariable) -> VariableTracker | None:
    """``t.tolist()`` of a 0-d or 1-d integer tensor of static size, at most
    :data:`TOLIST_LIMIT` values: a list of ``t[i].item()`` values (ADR 0060); None otherwise
    (the caller breaks, as before). Floating tensors break, as in torch.compile 2.13
    ("Tensor.tolist() with non-integer tensor")."""
    shape = tensor.example.shape
    if ITEM_VALUE_TYPES.get(tensor.example.dtype) is not int or len(shape) > 1 or any(
            is_symbolic(n) for n in shape):
        return None
    if not shape:
        return item(tx, tensor)
    if int(shape[0]) > TOLIST_LIMIT:
        return None
    values: list[VariableTracker] = []
    for i in range(int(shape[0])):
        element = tensor_method(tx, tensor, "__getitem__", [ConstantVariable(i)], {})
        if not isinstance(element, TensorVariable):
            return None
        values.append(item(tx, element))
    return ListVariable(values)


#: tensor methods handled by modules above this one (``hooks``: ``register_hook``;
#: ``ndarray``: ``numpy``),
#: name -> handler(tx, tensor, args, kwargs)
SPECIAL_METHODS: dict[str, Callable[..., VariableTracker]] = {}


def tensor_method(
    tx: Tx,
    tensor: TensorVariable,
    name: str,
    args: list[VariableTracker],
    kwargs: dict[str, VariableTracker],
) -> VariableTracker:
    special = SPECIAL_METHODS.get(name)
    if special is not None:
        return special(tx, tensor, args, kwargs)
    if name in KNOWN_READS and not args and not kwargs:
        known = known_value(tensor)
        if known is not None:
            return known.materialize(tx.output)
    if name in SCALAR_READS and not args and not kwargs:
        return item(tx, tensor, name)
    if name == "tolist" and not args and not kwargs and tx.options.capture_scalar_outputs:
        listed = tolist(tx, tensor)
        if listed is not None:
            return listed
    if name in DATA_METHODS:
        raise Unsupported(
            f"`Tensor.{name}()` needs the tensor's data, which is only known when the graph runs"
        )
    if name == "size" and not kwargs:
        if args:
            return size_item(tx, tensor, args[0].as_python_constant())
        return size_tuple(tx, tensor)
    if name == "stride" and not kwargs:
        value = tensor.example.stride(*[a.as_python_constant() for a in args])
        if isinstance(value, tuple) and any(is_symbolic(s) for s in value):
            raise Unsupported("reading a symbolic stride of a dynamic tensor")
        if is_symbolic(value):
            raise Unsupported("reading a symbolic stride of a dynamic tensor")
        return ConstantVariable(tuple(int(s) for s in value) if isinstance(value, tuple) else int(value))
    if name in ("numel", "nelement") and not args and not kwargs and is_symbolic(tensor.example.numel()):
        return tx.output.create_op("call_method", "numel", [tensor], {})
    if name in ("dim", "numel", "nelement", "element_size", "is_contiguous", "is_floating_point",
                "is_complex", "get_device", "ndimension") and not kwargs:
        consts = [a.as_python_constant() for a in args]
        return ConstantVariable(getattr(tensor.example, name)(*consts))
    if name == "type" and not args and not kwargs:
        return ConstantVariable(tensor.example.type())
    if name == "__setitem__" and len(args) == 2:
        tx.output.create_op("call_function", operator.setitem, [tensor, *args], {})
        return ConstantVariable(None)
    if name == "__getitem__" and len(args) == 1:
        return tx.output.create_op("call_function", _getitem, [tensor, args[0]], {})
    if name == "backward":
        raise Unsupported("`Tensor.backward()` inside a compiled region is not supported")
    return tx.output.create_op("call_method", name, [tensor, *args], kwargs)


class TensorMethodVariable(VariableTracker):
    """``x.view`` before it is called."""

    def __init__(self, tensor: TensorVariable, name: str) -> None:
        super().__init__(None)
        self.tensor = tensor
        self.name = name

    def describe(self) -> str:
        return f"method `Tensor.{self.name}`"

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return tensor_method(tx, self.tensor, self.name, args, kwargs)
