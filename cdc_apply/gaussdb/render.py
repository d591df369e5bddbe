"""GaussDB records as JSON-ready dicts, and the body of ``cdc-apply inspect --format gaussdb``.

As :mod:`cdc_apply.pgoutput.render` does for pgoutput: ``type`` first (``Begin``,
``Commit``, ``Insert``, ``Update``, ``Delete``, ``Heartbeat``), snake_case
fields, LSNs as ``X/Y`` text, timestamps as ISO-8601 UTC. Commit timestamps
also keep the text the server sent (``commit_ts_text``); tuples are lists of
``{"name", "type_oid", "value"}`` with names as sent. A heartbeat's positions
are shown as ``X/Y`` (they are LSNs, or CSNs under CSN decoding) and its
timestamp both as sent and read with the ``auto`` unit.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable, TextIO

from cdc_apply.errors import CdcApplyError, DecodeError
from cdc_apply.gaussdb.decoder import decode_gaussdb_payload
from cdc_apply.gaussdb.records import RECORD_NAMES, Begin, Commit, Delete, GTuple, Heartbeat, Insert, Record, Update
from cdc_apply.gaussdb.timestamps import heartbeat_micros, parse_timestamp
from cdc_apply.pgoutput.hex_lines import read_hex_lines
from cdc_apply.pgoutput.messages import format_lsn
from cdc_apply.pgoutput.render import render_timestamp


def _tuple(columns: GTuple | None) -> list[dict[str, Any]] | None:
    if columns is None:
        return None
    return [{"name": n, "type_oid": oid, "value": v} for n, oid, v in columns]


def _ts(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        return render_timestamp(parse_timestamp(text))
    except ValueError:
        return None


def render_record(record: Record) -> dict[str, Any]:
    """One record as a JSON-ready dict, starting with ``type``."""
    out: dict[str, Any] = {"type": RECORD_NAMES[record.KIND]}
    if isinstance(record, Heartbeat):
        out.update(sent_position=format_lsn(record.sent_position), flush_position=format_lsn(record.flush_position),
                   timestamp_raw=record.timestamp, timestamp=render_timestamp(heartbeat_micros(record.timestamp)))
        return out
    out["lsn"] = format_lsn(record.lsn)
    if isinstance(record, Begin):
        out.update(csn=record.csn, first_lsn=format_lsn(record.first_lsn), xid=record.xid,
                   commit_ts=_ts(record.commit_ts), commit_ts_text=record.commit_ts, origin_id=record.origin_id,
                   user_name=record.user_name)
    elif isinstance(record, Commit):
        out.update(xid=record.xid, commit_ts=_ts(record.commit_ts), commit_ts_text=record.commit_ts)
    else:
        out.update(schema=record.schema, table=record.table)
        if isinstance(record, (Insert, Update)):
            out["new"] = _tuple(record.new)
        if isinstance(record, (Update, Delete)):
            out["old"] = _tuple(record.old)
    return out


def inspect_gaussdb_stream(rows: Iterable[tuple[int, int | None, bytes | DecodeError]], out: TextIO,
                           source: str | None = None) -> int:
    """One JSON object per record (``index`` within its payload); a payload that fails prints one
    object with an ``error`` and the run goes on. Returns the number of payloads that failed."""
    failed = 0
    for seq, lsn, payload in rows:
        head: dict[str, Any] = {"source": source} if source is not None else {}
        head.update(seq=seq, lsn=format_lsn(lsn) if lsn is not None else None)
        try:
            if isinstance(payload, DecodeError):
                raise payload
            records = decode_gaussdb_payload(payload)
        except CdcApplyError as err:
            failed += 1
            error = {**head, "type": None, "error": str(err.with_context(source=source, seq=seq))}
            out.write(json.dumps(error, ensure_ascii=False) + "\n")
            continue
        for index, record in enumerate(records):
            out.write(json.dumps({**head, "index": index, **render_record(record)}, ensure_ascii=False) + "\n")
    return failed


def inspect_gaussdb_hex(path: str, out: TextIO = sys.stdout) -> int:
    """``cdc-apply inspect --format gaussdb --hex PATH`` (``-`` for stdin): returns the failure count."""
    with open(path, encoding="utf-8") if path != "-" else sys.stdin as handle:
        return inspect_gaussdb_stream(read_hex_lines(handle), out)
