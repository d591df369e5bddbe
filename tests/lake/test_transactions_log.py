"""The transactions log built on the driver (a batch of few transactions) holds the rows the ways of a
batch of many give (rows counted on the driver; groups collected through Arrow; lists summed in Spark):
real PostgreSQL captures, every way in each batch."""

from __future__ import annotations

import copy
from dataclasses import replace

import pyarrow as pa
import pytest
from golden.loader import load_capture, load_expected

import cdc_apply.lake.books.batch_logs as batch_logs
from cdc_apply.pgoutput import decode_message, parse_lsn

pytestmark = pytest.mark.spark

# (scenario, config, the checkpoint the capture is applied through, extra config): prepared, streamed
# and empty transactions with logical decoding messages; truncates with every option; quarantined
# changes (multi-dimensional arrays) beside good ones.
CASES = [
    ("transactions", "v3_twophase_stream", "messages", {}),
    ("truncate", "v1", None, {}),
    ("types", "v1_binary", None, {"apply": {"on_error": "quarantine"}}),
]
DECIDING = {ord("C"), ord("c"), ord("K")}


def _capture(scenario: str, config: str, through: str | None) -> list[tuple]:
    """The capture's bronze rows, up to the first commit after checkpoint ``through`` when given."""
    limit = next(parse_lsn(c["lsn"]) for c in load_expected(scenario) if c["name"] == through) if through else None
    rows = []
    for seq, lsn, _, payload in load_capture(scenario, config):
        if limit is not None and payload[0] in DECIDING and decode_message(payload).commit_lsn > limit:
            break
        rows.append(("golden", seq, lsn, payload))
    return rows


def _rows(log, spark) -> list[tuple]:
    """The log's rows as Spark reads them back, from a DataFrame or from the Arrow table built on the driver."""
    if log is None:
        return []
    if isinstance(log, pa.Table):
        log = spark.createDataFrame(log)
    return sorted((tuple(r) for r in log.drop("applied_at").collect()), key=repr)


def _built(original, logs, plan, args, rows_max: int, groups_max: int) -> list[tuple]:
    """The log ``original`` builds as a batch of many transactions does, with these limits of what is
    collected to the driver (the module's own put back after)."""
    limits = batch_logs.PER_TXN_COUNTS_MAX, batch_logs.COLLECTED_ROWS_MAX, batch_logs.COLLECTED_GROUPS_MAX
    batch_logs.PER_TXN_COUNTS_MAX, batch_logs.COLLECTED_ROWS_MAX, batch_logs.COLLECTED_GROUPS_MAX = \
        -1, rows_max, groups_max
    try:
        return _rows(original(logs, plan, *args), logs.spark)
    finally:
        batch_logs.PER_TXN_COUNTS_MAX, batch_logs.COLLECTED_ROWS_MAX, batch_logs.COLLECTED_GROUPS_MAX = limits


@pytest.mark.parametrize("scenario,config,through,extra", CASES, ids=[f"{s}-{c}" for s, c, _, _ in CASES])
def test_the_log_built_from_counts_per_transaction_equals_the_ones_of_a_batch_of_many_transactions(
        scenario, config, through, extra, lake_factory, monkeypatch):
    """Each batch's log is built all four ways, empty transactions skipped and kept, while the job runs:
    from the decode's counts per transaction, and as in a batch of many transactions, from each change's
    transaction and relation version counted on the driver, from counts per (transaction, relation
    version) collected through Arrow and summed into lists in Spark."""
    original = batch_logs.BatchLogs._transactions
    compared: dict[bool, list] = {True: [], False: []}

    def four_ways(self, plan, *args):
        assert batch_logs.counts_per_transaction(plan)
        for skip in (True, False):
            logs = copy.copy(self)
            logs.config = replace(self.config, apply=replace(self.config.apply, skip_empty_transactions=skip))
            from_counts = _rows(original(logs, plan, *args), logs.spark)
            counted = _built(original, logs, plan, args, batch_logs.COLLECTED_ROWS_MAX, batch_logs.COLLECTED_GROUPS_MAX)
            collected = _built(original, logs, plan, args, -1, batch_logs.COLLECTED_GROUPS_MAX)
            summed = _built(original, logs, plan, args, -1, -1)
            compared[skip].append((from_counts, counted, collected, summed))
        return original(self, plan, *args)

    lake = lake_factory("txlog", **extra)
    lake.land(_capture(scenario, config, through))
    monkeypatch.setattr(batch_logs.BatchLogs, "_transactions", four_ways)
    lake.apply()
    assert compared[True] and compared[False]
    for skip, built in compared.items():
        for from_counts, counted, collected, summed in built:
            assert from_counts == counted, f"rows counted on the driver, skip_empty_transactions = {skip}"
            assert from_counts == collected, f"groups collected through Arrow, skip_empty_transactions = {skip}"
            assert from_counts == summed, f"summed in Spark, skip_empty_transactions = {skip}"
    skipped = [row for from_counts, *_ in compared[True] for row in from_counts]
    kept = [row for from_counts, *_ in compared[False] for row in from_counts]
    tables = [t for row in skipped for t in row[12]]
    assert any(t.inserts for t in tables)
    if scenario == "transactions":   # a transaction of logical decoding messages alone is not empty
        assert any(not row[12] for row in skipped)
    else:
        assert all(row[12] for row in skipped) and len(kept) == len(skipped)
    if scenario == "truncate":
        assert any(t.truncated and t.cascade and t.restart_identity for t in tables)
    assert lake.state("transactions").count() == len(skipped)
