"""Showing untrusted text (a server's body, a header, a host's message) on one line: the
rule of the Rust SDK's `text` module, so that a reason reads the same from either SDK.

Escaped, each as a Rust escape: control characters (`\\n`, `\\r`, `\\t`, `\\0`, else
`\\u{1b}`), the line and paragraph separators, the bidirectional controls and the
invisible format characters that hide or reorder text (`\\u{202e}`). Every other character
is kept, including the zero-width joiner and non-joiner, which shape scripts and reorder
nothing.
"""

from __future__ import annotations

import unicodedata

_SHORT = {"\0": "\\0", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escaped(code: int) -> bool:
    return (
        code in (0x061C, 0x200B, 0x200E, 0x200F, 0xFEFF)
        or 0x2028 <= code <= 0x202E
        or 0x2060 <= code <= 0x2064
        or 0x2066 <= code <= 0x206F
        or 0xFFF9 <= code <= 0xFFFB
        or 0xE0000 <= code <= 0xE007F
    )


def escape(text: str) -> str:
    """`text` with every character the rule escapes written as its escape."""
    out = []
    for char in text:
        if unicodedata.category(char) == "Cc":
            out.append(_SHORT.get(char) or f"\\u{{{ord(char):x}}}")
        elif _escaped(ord(char)):
            out.append(f"\\u{{{ord(char):x}}}")
        else:
            out.append(char)
    return "".join(out)


def bounded(data: bytes, limit: int) -> str:
    """The first `limit` bytes of `data` as one line: read lossily as UTF-8, escaped, `…`
    where it was cut."""
    shown = escape(data[:limit].decode("utf-8", errors="replace"))
    return shown + "…" if len(data) > limit else shown
