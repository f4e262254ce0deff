"""ember's benchmark suite: ember vs torch.compile vs eager, one fresh process per cell.

Entry point: ``python tools/bench.py`` (see ``bench.cli``). The demo machinery
for ``tools/demo.py`` is :func:`bench.demo.run_demo`.
"""
