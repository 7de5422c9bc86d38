"""The table of every registered method, from each method's `MethodInfo` (`python -m analysis methods`):
its registry name, display name, description, main metric and the paper it cites (BibTeX title and
year). docs/methods/index.md holds this table between its markers, and a test keeps the two the same."""

from __future__ import annotations

import re

BEGIN = "<!-- methods table: python -m analysis methods -->"
END = "<!-- end of methods table -->"


def _field(bibtex: str, name: str) -> str:
    """A BibTeX field's value, its braces balanced (one line or several), without its inner braces."""
    found = re.search(rf"\b{name}\s*=\s*\{{", bibtex)
    if not found:
        return ""
    depth, end = 1, found.end()
    while depth and end < len(bibtex):
        depth += {"{": 1, "}": -1}.get(bibtex[end], 0)
        end += 1
    return " ".join(re.sub(r"[{}]", "", bibtex[found.end() : end - 1]).split())


def markdown() -> str:
    from trainables.core.method import METHODS
    from trainables.methods import load

    load()
    lines = ["| method | shown as | what it is | main metric | cites |", "|---|---|---|---|---|"]
    for name in sorted(METHODS.names()):
        info = METHODS.get(name).info
        cites = f"*{_field(info.citation, 'title')}* ({_field(info.citation, 'year')})"
        lines.append(f"| `{name}` | {info.display_name} | {info.description} | {info.main_metric} | {cites} |")
    return "\n".join(lines)


def section() -> str:
    """The table with the markers around it, as docs/methods/index.md holds it."""
    return f"{BEGIN}\n{markdown()}\n{END}"
