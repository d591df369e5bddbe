"""Snapshot requests sent through the source's own stream (docs/SNAPSHOTS.md).

A request is a non-transactional logical decoding message (``pg_logical_emit_message(false,
'cdc_apply.snapshot_request', ...)``): it enters the slot's stream at once, and the lander serves it when
it reads it — now if it is running, at its next start otherwise. ``cdc-apply snapshot`` asks for whole
tables; ``cdc-apply verify --repair`` for key ranges of tables (:func:`~cdc_apply.lander.snapshots.state.
request_entries` reads both).
"""

from __future__ import annotations

import json
from typing import Sequence

from cdc_apply.errors import LandError
from cdc_apply.lander.snapshots.state import REQUEST_PREFIX

Range = tuple[str, str, int | None, int | None]   # (table, integer column, low, high): [low, high)


def emit_request(config, tables: Sequence[str] = (), ranges: Sequence[Range] = ()) -> str:
    """Emit one snapshot request for ``tables`` (copied whole) and ``ranges`` on ``config``'s source, after
    checking each table is published; returns the message's LSN as PostgreSQL prints it."""
    import psycopg2

    from cdc_apply.lander.dsn import Target, connection_error, resolve_dsn, scrubbed_line
    from cdc_apply.lander.options import publication_names
    from cdc_apply.lander.snapshots import catalog

    dsn = resolve_dsn(config.source)
    try:
        conn = psycopg2.connect(dsn, connect_timeout=max(1, int(config.source.connect_timeout)),
                                application_name=f"cdc_apply-snapshot-{config.source.name}"[:63])
    except psycopg2.Error as exc:
        raise connection_error(exc, dsn) from None
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            relations = catalog.published_relations(cur, publication_names(config.source))
            named = list(dict.fromkeys([*tables, *(r[0] for r in ranges)]))
            missing = [t for t in named if catalog.resolve_entry(t, relations, cur) is None]
            if missing:
                raise LandError(f"not in publication {config.source.publication!r}: {', '.join(missing)}",
                                key="source.publication")
            body: dict = {"source": config.source.name, "tables": list(tables)}
            if ranges:
                body["ranges"] = [{"table": t, "column": c, "low": low, "high": high} for t, c, low, high in ranges]
            cur.execute("SELECT pg_logical_emit_message(false, %s, %s)::text", (REQUEST_PREFIX, json.dumps(body)))
            return cur.fetchone()[0]
    except psycopg2.Error as exc:
        raise LandError(f"emitting the snapshot request failed: {scrubbed_line(exc, dsn)}",
                        dsn=Target.of(dsn).shown) from None
    finally:
        conn.close()
