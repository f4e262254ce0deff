"""torch.nn leaf modules as data, and rebuilt without calling user code.

A ``call_module`` node runs a module such as ``Linear``, ``Conv2d``,
``BatchNorm2d`` or ``MultiheadAttention``. :func:`module_spec` records the
module's class (only classes defined in ``torch.nn.modules``), its plain
attributes (anything :func:`~ember.ir.values.encode_value` can write), its
parameter and buffer slots, and its child modules. :func:`build_module`
rebuilds it as ``cls.__new__(cls)`` + ``nn.Module.__init__`` + attributes +
registered tensors: the class's ``__init__`` never runs, and the class is
looked up in modules torch has already imported, never imported by name.

Attributes holding an allow-listed function (``TransformerEncoderLayer.activation
= F.relu``) are stored as target strings. Attributes derived from the tensors
(RNN ``_flat_weights``) are not stored; they are rebuilt by the class's own
``_init_flat_weights`` once the parameters are registered.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ember.ir.errors import FormatError, UnsupportedGraphError
from ember.ir.graph import ModuleSpec, TensorMeta
from ember.ir.targets import module_class_name, resolve_module_class, resolve_target, target_name
from ember.ir.values import encode_value

_BASE_KEYS = frozenset(nn.Module().__dict__) | {"_parameters", "_buffers", "_modules", "training"}
_RNN_DERIVED = frozenset({"_flat_weights", "_flat_weight_refs"})


def _derived(module: nn.Module, key: str) -> bool:
    return isinstance(module, nn.RNNBase) and key in _RNN_DERIVED


def module_spec(
    module: nn.Module,
    path: str,
    params: dict[str, TensorMeta],
    buffers: dict[str, TensorMeta],
    tensors: dict[str, torch.Tensor],
) -> ModuleSpec:
    """Describe ``module`` (found at ``path``), adding its tensors to the tables."""
    cls = module_class_name(type(module), node=path)
    attrs: dict[str, object] = {}
    function_attrs: dict[str, str] = {}
    for key, value in module.__dict__.items():
        if key in _BASE_KEYS or _derived(module, key):
            continue
        if callable(value) and not isinstance(value, (type, nn.Module)):
            try:
                function_attrs[key] = target_name(value, node=path)
            except UnsupportedGraphError as e:
                raise UnsupportedGraphError(
                    f"module {path!r} ({cls}) has function attribute {key!r}: {e.problem}", node=path, field=f"attrs.{key}"
                ) from None
            continue
        try:
            encode_value(value)
        except FormatError as e:
            raise UnsupportedGraphError(
                f"module {path!r} ({cls}) has attribute {key!r} that cannot be stored: {e.problem}",
                node=path,
                field=f"attrs.{key}",
            ) from None
        attrs[key] = value
    param_slots: dict[str, str | None] = {}
    for name, p in module._parameters.items():
        full = f"{path}.{name}"
        param_slots[name] = None if p is None else full
        if p is not None:
            params[full] = TensorMeta.of(p)
            tensors[full] = p
    buffer_slots: dict[str, str | None] = {}
    for name, b in module._buffers.items():
        full = f"{path}.{name}"
        buffer_slots[name] = None if b is None else full
        if b is not None:
            buffers[full] = TensorMeta.of(b)
            tensors[full] = b
    children = {
        name: module_spec(child, f"{path}.{name}", params, buffers, tensors)
        for name, child in module._modules.items()
        if child is not None
    }
    return ModuleSpec(
        cls=cls,
        training=module.training,
        attrs=attrs,
        function_attrs=function_attrs,
        params=param_slots,
        buffers=buffer_slots,
        non_persistent_buffers=tuple(sorted(module._non_persistent_buffers_set)),
        children=children,
    )


def build_module(
    spec: ModuleSpec,
    path: str,
    tensors: Mapping[str, torch.Tensor],
    metas: Mapping[str, TensorMeta],
) -> nn.Module:
    """Rebuild a module from its spec without running the class's ``__init__``."""
    cls = resolve_module_class(spec.cls, node=path)
    module = cls.__new__(cls)
    nn.Module.__init__(module)
    module.training = spec.training
    for key, value in spec.attrs.items():
        if key in _BASE_KEYS:
            raise FormatError(f"attribute {key!r} is reserved by nn.Module", node=path, field=f"attrs.{key}")
        module.__dict__[key] = _copy(value)
    for key, target in spec.function_attrs.items():
        if key in _BASE_KEYS:
            raise FormatError(f"attribute {key!r} is reserved by nn.Module", node=path, field=f"function_attrs.{key}")
        module.__dict__[key] = resolve_target(target, node=path)
    for name, full in spec.params.items():
        if full is None:
            module._parameters[name] = None
            continue
        t = _tensor(full, tensors, path)
        if not isinstance(t, nn.Parameter):
            t = nn.Parameter(t, requires_grad=metas[full].requires_grad if full in metas else t.requires_grad)
        module._parameters[name] = t
    for name, full in spec.buffers.items():
        module._buffers[name] = None if full is None else _tensor(full, tensors, path)
    module._non_persistent_buffers_set = set(spec.non_persistent_buffers)
    for name, child in spec.children.items():
        module._modules[name] = build_module(child, f"{path}.{name}", tensors, metas)
    if isinstance(module, nn.RNNBase):
        module._init_flat_weights()
    return module


def _tensor(full: str, tensors: Mapping[str, torch.Tensor], path: str) -> torch.Tensor:
    t = tensors.get(full)
    if t is None:
        raise FormatError(
            f"weights missing for {full!r}: the graph IR holds no tensor data (load it with "
            "ember.ir.load(path) or attach weights with GraphIR.with_tensors)",
            node=path,
            field="tensors",
        )
    return t


def _copy(value: object) -> object:
    """Fresh containers so rebuilt modules never share mutable attributes."""
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value
