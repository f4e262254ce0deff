"""torch.compile's options= names (torch_options.py): mapped onto InductorOptions,
accepted with a warning saying what ember does instead, or refused."""

from __future__ import annotations

import warnings

import pytest
import torch

from ember.inductor import InductorOptions
from ember.inductor.backends import inductor
from ember.inductor.errors import InductorOptionsError
from ember.inductor.torch_options import TORCH_NAMES, accepted_names, configure_options


def _quiet(options: dict[str, object]) -> InductorOptions:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return configure_options(InductorOptions(), options)


def test_ember_fields_and_mapped_torch_names_set_options_silently() -> None:
    got = _quiet({"max_fusion_size": 8, "realize_opcount_threshold": 7, "cpp.parallel_threshold": 1,
                  "fx_graph_cache": False, "triton.autotune": False, "max_autotune": True})
    assert (got.max_fusion_size, got.realize_ops_threshold) == (8, 7)
    assert (got.cpp.parallel_threshold, got.graph_cache, got.triton.autotune) == (1, False, False)
    assert got.mode == "max-autotune-no-cudagraphs"


def test_triton_cudagraphs_is_reduce_overhead() -> None:
    assert _quiet({"triton.cudagraphs": True}).mode == "reduce-overhead"
    assert _quiet({"triton.cudagraphs": False}).mode == "default"


def test_values_that_already_are_embers_behaviour_are_quiet() -> None:
    assert _quiet({"fallback_random": True, "max_autotune": False, "debug": False}) == InductorOptions()


@pytest.mark.parametrize(("key", "value", "says"), [
    ("shape_padding", True, "does not pad shapes"),
    ("max_autotune_gemm", True, "mode='max-autotune'"),
    ("triton.tile_reductions", True, "Triton backend has no such setting"),
    ("trace.enabled", True, "EMBER_COMPILE_DEBUG=1"),
    ("fallback_random", False, "ATen's generator"),
])
def test_torch_names_without_a_counterpart_warn_what_ember_does(key: str, value: object, says: str) -> None:
    with pytest.warns(UserWarning, match=rf"options\['{key}'\]={value!r}: .*{says}"):
        got = configure_options(InductorOptions(), {key: value})
    assert got == InductorOptions()


def test_unknown_keys_are_refused_naming_every_accepted_name() -> None:
    with pytest.raises(InductorOptionsError, match="unknown options key 'shape_pading'") as info:
        configure_options(InductorOptions(), {"shape_pading": True})
    assert all(name in str(info.value) for name in accepted_names())
    assert set(TORCH_NAMES) <= set(accepted_names())


def test_backend_configure_hook_compiles_with_the_options() -> None:
    with pytest.warns(UserWarning, match="shape_padding"):
        backend = inductor.configure(None, {"max_fusion_size": 1, "shape_padding": True})  # type: ignore[attr-defined]
    gm = torch.fx.symbolic_trace(lambda x: (x.sin() + 1).cos())
    x = torch.randn(16)
    with torch.no_grad():
        torch.testing.assert_close(backend(gm, [x])(x), (x.sin() + 1).cos())
