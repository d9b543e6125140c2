"""Reading any input file as text, in one place: one message for a file that cannot be read, and for bytes that
are not text the byte offset, line and column of the first bad byte.

Every reader of user files goes through `read_text` (native documents, importers, traces, request files).
"""

from __future__ import annotations

import os
from pathlib import Path

from placement.errors import InputError, Problem

__all__ = ["decode_text", "read_text"]


def _where(data: bytes, at: int) -> str:
    head = data[:at]
    line = head.count(b"\n") + 1
    column = at - (head.rfind(b"\n") + 1) + 1
    return f"byte {at} (line {line}, column {column})"


def decode_text(data: bytes, source: str) -> str:
    """`data` as text: UTF-8 (a BOM is dropped), or UTF-16 with its BOM (what PowerShell's `>` writes).

    >>> decode_text(b"a\\nb\\xffc", "f.txt")
    Traceback (most recent call last):
    ...
    placement.errors.InputError: f.txt: byte 3 (line 2, column 2): not UTF-8 text: byte 0xff (invalid start byte); save the file as UTF-8
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as e:
            raise InputError(
                source, [Problem(f"byte {e.start}", f"not valid UTF-16 text: {e.reason}")]
            ) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(
            source,
            [
                Problem(
                    _where(data, e.start),
                    f"not UTF-8 text: byte 0x{data[e.start]:02x} ({e.reason}); save the file as UTF-8",
                )
            ],
        ) from None
    if "\x00" in text:
        at = data.index(b"\x00")
        raise InputError(source, [Problem(_where(data, at), "a NUL byte: this is a binary file, not text")])
    return text


def read_text(path: str | os.PathLike[str], source: str | None = None) -> str:
    """The text of the file at `path` (`decode_text`); InputError naming the file (`source`, default the path)
    when it cannot be read: missing, a directory, no permission, or not text."""
    src = source or str(path)
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise InputError(src, [Problem("", "is a directory, not a file")]) from None
    except OSError as e:
        raise InputError(src, [Problem("", f"cannot read the file: {e.strerror or e}")]) from None
    return decode_text(data, src)
