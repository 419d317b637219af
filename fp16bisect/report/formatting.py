"""How values read in the HTML report, in its tables and its plots' captions: escaping, numbers, plurals, names.

Shared by the page (``html.py``) and the plots (``plots/``), so a number or a name reads the same in
a table and in the caption beside it.
"""

from __future__ import annotations

import html
import math
from typing import TypeGuard

LABEL_CHARS = 28  # longer names are shortened in plots (tables show them whole)


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def num(x, digits: int = 3) -> str:
    """A number for a table: 3 significant digits, non-finite as inf/-inf/nan, missing as a dash."""
    if x is None:
        return "–"
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def short(name: str, limit: int = LABEL_CHARS) -> str:
    """``name`` within ``limit`` characters, cut in the middle: exported names share long prefixes
    (``/encoder/layers.3/…``) and differ in their layer number and their tail."""
    if len(name) <= limit:
        return name
    head = (limit - 1) // 3
    return name[:head] + "…" + name[len(name) - (limit - 1 - head):]


def finite(x) -> TypeGuard[float]:  # a finite number (then a float to the type checker)
    return x is not None and math.isfinite(float(x))


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def listing(names: list[str], limit: int = 20) -> str:
    shown = ", ".join(f"<code>{esc(n)}</code>" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def capital(label: str) -> str:
    """``label`` with its first letter upper case (a series label opening a caption's sentence)."""
    return label[0].upper() + label[1:]
