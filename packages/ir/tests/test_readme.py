"""The README's usage example really runs."""

import re
from pathlib import Path


def test_readme_example_runs(capsys: object) -> None:
    text = (Path(__file__).parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    exec(compile(blocks[0], "README.md", "exec"), {})  # the example asserts its own result
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "graph(dialect='torch'" in out and "call_module 0(%input_1)" in out
