"""Regenerate the golden captures from a fresh embedded PostgreSQL 18.

    .venv/bin/python tests/golden/capture.py [--out tests/golden/data] [--scenario NAME ...]

For each scenario: a fresh UTF8 database with a ``FOR ALL TABLES`` publication, one
pgoutput slot per capture config (all created before the workload), one walsender per
slot consumed live while the workload runs with its checkpoints (see ``walsender.py`` for
why not the SQL decoding functions).
Writes ``<out>/<scenario>/<config>.hex``, ``expected.json``, ``meta.json`` (and
``values.json`` for ``types``), plus ``<out>/option_matrix.json``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

if __package__ in (None, ""):  # run as a script: make `golden` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "golden"  # noqa: A001 - lets the relative imports below resolve
    import golden  # noqa: F401

from cdc_apply.pgoutput.messages import format_lsn

from .harness import (
    CONFIGS,
    PUBLICATION,
    SESSION_SETTINGS,
    CaptureConfig,
    Scenario,
    Workload,
    connect,
    create_slot,
    drop_slot,
    read_slot,
)
from .scenarios import SCENARIOS
from .snapshot import dumps, table_state, value_oracle
from .walsender import SlotReader, frame_xids, wait_for_senders

DEFAULT_OUT = Path(__file__).resolve().parent / "data"
OTHER_TIMEZONE = "Asia/Kolkata"


def _server_facts(server: Any, dbname: str) -> dict[str, Any]:
    rows = server.execute(
        "SELECT name, setting FROM pg_settings WHERE name IN ('server_version', 'server_version_num', "
        "'wal_level', 'logical_decoding_work_mem', 'debug_logical_replication_streaming', "
        "'server_encoding', 'max_prepared_transactions') ORDER BY name", dbname=dbname)
    return dict(rows)


def write_capture(path: Path, scenario: str, config: CaptureConfig, messages: list[tuple[int, bytes]]) -> None:
    """One pgoutput message per line: ``lsn<TAB>xid<TAB>payload hex``, after ``#`` header lines."""
    options = " ".join(f"{k}={v}" for k, v in config.plugin_options())
    settings = "; ".join(f"{k}={v}" for k, v in config.session_settings().items())
    lines = [f"# golden capture: scenario={scenario} config={config.name} "
             f"slot_two_phase={str(config.two_phase).lower()} method=walsender-live",
             f"# options: {options}",
             f"# walsender session: {settings}",
             "# columns: lsn<TAB>xid<TAB>payload_hex; lsn = XLogData start, xid = from protocol framing "
             "(0 outside a transaction); seq = 0-based index of the message line"]
    xids = frame_xids(messages)
    lines += [f"{format_lsn(lsn)}\t{xid}\t{payload.hex()}" for (lsn, payload), xid in zip(messages, xids)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _prepare_database(server: Any, dbname: str, slots: dict[str, CaptureConfig]) -> None:
    for slot in slots:
        drop_slot(server, "postgres", slot)
    server.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    server.execute(f"CREATE DATABASE \"{dbname}\" TEMPLATE template0 ENCODING 'UTF8'")
    server.execute(f"CREATE PUBLICATION {PUBLICATION} FOR ALL TABLES", dbname=dbname)
    for slot, config in slots.items():
        create_slot(server, dbname, slot, config.two_phase)


def capture_scenario(server: Any, scenario: Scenario, out_dir: Path,
                     configs: Iterable[str] | None = None,
                     log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run ``scenario`` once in a fresh database, captured live by every config; write its files.

    Returns the scenario's ``meta.json`` content. ``configs`` overrides the scenario's own list.
    """
    dbname = f"golden_{scenario.name}"
    slots = {CONFIGS[name].slot_name(scenario.name): CONFIGS[name] for name in (configs or scenario.configs)}
    started = time.monotonic()
    log(f"[{scenario.name}] fresh database {dbname}, {len(slots)} slots")
    _prepare_database(server, dbname, slots)
    readers = [SlotReader(server, dbname, slot, config) for slot, config in slots.items()]
    for reader in readers:
        reader.start()
    observer = connect(server, dbname)
    checkpoints: list[dict[str, Any]] = []

    def sync() -> int:
        return wait_for_senders(observer, list(slots))

    def on_checkpoint(name: str) -> None:
        with observer.cursor() as cur:
            cur.execute("SELECT pg_current_wal_lsn()::text")
            lsn = cur.fetchone()[0]
        checkpoints.append({"name": name, "lsn": lsn, "tables": table_state(observer)})
        sync()  # keep every walsender caught up at step boundaries, as a live subscriber is

    workload = Workload(server, dbname, on_checkpoint, sync, log)
    try:
        log(f"[{scenario.name}] workload")
        scenario.run(workload)
        end = sync()
        captured = {reader.config.name: reader.finish(end) for reader in readers}
    finally:
        workload.close()
        for reader in readers:
            reader.conn.close()

    scenario_dir = out_dir / scenario.name
    if scenario_dir.exists():
        shutil.rmtree(scenario_dir)
    scenario_dir.mkdir(parents=True)
    if scenario.values:
        other = connect(server, dbname, {**SESSION_SETTINGS, "TimeZone": OTHER_TIMEZONE})
        try:
            values = value_oracle(observer, other, OTHER_TIMEZONE)
        finally:
            other.close()
        (scenario_dir / "values.json").write_text(dumps(values) + "\n", encoding="utf-8")
        log(f"[{scenario.name}] values.json: {len(values)} values")
    observer.close()

    meta: dict[str, Any] = {
        "scenario": scenario.name,
        "description": scenario.description,
        "server": _server_facts(server, dbname),
        "capture_method": "walsender-live: START_REPLICATION per slot, consumed during the workload; "
                          "every checkpoint (and sync point) waits until all walsenders decoded all WAL",
        "database_encoding": "UTF8",
        "publication": f"{PUBLICATION} FOR ALL TABLES",
        "workload_session_settings": SESSION_SETTINGS,
        "checkpoints": [c["name"] for c in checkpoints],
        "notes": workload.notes,
        "configs": {},
    }
    for slot, config in slots.items():
        messages = captured[config.name]
        drop_slot(server, dbname, slot)
        write_capture(scenario_dir / f"{config.name}.hex", scenario.name, config, messages)
        kinds = dict(sorted(Counter(chr(payload[0]) for _, payload in messages).items()))
        meta["configs"][config.name] = {**config.describe(), "file": f"{config.name}.hex",
                                        "messages": len(messages), "kinds": kinds}
        log(f"[{scenario.name}] {config.name}: {len(messages)} messages {kinds}")
    (scenario_dir / "expected.json").write_text(dumps(checkpoints) + "\n", encoding="utf-8")
    (scenario_dir / "meta.json").write_text(dumps(meta) + "\n", encoding="utf-8")
    server.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    log(f"[{scenario.name}] done in {time.monotonic() - started:.1f}s")
    return meta


def probe_option_matrix(server: Any) -> list[dict[str, Any]]:
    """Which pgoutput option combinations PostgreSQL accepts, on a plain and a two-phase slot.

    Each accepted combination decodes one prepared-then-committed transaction (through the SQL
    interface) and records the message kinds it produced.
    """
    dbname = "golden_probe"
    server.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    server.execute(f'CREATE DATABASE "{dbname}"')
    server.execute(f"CREATE PUBLICATION {PUBLICATION} FOR ALL TABLES", dbname=dbname)
    server.execute("CREATE TABLE probe (id int4 PRIMARY KEY)", dbname=dbname)
    conn = connect(server, dbname)
    results = []
    for slot_two_phase in (False, True):
        for proto in (1, 2, 3, 4, 5):
            for streaming in ("off", "on", "parallel"):
                for two_phase in (False, True):
                    slot = "golden_probe"
                    create_slot(server, dbname, slot, slot_two_phase)
                    with conn.cursor() as cur:
                        cur.execute("BEGIN; INSERT INTO probe VALUES (1); PREPARE TRANSACTION 'golden_probe'")
                        cur.execute("COMMIT PREPARED 'golden_probe'")
                        cur.execute("DELETE FROM probe")
                    config = CaptureConfig("probe", proto, streaming=streaming, two_phase=two_phase)
                    kinds = None
                    try:
                        rows = read_slot(server, dbname, slot, config)
                        kinds = "".join(chr(int(data[:2], 16)) for _, _, data in rows)
                        error = None
                    except Exception as exc:  # psycopg2 errors: the message is the finding
                        error = str(exc).strip().splitlines()[0]
                    after = server.execute("SELECT two_phase FROM pg_replication_slots WHERE slot_name = %s",
                                           (slot,), dbname=dbname)[0][0]
                    drop_slot(server, dbname, slot)
                    results.append({"slot_two_phase": slot_two_phase, "proto_version": proto,
                                    "streaming": streaming, "two_phase_option": two_phase,
                                    "accepted": error is None, "error": error,
                                    "slot_two_phase_after": after, "prepared_then_committed": kinds})
    conn.close()
    server.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    return results


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="capture only this scenario (repeatable; default: all)")
    args = parser.parse_args(argv)

    from cdc_apply.testing.postgres import start_postgres

    server = start_postgres()
    try:
        version = server.execute("SHOW server_version")[0][0]
        print(f"PostgreSQL {version} in {server.datadir}", flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        matrix = probe_option_matrix(server)
        (args.out / "option_matrix.json").write_text(dumps(matrix) + "\n", encoding="utf-8")
        print(f"option matrix: {sum(r['accepted'] for r in matrix)}/{len(matrix)} accepted", flush=True)
        for name in args.scenario or list(SCENARIOS):
            capture_scenario(server, SCENARIOS[name], args.out, log=lambda m: print(m, flush=True))
    finally:
        server.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
