"""The bar chart: speedup over eager per workload, one bar per compiler, log scale."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any


def plot_speedups(results: list[dict[str, Any]], path: Path, title: str = "") -> None:
    """Write a PNG; cells that are not ``ok`` get no bar (a WRONG cell is marked on the axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r["workload"] for r in results))
    compilers = [c for c in dict.fromkeys(r["compiler"] for r in results) if c != "eager"]
    by = {(r["workload"], r["compiler"]): r for r in results}
    width = 0.8 / max(1, len(compilers))
    fig, ax = plt.subplots(figsize=(max(8.0, 1.1 * len(workloads) + 3), 5))
    for j, c in enumerate(compilers):
        xs, ys = [], []
        for i, w in enumerate(workloads):
            r = by.get((w, c))
            if r is None:
                continue
            x = i + (j - (len(compilers) - 1) / 2) * width
            if r.get("status") == "ok" and r.get("speedup"):
                xs.append(x)
                ys.append(r["speedup"])
            elif r.get("status") == "wrong":
                ax.annotate("WRONG", (x, 1.0), rotation=90, ha="center", va="bottom", fontsize=7, color="red")
        ax.bar(xs, ys, width=width, label=c)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("speedup over eager (log scale)")
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels(workloads, rotation=30, ha="right")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: never over a bar
    if title:
        wrapped = "\n".join(textwrap.fill(line, 120) for line in title.splitlines())
        ax.set_title(wrapped, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
