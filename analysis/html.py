"""The HTML both pages (report.html, compare.html) are made of: one style sheet, tables and
embedded images. Every cell is HTML already; every string from a trace, a config or an error is
escaped by the caller."""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path
from typing import Iterable

CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1400px;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f0f0f0}td.l,th.l{text-align:left}
.bad{color:#b00020}.ok{color:#0a7a2f}.noisy{background:#fff1c2}img{max-width:100%;border:1px solid #ddd;margin:.5em 0}
code{background:#f5f5f5;padding:1px 4px}details{margin:.3em 0}
button.perfetto{font-size:12px;margin:0 .2em;padding:1px 6px;cursor:pointer}
p.note{position:sticky;bottom:0;background:#fff8d6;border:1px solid #e0c860;padding:.5em 1em;margin:0}
div.wide{overflow-x:auto;max-width:100%}pre{overflow-x:auto;max-width:100%}
#conclusions{background:#f4f8ff;border:1px solid #c5d5f0;padding:.2em 1.2em .6em;margin:1em 0}
#conclusions li{margin:.35em 0;line-height:1.4}#conclusions a{font-size:12px;margin-left:.3em}
"""


def table(header: Iterable[str], rows: Iterable[Iterable[str]], left: int = 1) -> str:
    """Cells are already HTML; the first `left` columns are left-aligned."""
    head = "".join(f'<th class="{"l" if i < left else ""}">{escape(h)}</th>' for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{c}</td>' for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<div class='wide'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f'<h3 id="plot-{escape(path.stem, quote=True)}">{escape(path.name)}</h3>'
            f'<img alt="{escape(path.stem)}" src="data:image/png;base64,{data}">')


def pre_pair(left: tuple[str, str], right: tuple[str, str]) -> str:
    cells = "".join(
        f"<div style='flex:1;min-width:0'><h4>{escape(title)}</h4><pre style='font-size:11px;overflow-x:auto'>"
        f"{escape(text)}</pre></div>" for title, text in (left, right)
    )
    return f"<div style='display:flex;gap:1em'>{cells}</div>"


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        return f"(cannot read {path.name}: {exc})"
