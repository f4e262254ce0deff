"""Attributes of transformers-style config objects read by the native check without the
Python ``__getattribute__`` calls (``config_attr``, ADR 0058): the same verdict as the
Python check on every change to the object, its class and the functions, and no Python
``__getattribute__`` call while nothing changed."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from typing import Any

import pytest

import ember.guards
from ember.guards import native
from ember.guards.check_fn import CheckFn
from ember.guards.reads import config_layers
from ember.ir import Attr, Guard, GuardKind, GuardSet, Local, encode_value

pytestmark = pytest.mark.skipif(
    shutil.which(os.environ.get("CC", "gcc")) is None, reason="no C compiler for native guards"
)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "native-guards-config"))
    monkeypatch.setenv("EMBER_NATIVE_GUARDS", "1")


# transformers' two __getattribute__ layers, written as there (the code is what is recognised)
class AmbiguousGlobalPerLayerAttributeError(AttributeError):
    pass


class _Logger:
    def warning_once(self, message: str) -> None:
        pass


logger = _Logger()


class Mixin:
    def __getattribute__(self, key: str) -> Any:
        # In heterogeneous configs, per-layer attributes are ambiguous on the global config.
        # Callers must read them from a concrete layer unless they explicitly opt into the global value.
        heterogeneity_spec = super().__getattribute__("__dict__").get("_heterogeneity_spec")
        if heterogeneity_spec is not None:  # noqa: SIM102 (transformers' code, as written there)
            if key in heterogeneity_spec.per_layer_attributes:
                if not super().__getattribute__("allow_global_per_layer_attribute_access"):
                    raise AmbiguousGlobalPerLayerAttributeError(
                        f"'{key}' is a per-layer attribute and may vary across layers. Access it via the individual layer "
                        f"configs instead (e.g. config.per_layer_config[i].{key}). To read the global config value from "
                        f"config.{key} anyway, set `allow_global_per_layer_attribute_access` to `True` on the config. "
                        f"Warning: only do this if the caller can safely handle heterogeneous configs; code that assumes "
                        f"a homogeneous model may use the global value incorrectly."
                    )

                logger.warning_once(
                    f"Reading global config value for per-layer attribute `{key}` on a heterogeneous config. "
                    "Only do this if the caller can safely handle heterogeneous configs; code that assumes a homogeneous "
                    "model may use the global value incorrectly."
                )

        return super().__getattribute__(key)


class Config(Mixin):
    attribute_map = {"hidden_size": "n_embd"}
    allow_global_per_layer_attribute_access = False

    def __init__(self) -> None:
        self.n_embd = 8
        self.use_cache = True
        self.return_dict = True
        self.name = "gpt"

    def __getattribute__(self, key: str) -> Any:
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


class Spec:
    per_layer_attributes = {"n_embd"}


def make_classes() -> tuple[type, type]:
    """A fresh Config subclass (so class changes of one test do not leak into the next)."""

    class Sub(Config):
        pass

    return Config, Sub


NAMES = ("hidden_size", "use_cache", "return_dict", "name")


def compiled(cfg: Any, names: tuple[str, ...] = NAMES) -> CheckFn:
    guards = []
    for n in names:
        value = getattr(cfg, n)
        kind = GuardKind.CONSTANT_MATCH if isinstance(value, bool) else GuardKind.EQUALS_MATCH
        guards.append(Guard(Attr(Local("c"), n), kind, {"value": encode_value(value)}))
    fn = ember.guards.compile(GuardSet(tuple(guards)), {"c": cfg}, {})
    assert fn.compile_native({"c": cfg}, {}, True) is not None, fn.native_error
    assert fn.native_source(native.tensor_helper()).source.count("config_attr(V") == len(names)
    return fn


def verdict(fn: CheckFn, cfg: Any) -> bool:
    L: dict[str, Any] = {"c": cfg}
    py = fn.py_fn(L, {})
    assert fn.native_fn is not None
    nat = fn.native_fn(L, {})
    assert nat is py, f"native {nat}, Python {py}"
    return py


def python_calls(fn: Callable[[], Any]) -> list[str]:
    """The Python ``__getattribute__`` functions ``fn()`` calls."""
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name == "__getattribute__":
            calls.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_the_chain_is_recognised() -> None:
    layers = config_layers(Config)
    assert layers is not None and [k for k, *_ in layers] == [0, 1]
    assert [owner for *_, owner in layers] == [Config, Mixin]

    class Other:
        def __getattribute__(self, key: str) -> Any:
            return object.__getattribute__(self, key)

    assert config_layers(Other) is None

    class WithGetattr(Config):
        def __getattr__(self, key: str) -> Any:
            return 1

    assert config_layers(WithGetattr) is None


def test_reads_run_no_python_while_nothing_changed() -> None:
    cfg = make_classes()[1]()
    fn = compiled(cfg)
    assert verdict(fn, cfg) is True
    assert fn.native_fn is not None
    native_fn = fn.native_fn
    assert python_calls(lambda: native_fn({"c": cfg}, {})) == []
    assert "Config.__getattribute__" in python_calls(lambda: fn.py_fn({"c": cfg}, {}))


def _value(cfg: Any, cls: type) -> None:
    cfg.use_cache = False


def _mapped(cfg: Any, cls: type) -> None:
    cfg.n_embd = 9  # read as hidden_size through attribute_map


def _instance_map(cfg: Any, cls: type) -> None:
    cfg.attribute_map = {"hidden_size": "name"}


def _class_map(cfg: Any, cls: type) -> None:
    cls.attribute_map = {}  # type: ignore[attr-defined]


def _getattr_added(cfg: Any, cls: type) -> None:
    cls.__getattr__ = lambda self, key: 0  # type: ignore[attr-defined]


def _getattr_answers(cfg: Any, cls: type) -> None:
    cls.__getattr__ = lambda self, key: 0  # type: ignore[attr-defined]
    del cfg.name  # now 0


def _getattribute_replaced(cfg: Any, cls: type) -> None:
    cls.__getattribute__ = lambda self, key: False  # type: ignore[method-assign]


class _Other:
    def __getattribute__(self, key: str) -> Any:
        return super().__getattribute__("name" if key == "return_dict" else key)


def _code_replaced(cfg: Any, cls: type) -> None:
    Config.__dict__["__getattribute__"].__code__ = _Other.__dict__["__getattribute__"].__code__


def _property(cfg: Any, cls: type) -> None:
    cls.return_dict = property(lambda self: False)  # type: ignore[attr-defined]


def _missing(cfg: Any, cls: type) -> None:
    del cfg.return_dict


def _heterogeneous(cfg: Any, cls: type) -> None:
    cfg._heterogeneity_spec = Spec()  # reading hidden_size (n_embd) now raises


def _heterogeneous_allowed(cfg: Any, cls: type) -> None:
    cfg._heterogeneity_spec = Spec()
    cfg.allow_global_per_layer_attribute_access = True


def _map_raises(cfg: Any, cls: type) -> None:
    class Raising(dict):  # type: ignore[type-arg]
        def __contains__(self, key: object) -> bool:
            raise RuntimeError("no")

    cfg.attribute_map = Raising()


CHANGES: dict[str, tuple[Callable[[Any, type], None], bool]] = {
    "a value": (_value, False),
    "a mapped value": (_mapped, False),
    "an instance attribute_map": (_instance_map, False),
    "the class attribute_map": (_class_map, False),
    "__getattr__ added": (_getattr_added, True),
    "__getattr__ answers": (_getattr_answers, False),
    "__getattribute__ replaced": (_getattribute_replaced, False),
    "a function's code replaced": (_code_replaced, False),
    "a property on the class": (_property, False),
    "an attribute gone": (_missing, False),
    "heterogeneous": (_heterogeneous, False),
    "heterogeneous, allowed": (_heterogeneous_allowed, True),
    "attribute_map raising": (_map_raises, False),
}


@pytest.mark.parametrize("name", list(CHANGES))
def test_a_change_gives_the_python_checks_verdict(name: str) -> None:
    change, holds = CHANGES[name]
    code = Config.__dict__["__getattribute__"].__code__
    _, cls = make_classes()
    cfg = cls()
    fn = compiled(cfg)
    assert verdict(fn, cfg) is True
    try:
        change(cfg, cls)
        assert verdict(fn, cfg) is holds
    finally:
        Config.__dict__["__getattribute__"].__code__ = code


def test_transformers_configs() -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config()
    assert config_layers(type(cfg)) is not None
    fn = compiled(cfg, ("hidden_size", "use_cache", "return_dict", "n_layer"))
    assert verdict(fn, cfg) is True
    native_fn = fn.native_fn
    assert native_fn is not None
    assert python_calls(lambda: native_fn({"c": cfg}, {})) == []
    cfg.n_embd = 3
    assert verdict(fn, cfg) is False
    cfg.n_embd = 768
    cfg.return_dict = False
    assert verdict(fn, cfg) is False
