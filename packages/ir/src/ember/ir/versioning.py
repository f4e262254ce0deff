"""The header every ember IR file starts with, and the version rule.

``{"format": "ember.graph" | "ember.guards", "version": [MAJOR, MINOR], ...}``.
A reader accepts any MINOR of its own MAJOR (adding optional fields is a MINOR
change) and rejects every other MAJOR with a message naming both versions.
"""

from __future__ import annotations

import json
from typing import Any

from ember.ir.errors import FormatError
from ember.ir.values import JSON

GRAPH_FORMAT = "ember.graph"
GUARDS_FORMAT = "ember.guards"
GRAPH_VERSION: tuple[int, int] = (1, 1)  # 1.1: a node's optional ``recompute``
#: the newest guard format: 2.0 added the ``dict.__getitem__(base, key)`` source
#: (ADR 0045), 2.1 the ``list(dict.keys(base))[i]`` / ``list(dict.values(base))[i]``
#: sources (a dict's entries by position) and ``$set``/``$frozenset`` values, 3.0 the
#: ``NO_ALIASING`` kind (ADR 0062). A guard set is written in the oldest format that holds
#: it (1.0 unless a source, a value or a kind needs more), and a reader still reads the
#: majors in ``GUARDS_OLDER_MAJORS``.
GUARDS_VERSION: tuple[int, int] = (3, 0)
GUARDS_OLDER_MAJORS: tuple[int, ...] = (2, 1)


def parse_json(text: str | bytes, *, file: str | None, what: str) -> dict[str, JSON]:
    """``json.loads`` that raises FormatError (naming the file) for bad or truncated text."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"{what} is not UTF-8 text: {e}", file=file) from None
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as e:
        truncated = e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string")
        hint = " (the file looks truncated)" if truncated and text.strip() else ""
        raise FormatError(f"{what} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}{hint}", file=file) from None
    except RecursionError:
        raise FormatError(f"{what} is nested too deeply", file=file) from None
    if not isinstance(data, dict):
        raise FormatError(f"{what} must be a JSON object, got {type(data).__name__}", file=file)
    return data


def check_header(
    data: dict[str, JSON],
    *,
    format_name: str,
    version: tuple[int, int],
    file: str | None,
    older_majors: tuple[int, ...] = (),
) -> tuple[int, int]:
    """Validate ``format`` and ``version``; return the file's version. A reader reads
    any MINOR of its own MAJOR, and of the ``older_majors`` it still reads."""
    got_format = data.get("format")
    if got_format != format_name:
        raise FormatError(f"expected format {format_name!r}, got {got_format!r}", file=file, field="format")
    raw = data.get("version")
    if (
        not isinstance(raw, list)
        or len(raw) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in raw)
    ):
        raise FormatError(f"'version' must be [MAJOR, MINOR] (two non-negative ints), got {raw!r}", file=file, field="version")
    major, minor = int(str(raw[0])), int(str(raw[1]))
    if major != version[0] and major not in older_majors:
        newer = "newer" if major > version[0] else "older"
        raise FormatError(
            f"{format_name} version {major}.{minor} is a {newer} major version than this reader "
            f"supports ({version[0]}.{version[1]}; it reads any "
            f"{' or '.join(f'{m}.x' for m in (version[0], *older_majors))}); "
            f"{'upgrade ember-ir' if major > version[0] else 'convert the file with an older ember-ir'}",
            file=file,
            field="version",
        )
    return major, minor
