"""torch.compile's ``options=`` names, mapped onto ``InductorOptions`` (one table).

``compile(..., backend="inductor", options={...})`` (ember.dynamo's ``configure``
hook, or torch.compile's keyword) applies them through :func:`configure_options`.
Every key falls in one of three cases:

- ember's own ``InductorOptions`` field (``max_fusion_size``, ``cpu_backend``, ...;
  ``cpp.<field>`` / ``triton.<field>`` for the code generators' own) or a torch
  name with the same meaning (``realize_opcount_threshold``, ``max_autotune``):
  set, silently -- it does what it says;
- a torch name ember has no counterpart for (``shape_padding``,
  ``triton.cudagraphs``, ``trace.*``, ...): accepted, and a warning says what
  ember does instead (the compiled code is still correct);
- anything else: :class:`~ember.inductor.errors.InductorOptionsError`, naming the
  key and every name ember accepts.

``mode=`` values are ``modes.py``'s (ADR 0011). When ember gains a counterpart
for a torch name, its row here becomes a mapping.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from .errors import InductorOptionsError
from .options import CppOptions, InductorOptions, TritonOptions

_AUTOTUNE = "set mode='max-autotune' (the Triton backend tunes kernels and matmuls; C++ kernels are not tuned)"
_NO_PADDING = "ember.inductor does not pad shapes: tensors keep their sizes and strides"
_DEBUG = "set EMBER_COMPILE_DEBUG=1 for ember's debug folder (graphs, IR, generated code)"
_FIXED = "ember.inductor's fusion and scheduling have no such switch"

#: The nested option groups: ``"<name>.<field>"`` keys set ``InductorOptions.<name>``.
_SECTIONS: dict[str, type] = {"cpp": CppOptions, "triton": TritonOptions}


@dataclass(frozen=True, slots=True)
class TorchName:
    """One option name of torch inductor's config: the ember field it sets, or why there is none."""

    #: ``InductorOptions`` field (``"cpp.<field>"`` for a section's); None: no counterpart.
    field: str | None = None
    #: The ember value for the torch value (None from it: leave the field as it is).
    convert: Callable[[Any], Any] | None = None
    #: For names without a counterpart: what ember does instead (said in the warning).
    note: str = ""
    #: Values that already are ember's behaviour: accepted without a warning.
    quiet_values: tuple[Any, ...] = ()


#: torch.compile option names (torch inductor's config module) ember knows.
TORCH_NAMES: dict[str, TorchName] = {
    "max_fusion_size": TorchName("max_fusion_size"),
    "compile_threads": TorchName("compile_threads"),
    "realize_reads_threshold": TorchName("realize_reads_threshold"),
    "realize_opcount_threshold": TorchName("realize_ops_threshold"),
    "fx_graph_cache": TorchName("graph_cache"),
    "max_autotune": TorchName("mode", convert=lambda on: "max-autotune-no-cudagraphs" if on else None),
    "fallback_random": TorchName(
        note="ember.inductor always runs random ops with ATen's generator, as eager does",
        quiet_values=(True,),
    ),
    "shape_padding": TorchName(note=_NO_PADDING),
    "comprehensive_padding": TorchName(note=_NO_PADDING),
    "max_autotune_pointwise": TorchName(note=_AUTOTUNE, quiet_values=(False,)),
    "max_autotune_gemm": TorchName(note=_AUTOTUNE, quiet_values=(False,)),
    "coordinate_descent_tuning": TorchName(note=_AUTOTUNE, quiet_values=(False,)),
    "epilogue_fusion": TorchName(note=_FIXED + " (epilogues are fused when legal)"),
    "aggressive_fusion": TorchName(note=_FIXED),
    "freezing": TorchName(note="ember.inductor does not fold parameters into constants",
                          quiet_values=(False,)),
    "cpp_wrapper": TorchName(note="ember's wrapper is Python calling its kernels",
                             quiet_values=(False,)),
    "cpp.threads": TorchName(note="C++ kernels use OpenMP's threads (torch.set_num_threads, "
                             "OMP_NUM_THREADS)"),
    "triton.cudagraphs": TorchName("mode", convert=lambda on: "reduce-overhead" if on else None),
    "debug": TorchName(note=_DEBUG, quiet_values=(False,)),
    "force_disable_caches": TorchName(
        note="turns off nothing: set EMBER_GRAPH_CACHE=0 / EMBER_AOT_CACHE=0, or point "
        "EMBER_CACHE_DIR at an empty folder", quiet_values=(False,)),
}

#: Prefixes of torch config sections without an ember counterpart (for keys not in a
#: section of ember's own).
TORCH_SECTIONS: dict[str, str] = {
    "trace.": _DEBUG,
    "triton.": "ember's Triton backend has no such setting",
}


def _own_fields() -> dict[str, str]:
    """Every ember key -> its field path (``"cpp.cxx"`` -> ``"cpp.cxx"``)."""
    own = {f.name: f.name for f in fields(InductorOptions) if f.name not in _SECTIONS}
    for section, cls in _SECTIONS.items():
        own.update({f"{section}.{f.name}": f"{section}.{f.name}" for f in fields(cls)})
    return own


def accepted_names() -> list[str]:
    """Every options key ember.inductor accepts, its own and torch's."""
    return sorted(set(_own_fields()) | set(TORCH_NAMES) | {f"{p}*" for p in TORCH_SECTIONS})


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside ember."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("ember."):
        frame, level = frame.f_back, level + 1
    return level


def _resolve(key: str, value: Any) -> tuple[str | None, Any, str | None]:
    """(field path, value to set, warning) for one options entry."""
    own = _own_fields()
    if key in own:
        return own[key], value, None
    known = TORCH_NAMES.get(key)
    if known is not None:
        if known.field is not None:
            new = known.convert(value) if known.convert is not None else value
            return (known.field if new is not None else None), new, None
        return None, None, None if value in known.quiet_values else known.note
    for prefix, note in TORCH_SECTIONS.items():
        if key.startswith(prefix):
            return None, None, note
    raise InductorOptionsError(
        f"ember.inductor: unknown options key {key!r}; ember.inductor accepts "
        f"{', '.join(accepted_names())} (InductorOptions fields, and torch.compile's "
        "names it maps or explains)"
    )


def configure_options(base: InductorOptions, options: Mapping[str, Any]) -> InductorOptions:
    """``base`` with torch.compile's ``options`` applied; warns for each name ember has
    no counterpart for, raises ``InductorOptionsError`` for unknown names."""
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in options.items():
        field, new, note = _resolve(key, value)
        if note is not None:
            warnings.warn(f"ember.inductor: options[{key!r}]={value!r}: {note}", UserWarning,
                          stacklevel=_user_stacklevel())
        if field is None:
            continue
        section, _, name = field.partition(".")
        if name:
            nested.setdefault(section, {})[name] = new
        else:
            top[field] = new
    for section, changes in nested.items():
        top[section] = replace(getattr(base, section), **changes)
    return replace(base, **top) if top else base
