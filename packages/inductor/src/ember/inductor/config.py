"""The knobs of ember.inductor, in one place.

There is no mutable global configuration: build an ``InductorOptions`` and pass
it to ``compile_graph`` (or to ``make_backend``). ``options_from_env`` applies
the environment variables the public entry points honour:

- ``EMBER_CACHE_DIR``: where compiled kernels live (default ``~/.cache/ember``);
- ``EMBER_LOGS=output_code,perf_hints``: log generated code / fallbacks and fusion decisions;
- ``EMBER_COMPILE_DEBUG=1``: write IR dumps and generated code to a debug directory.
"""

from __future__ import annotations

from .options import InductorOptions, default_cache_dir, options_from_env

__all__ = ["InductorOptions", "default_cache_dir", "options_from_env"]
