"""The seed blog's training loop (ViT + GPT-2 captioner, captions padded to the longest in
the batch, model and optimizer step compiled) run with ``EMBER_COMPILE_DEBUG=1``, then its
compile report (``python -m ember.dynamo report``): what docs/report.png shows.

    python tools/report_example.py [-o report.html] [--steps 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", default="report.html")
    ap.add_argument("--steps", type=int, default=4, help="training steps, one caption length each")
    ap.add_argument("--debug-dir", default=None, help="EMBER_COMPILE_DEBUG_DIR (default: a temporary folder)")
    args = ap.parse_args(argv)
    base = args.debug_dir or tempfile.mkdtemp(prefix="ember_debug_")
    os.environ["EMBER_COMPILE_DEBUG"] = "1"
    os.environ["EMBER_COMPILE_DEBUG_DIR"] = base
    sys.path.insert(0, str(ROOT))

    import torch

    import ember.dynamo
    from ember.dynamo.report import write_report
    from integration_tests.models import zoo

    torch.manual_seed(42)
    model = zoo.blog_captioner().model
    optimizer = torch.optim.Adam(model.parameters())
    model = ember.dynamo.compile(model)                  # the blog's apply_compilation
    optimizer.step = ember.dynamo.compile(optimizer.step)  # type: ignore[method-assign]
    for step in range(args.steps):
        batch = zoo.caption_batch(length=16 + 8 * step, seed=step)  # pad_to_longest
        optimizer.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        print(f"step {step}: length {batch['decoder_input_ids'].shape[1]}, loss {loss.item():.4f}")
    out = write_report(Path(base), Path(args.output))
    print(f"report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
