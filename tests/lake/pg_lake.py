"""A real PostgreSQL 18 database captured by the lander (its own slot, the initial snapshot) into a lake
that one apply job applies: the tests run statements, land and apply, then compare silver, history
tables and reads as of an LSN with the states PostgreSQL went through."""

from __future__ import annotations

import io
from pathlib import Path

from cdc_apply.config import parse_config
from cdc_apply.delta.engine import spark_tables
from cdc_apply.testing.history_check import SourceRecord


class PgLake:
    """``dbname`` on ``postgres`` (created with ``setup``, rows included, before the slot exists), landed
    as source ``src`` into a lake under ``root``; ``extra`` adds configuration sections (history, tables)."""

    SOURCE = "src"

    def __init__(self, postgres, spark, root: Path, dbname: str, setup: list[str], extra: dict | None = None,
                 ddl_events: bool = False) -> None:
        from cdc_apply.delta.bronze_schema import create_bronze_table

        self.pg, self.spark, self.dbname = postgres, spark, dbname
        postgres.create_database(dbname)
        for sql in setup:
            postgres.execute(sql, dbname=dbname)
        raw = {"pipeline": dbname, "bronze": {"path": str(root / "bronze")}, "silver": {"path": str(root / "silver")},
               "state": {"path": str(root / "state")}}
        for section, values in (extra or {}).items():
            raw.setdefault(section, {}).update(values)
        self.config = parse_config(raw)
        self.lander_config = parse_config({**raw, "source": {
            "name": self.SOURCE, "dsn": postgres.dsn(dbname), "slot": f"{dbname}_slot", "publication": f"{dbname}_pub",
            "create_slot": True, "create_publication": True,
            "snapshot": "initial", "ddl_events": ddl_events},
            "land": {"idle_exit_seconds": 0.5, "batch_seconds": 60.0}})
        create_bronze_table(spark_tables(spark), self.config.bronze.path)
        self.conn = postgres.connect(dbname)
        self.record = SourceRecord(("public",))

    def run(self, *statements: str) -> int:
        """Run ``statements`` as one transaction; returns the LSN its state is read at (see SourceRecord)."""
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            for sql in statements:
                cur.execute(sql)
            cur.execute("COMMIT")
        return self.record.take(self.conn)

    def land_and_apply(self) -> str:
        """One landing of everything committed so far, then one apply batch; returns what the job printed."""
        from cdc_apply.lander.lander import Lander

        Lander(self.lander_config, self.spark, out=io.StringIO()).run(once=True)
        return self.apply()

    def apply(self) -> str:
        """One apply batch of what bronze holds; returns what the job printed."""
        from cdc_apply.lake.pipeline import ApplyPipeline

        out = io.StringIO()
        ApplyPipeline.open(spark_tables(self.spark), self.config, out=out).run(once=True)
        return out.getvalue()

    def silver_differences(self) -> list[str]:
        from cdc_apply.testing.compare import compare_with_postgres

        checks = compare_with_postgres(self.spark, self.config, self.conn, source=self.SOURCE, schemas=["public"])
        assert checks, "no table compared"
        return [check.line() for check in checks if not check.equal]

    def states(self) -> list:
        """The recorded states from the slot's consistent point on (states taken before any commit since
        the snapshot read at that point: history_check.states_since)."""
        from cdc_apply.testing.history_check import consistent_point, states_since

        return states_since(self.record.states, consistent_point(self.spark, self.config, self.SOURCE))

    def history_differences(self) -> list[str]:
        from cdc_apply.testing.history_check import check_history

        return check_history(self.spark, self.config, self.SOURCE, self.states())

    def close(self) -> None:
        self.conn.close()


def beside(step, call, pause: float = 0.5):
    """``call()`` while ``step()`` runs again and again in a thread (the lander and the apply job, say), ``pause``
    seconds apart; what ``call`` returned. A failure of ``step`` fails the caller, naming it."""
    import threading

    stop = threading.Event()
    errors: list[BaseException] = []

    def loop():
        try:
            while not stop.is_set():
                step()
                stop.wait(pause)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        result = call()
    finally:
        stop.set()
        thread.join(120)
    assert not errors, f"the loop beside failed: {errors[0]!r}"
    return result
