"""ember's differential fuzzer: random PyTorch programs, eager vs any compiler.

See README.md. Entry point: ``python tools/fuzz.py --help``.
"""
