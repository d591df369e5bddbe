"""One batch's records: what its micro-batch said (:class:`Landed`), and what its silver tables share
(:class:`BatchContext`).

The pipeline builds one :class:`BatchContext` per batch once the decode's counts are in, and hands it
to :class:`~cdc_apply.lake.silver_tables.SilverTables` for each table (tables run in threads: nothing in it
changes, and each table returns what it did instead of writing shared state).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from cdc_apply.planning.plan import BatchPlan
from cdc_apply.planning.snapshot_loads import SnapshotLoad
from cdc_apply.planning.table_plan import TableWork


@dataclass(frozen=True)
class Landed:
    """What a micro-batch says of each source it holds, and what the batch reads from bronze by it."""

    stats: Mapping[str, Any]     # source -> its rows of the micro-batch: first/last seq, count, payload bytes
    last: Mapping[str, int]      # source -> the last bronze seq the batch applies (as its format prepared it)
    prepared: Mapping[str, Any]  # source -> its format's preparation (cdc_apply.lake.sources)
    small: bool                  # payloads of at most pipeline.FRESH_CACHE_BYTES: bronze read once, logs beside tables
    lag: Future                  # the lag's query, running beside the batch (ApplyPipeline._bronze_lag)
    started: float               # time.monotonic() when the batch began
    bronze_rows: Any = None      # a large batch's rows read from bronze's files (bronze_contract.count_runs)
    local: Any = None            # a local batch's rows on the driver, Arrow (cdc_apply.lake.local_batch)


@dataclass(frozen=True)
class BatchContext:
    """What one batch's silver and history writes share."""

    version: int                 # the batch's apply version (every write is guarded by it: cdc_apply.lake.books.ledger)
    plan: BatchPlan
    decoded: Any                 # the batch's decoded change rows: a persisted DataFrame
    # The batch's snapshot loads (cdc_apply.planning.snapshot_loads) by (source, relation id).
    loads: Mapping[tuple[str, int], tuple[SnapshotLoad, ...]]
    messages: Callable[..., Any]  # bronze's messages (every source's) on a session, which the loads read
    fault: Callable[[str], None]  # tests inject crashes here (see ApplyPipeline)
    # Sources with a change ever quarantined: silver may hold a row PostgreSQL no longer has.
    quarantined_sources: frozenset[str] = frozenset()

    @staticmethod
    def group_loads(loads: Iterable[SnapshotLoad]) -> dict[tuple[str, int], tuple[SnapshotLoad, ...]]:
        """``loads`` by (source, relation id), in their order."""
        grouped: dict[tuple[str, int], tuple[SnapshotLoad, ...]] = {}
        for load in loads:
            key = (load.source, load.relation_id)
            grouped[key] = grouped.get(key, ()) + (load,)
        return grouped

    def loads_of(self, work: TableWork) -> tuple[SnapshotLoad, ...]:
        """The batch's snapshot loads of ``work``'s table."""
        return self.loads.get((work.source, work.relation_id), ())

    @property
    def bounds(self) -> dict[str, tuple[int, int]]:
        """Per source, the bronze seqs the batch covers: (the previous batch's applied seq, its last)."""
        return {s: (b.previous.applied_seq, b.last_seq) for s, b in self.plan.sources.items()}
