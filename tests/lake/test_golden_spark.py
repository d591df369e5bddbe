"""Real PostgreSQL 18 captures through the Spark job: silver equals what PostgreSQL returned.

Each case lands a capture in bronze in chunks cut at chosen checkpoints (a
chunk ends before the first commit after the checkpoint), runs the job once
per chunk, and compares every table of the checkpoint, typed, with
PostgreSQL's own contents. One capture is applied in a single run, the others
in several: the same semantics must hold either way.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from cdc_apply.pgoutput import decode_message, parse_lsn
from cdc_apply.testing.compare import silver_rows
from golden.loader import load_capture, load_expected
from golden.oracle import canonical, column_types, options_for, skipped_columns, typed_expected

pytestmark = pytest.mark.spark

# (scenario, config, checkpoints after which the job runs and silver is compared)
# The transactions, replica_identity and truncate captures run through Spark in the differential
# suite's live workload (tests/lake/test_differential.py) and through the same planning core in
# tests/planning/test_reference_golden.py; here, the two whose checks that suite cannot make: every
# mapped type, binary, compared typed; DDL inside a streamed, two-phase transaction.
CASES = [
    ("ddl", "v3_twophase_stream", ["drop_column", "ddl_in_streamed_transaction"]),
    ("types", "v1_binary", ["user_types"]),
]
REJECTED_TABLES = {"public.types_array_multi"}  # multi-dimensional arrays: quarantined by policy
DECIDING = {ord("C"), ord("c"), ord("K")}


def _chunks(capture, checkpoints):
    """Bronze rows cut right before the first commit after each named checkpoint's LSN."""
    limits = [parse_lsn(c["lsn"]) for c in checkpoints]
    out, current, k = [], [], 0
    for seq, lsn, xid, payload in capture:
        if k < len(limits) and payload[0] in DECIDING and decode_message(payload).commit_lsn > limits[k]:
            out.append(current)
            current, k = [], k + 1
        current.append(("golden", seq, lsn, payload))
    out.append(current)
    return out[: len(limits)]


@pytest.mark.parametrize("scenario,config,points", CASES, ids=[f"{s}-{c}" for s, c, _ in CASES])
def test_silver_equals_postgres_at_each_checkpoint(scenario, config, points, lake_factory):
    options = options_for(scenario)
    lake = lake_factory(f"golden_{scenario}", apply={"numeric": options.numeric, "on_error": "quarantine"})
    expected = {c["name"]: c for c in load_expected(scenario)}
    checkpoints = [expected[p] for p in points]
    pipeline = None
    for chunk, checkpoint in zip(_chunks(load_capture(scenario, config), checkpoints), checkpoints):
        lake.land(chunk)
        pipeline, _ = lake.apply()
        history = pipeline.histories["golden"]
        for name, table in checkpoint["tables"].items():
            if name in REJECTED_TABLES:
                continue
            relation = history.relations.get(table["oid"])
            first = relation.versions[0] if relation else None
            names = [c["name"] for c in table["columns"]]
            types = column_types(table, history.types, options)
            want = typed_expected(table, types)
            if first is None:
                assert want == [], f"{name}: PostgreSQL has rows but nothing was applied"
                continue
            silver = lake.silver(first.namespace, first.name).select(*[F.col(f"`{n}`") for n in names])
            skip = skipped_columns(scenario, name, names, "binary" in config)
            assert canonical(silver_rows(silver, names), skip) == canonical(want, skip), (
                f"{scenario}/{config}: {name} differs at checkpoint {checkpoint['name']}")
    if scenario == "types":
        errors = [r.error for r in lake.state("quarantine").collect()]
        assert errors and all("multi-dimensional arrays are not supported" in e for e in errors)
