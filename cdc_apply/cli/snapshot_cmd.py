"""``cdc-apply snapshot``: ask the lander to copy tables again while the stream keeps flowing.

The request is a non-transactional logical decoding message on the source
(``pg_logical_emit_message(false, 'cdc_apply.snapshot_request', ...)``): it
enters the slot's stream at once, and the lander serves it when it reads it —
now if it is running, at its next start otherwise (docs/SNAPSHOTS.md).
``--ddl-events-sql`` prints the event trigger script of ``source.ddl_events``
for a superuser to run.
"""

from __future__ import annotations

import sys

from cdc_apply.config import load_config
from cdc_apply.config.choices import Snapshot
from cdc_apply.errors import ConfigError
from cdc_apply.lander.snapshots.requests import emit_request


def run_snapshot(config_path: str, tables: list[str], ddl_events_sql: bool = False) -> int:
    """Emit a snapshot request for ``tables`` on the source of ``config_path`` (or print the DDL event SQL)."""
    from cdc_apply.lander.ddl_events import DDL_EVENTS_SQL

    config = load_config(config_path)
    if ddl_events_sql:
        print(DDL_EVENTS_SQL.strip())
        return 0
    if not tables:
        raise ConfigError("name at least one table to copy again (--table namespace.name)", file=config_path)
    bad = [t for t in tables if "." not in t.strip(".")]
    if bad:
        raise ConfigError(f"tables are named namespace.name, got {', '.join(bad)}", file=config_path)
    source = config.source
    lsn = emit_request(config, tables)
    print(f"[snapshot {source.name}] requested a snapshot of {', '.join(tables)} at lsn {lsn}: the lander copies "
          f"{'them' if len(tables) > 1 else 'it'} when it reads that position (at once if it is running)")
    if source.snapshot == Snapshot.NEVER:
        print(f"[snapshot {source.name}] note: source.snapshot is \"never\", so the lander will not serve it",
              file=sys.stderr)
    return 0
