"""Payloads as lines of hex text: what ``cdc-apply inspect --hex`` reads, pgoutput or GaussDB alike."""

from __future__ import annotations

from typing import Iterable, Iterator

from cdc_apply.errors import DecodeError
from cdc_apply.pgoutput.messages import parse_lsn


def read_hex_lines(lines: Iterable[str]) -> Iterator[tuple[int, int | None, bytes | DecodeError]]:
    """``(seq, lsn, payload)`` per line; seq is the 0-based line number.

    A line is the payload in hex, or ``X/Y<TAB>xid<TAB>hex`` as written by the
    golden capture script (then the LSN is taken from it; the middle field is not
    read). Blank lines and lines starting with ``#`` are skipped but still counted.
    A line that is not hex gives a :class:`DecodeError` in place of its payload, so
    the caller reports it and goes on.
    """
    for seq, line in enumerate(lines):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        lsn = None
        fields = text.split("\t")
        try:
            if len(fields) == 3:
                lsn = parse_lsn(fields[0])
            yield seq, lsn, bytes.fromhex(fields[-1])
        except ValueError as exc:
            yield seq, lsn, DecodeError(f"line is not hex: {exc}", line=seq + 1)
