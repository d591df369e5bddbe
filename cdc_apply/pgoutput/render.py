"""Messages as JSON-ready dicts (what ``cdc-apply inspect`` prints).

Type names have no spaces (``StreamCommit``); fields are snake_case; LSNs are
``X/Y`` text; timestamps ISO-8601 UTC; tuples are lists whose items are null, a
text string, ``{"unchanged_toast": true}`` or ``{"binary": "<hex>"}``; message
content is hex.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from cdc_apply.pgoutput.messages import (
    UNCHANGED_TOAST,
    PgOutputMessage,
    Relation,
    Truncate,
    format_lsn,
    pg_timestamp_to_datetime,
)

_LSN_FIELDS = frozenset({"final_lsn", "commit_lsn", "end_lsn", "lsn", "abort_lsn", "prepare_lsn",
                         "prepare_end_lsn", "rollback_end_lsn"})
_TS_FIELDS = frozenset({"commit_ts", "abort_ts", "prepare_ts", "rollback_ts"})
_TUPLE_FIELDS = frozenset({"new", "key", "old"})


def render_timestamp(micros: int) -> str:
    """A wire timestamp as ISO-8601 UTC (``2026-11-22T04:05:51.123456Z``)."""
    try:
        return pg_timestamp_to_datetime(micros).isoformat().replace("+00:00", "Z")
    except OverflowError:
        return f"<timestamp out of range: {micros} us since 2000-01-01>"


def render_value(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if value is UNCHANGED_TOAST:
        return {"unchanged_toast": True}
    return {"binary": bytes(value).hex()}


def render_message(message: PgOutputMessage) -> dict[str, Any]:
    """One message as a JSON-ready dict, starting with ``type``."""
    out: dict[str, Any] = {"type": type(message).__name__}
    for f in fields(message):
        value = getattr(message, f.name)
        if f.name == "xid" and value is None:
            continue
        if f.name in _TUPLE_FIELDS:
            if value is None:
                continue
            value = [render_value(v) for v in value]
        elif f.name in _LSN_FIELDS and value is not None:
            value = format_lsn(value)
        elif f.name in _TS_FIELDS and value is not None:
            value = render_timestamp(value)
        elif f.name == "content":
            value = value.hex()
        elif f.name == "columns":
            value = [{"name": c.name, "type_oid": c.type_oid, "type_modifier": c.type_modifier, "key": c.key}
                     for c in value]
        elif f.name == "options" and isinstance(message, Truncate):
            out["cascade"] = message.cascade
            out["restart_identity"] = message.restart_identity
            continue
        elif f.name == "relation_ids":
            value = list(value)
        out[f.name] = value
    if isinstance(message, Relation):
        out["replica_identity"] = message.replica_identity
    return out
