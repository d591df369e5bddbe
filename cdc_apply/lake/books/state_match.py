"""Before a batch writes anything: does the state it runs from match the tables it is about to write?

A batch's writes are skipped where a table's ledger shows them done (:mod:`cdc_apply.lake.books.ledger`), which
is right only when the state (progress rows, the carried source state) is the one the tables were
written from. It is not when the state folder was lost or restored from an older copy, or when silver
moved (``silver.path`` changed, a table removed or replaced by an older copy): the batch would skip or
lose rows and report success. Each such case is a :class:`~cdc_apply.errors.StateError` naming the table,
raised for every table of the batch before the first write, so nothing is half-applied:

- the table records a write of a later apply version than the batch's (the state is behind);
- it records a write of the batch's own version from other bronze seqs (behind by exactly one batch);
- the progress rows say a batch left the table at Delta version *d*, and there is no table, or its
  newest version is below *d* (silver moved, or the table was removed or replaced).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Mapping

from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import StateError
from cdc_apply.lake.books.ledger import STEPS_PER_VERSION, SilverLedger

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables

REMEDY = ("Restore the state folder that goes with the tables, or remove the silver (and history) tables "
          "together with the state to rebuild them from bronze")


def check_tables(tables: SparkTables, ledger: SilverLedger, targets, version: int,
                 bounds: Mapping[str, tuple[int, int]],
                 written: Callable[[], Mapping[tuple[str, int, str], int]], state_at: str | None,
                 parallelism: int = 4) -> None:
    """Check every ``(kind, ref, app_id, work)`` of ``targets`` (kind: "silver table" or "history table")
    against the state (the ledger was told each app id's batch: :meth:`SilverLedger.expect`); ``written()``
    gives the Delta version the progress rows last recorded per ``(source, relation id, kind)``."""
    targets = list(targets)
    recorded: dict = {}

    def recorded_versions():
        if "v" not in recorded:
            recorded["v"] = written()
        return recorded["v"]

    def one(target) -> None:
        kind, ref, app_id, work = target
        context = {"table": work.qualified_name, "source": work.source}
        newest = ledger.newest(tables, ref, app_id)
        if newest // STEPS_PER_VERSION > version:
            raise StateError(
                f"{kind} {ref} holds writes of apply version {newest // STEPS_PER_VERSION}, but the state at "
                f"{state_at} is about to apply version {version}: the state was lost or restored from an older "
                f"copy, and applying now would skip writes. {REMEDY}", **context)
        ledger.check_batch(tables, ref, app_id, kind, **context)
        _check_present(tables, kind, ref, recorded_versions().get((work.source, work.relation_id, kind)), context)

    if len(targets) <= 1:
        for target in targets:
            one(target)
        return
    with ThreadPoolExecutor(max_workers=max(1, parallelism)) as pool:
        for _ in pool.map(one, targets):
            pass


def _check_present(tables: SparkTables, kind: str, ref: TableRef, recorded: int | None, context: dict) -> None:
    if recorded is None:
        return
    current = tables.newest_version(ref)
    if current is None:
        raise StateError(
            f"{kind} {ref} does not exist, but the state says a batch left it at Delta version {recorded}: the "
            f"silver location changed (silver.path, silver.table_template) or the table was removed. Point the "
            f"configuration back at it, or {REMEDY[0].lower() + REMEDY[1:]}", **context)
    if current < recorded:
        raise StateError(
            f"{kind} {ref} is at Delta version {current}, but the state says a batch left it at version {recorded}: "
            f"the table was replaced by an older copy or created again. {REMEDY}", **context)

