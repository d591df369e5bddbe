"""``cdc-apply inspect``: print bronze messages as JSON, one object per line.

Reads a file of hex payloads (``--hex``) or a bronze Delta table (``--bronze``).
A message that cannot be decoded prints an object with an ``error`` and the run
goes on; the exit code is 1 when any message failed.
"""

from __future__ import annotations

import json
import sys
from typing import Iterable, TextIO

from cdc_apply.errors import CdcApplyError, DecodeError
from cdc_apply.pgoutput import StreamDecoder, format_lsn, render_message
from cdc_apply.pgoutput.hex_lines import read_hex_lines


def inspect_stream(rows: Iterable[tuple[int, int | None, bytes | DecodeError]], out: TextIO,
                   decoder: StreamDecoder | None = None, source: str | None = None) -> int:
    """Decode ``(seq, lsn, payload)`` rows of one source in order; return the number that failed."""
    decoder = decoder or StreamDecoder()
    failed = 0
    for seq, lsn, payload in rows:
        head: dict[str, object] = {"source": source} if source is not None else {}
        head.update(seq=seq, lsn=format_lsn(lsn) if lsn is not None else None)
        try:
            if isinstance(payload, DecodeError):
                raise payload
            record = {**head, **render_message(decoder.decode(payload))}
        except CdcApplyError as err:
            failed += 1
            record = {**head, "type": None, "error": str(err.with_context(source=source, seq=seq))}
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return failed


def inspect_hex(path: str, out: TextIO = sys.stdout) -> int:
    with open(path, encoding="utf-8") if path != "-" else sys.stdin as handle:
        return inspect_stream(read_hex_lines(handle), out)


def inspect_bronze(path: str, source: str | None, from_seq: int, out: TextIO = sys.stdout,
                   gaussdb: bool = False) -> int:
    """Decode a bronze table, source by source in seq order, starting at ``from_seq``."""
    from cdc_apply.lake.sources.bronze import read_bronze_messages

    failed = 0
    for source_name, in_stream, rows in read_bronze_messages(path, source, from_seq):
        if gaussdb:
            from cdc_apply.gaussdb.render import inspect_gaussdb_stream

            failed += inspect_gaussdb_stream(rows, out, source=source_name)
        else:
            failed += inspect_stream(rows, out, StreamDecoder(in_stream=in_stream), source=source_name)
    return failed
