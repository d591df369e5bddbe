"""A small batch on the driver (cdc_apply.lake.local_batch): the same tables and logs as the general path."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pytest
from golden.loader import load_capture, load_expected
from golden.oracle import canonical, column_types, options_for, skipped_columns, typed_expected

from cdc_apply.delta.engine import spark_tables
from cdc_apply.errors import BronzeError
from cdc_apply.lake.local_batch import Bounds, bounds_of, count_local
from cdc_apply.pgoutput import decode_message, parse_lsn
from cdc_apply.testing.compare import silver_rows

# What each bookkeeping table holds that depends on when a batch ran, not on what it applied.
CLOCK_COLUMNS = {"transactions": ["applied_at"], "messages": [], "quarantine": ["quarantined_at"],
                 "schema_history": ["recorded_at"], "progress": ["updated_at", "lag_seconds", "batch_id"]}


def _rows(*rows) -> pa.Table:
    return pa.table({"source": [r[0] for r in rows], "seq": [r[1] for r in rows], "lsn": [r[1] * 8 for r in rows],
                     "payload": [r[2] for r in rows]},
                    schema=pa.schema([("source", pa.string()), ("seq", pa.int64()), ("lsn", pa.int64()),
                                      ("payload", pa.binary())]))


def test_a_local_batch_bounds_each_source_by_its_first_and_last_seq_rows_and_payload_bytes():
    rows = _rows(("a", 3, b"BBB"), ("b", 7, None), ("a", 1, b"C"), ("a", 2, b""), ("b", 5, b"II"))
    assert bounds_of(rows) == {"a": Bounds("a", 3, 1, 3, 4), "b": Bounds("b", 7, 5, 2, 2)}


def test_a_local_batch_counts_its_rows_per_source_and_names_a_seq_landed_twice():
    assert count_local(_rows(("a", 1, b"B"), ("b", 1, b"B"), ("a", 2, b"C"))) == {"a": 2, "b": 1}
    with pytest.raises(BronzeError) as info:
        count_local(_rows(("a", 1, b"B"), ("a", 4, b"I"), ("a", 2, b"C"), ("a", 4, b"I"), ("a", 4, b"I")))
    text = str(info.value)
    assert "landed more than once (3 rows)" in text and "source=a" in text and "seq=4" in text


@pytest.mark.spark
def test_the_payload_tests_in_python_answer_as_the_spark_column_tests(spark):
    import random

    from pyspark.sql import functions as F

    from cdc_apply.lake.sources.payload_columns import (
        is_change,
        is_control,
        is_directive,
        is_snapshot_held,
        not_an_insert,
        payload_is_control,
        payload_kinds,
    )
    from cdc_apply.pgoutput import messages as m

    seed = random.randrange(1 << 30)
    print(f"payload tests' seed: {seed}")
    rng = random.Random(seed)
    directive = b"cdc_apply.snapshot\x00{}"
    payloads = [None, b"", b"M", b"I", b"I\x00\x00\x00\x02", b"U\x00\x00\x00\x02rest", b"T\x00\x00\x00\x02",
                b"M\x01" + bytes(8) + directive, b"M\x00\x00\x00\x07\x01" + bytes(8) + directive,
                b"M\x01" + bytes(8) + b"cdc_apply", b"M\x01" + bytes(8) + b"other.prefix\x00"]
    kinds = sorted(m.CONTROL_TYPES | m.CHANGE_TYPES) + [ord("Q"), 0, 255]
    for _ in range(300):
        payloads.append(bytes([rng.choice(kinds)]) + rng.choice([b"", b"\x00\x00\x00\x02", rng.randbytes(12)]))
    df = spark.createDataFrame([(k, p) for k, p in enumerate(payloads)], "k INT, payload BINARY")
    # ranged: the control scan's range test (for Parquet's row-group statistics) keeps every row it keeps.
    got, ranged = {}, {}
    for r in df.select("k", (is_control() | is_directive()).alias("driver"),
                       F.coalesce(is_change(), F.lit(False)).alias("change"), is_snapshot_held().alias("held"),
                       is_control().alias("control"), not_an_insert().alias("ranged")).collect():
        got[r.k], ranged[r.k] = (bool(r.driver), bool(r.change), bool(r.held), bool(r.control)), r.ranged
    for k, payload in enumerate(payloads):
        assert (*payload_kinds(payload), payload_is_control(payload)) == got[k], payload
        assert ranged[k] is (payload is None or payload[:1] != b"I"), payload
        assert ranged[k] or not (got[k][0] or got[k][2]), payload


def _tables(lake) -> dict[str, object]:
    silver = lake.root / "silver"
    out = {f"silver {ns.name}.{t.name}": lake.spark.read.format("delta").load(str(t))
           for ns in sorted(silver.iterdir()) for t in sorted(ns.iterdir())}
    for table, clock in CLOCK_COLUMNS.items():
        out[table] = lake.state(table).drop(*clock)
    return out


# The golden captures applied on both paths, each its own source named after its scenario.
CAPTURES = {"truncate": "v4_parallel_binary_twophase", "replica_identity": "v2_stream_binary",
            "ddl": "v3_twophase_stream", "types": "v1_binary"}
# Captures cut right after these PostgreSQL checkpoints (the rest one more chunk): the driver-local path's
# silver is compared, typed, with what PostgreSQL returned there. The other captures' checkpoints run
# through Spark in the differential suite's live workload (tests/lake/test_differential.py) and through
# the planning core in tests/planning/test_reference_golden.py; these two are the checks that suite cannot
# make: every mapped type, binary, compared typed; DDL inside a streamed, two-phase transaction.
GOLDEN_POINTS = {"ddl": ["drop_column", "ddl_in_streamed_transaction"], "types": ["user_types"]}
# multi-dimensional arrays without [tables."ns.t"] array_dimensions: quarantined by policy
REJECTED_TABLES = {"public.types_array_multi"}
DECIDING = {ord("C"), ord("c"), ord("K")}


def _numeric(scenario: str) -> str:
    return options_for(scenario).numeric


def _even(rows: list, chunks: int) -> list[list]:
    size = -(-len(rows) // chunks)
    return [rows[start:start + size] for start in range(0, len(rows), size)]


def _cut(scenario: str, rows: list) -> tuple[list[list], dict[int, str]]:
    """A capture's bronze rows in at least three chunks (transactions carried from batch to batch), cut
    right before the first commit after each of its golden checkpoints, and which chunk each checkpoint
    follows."""
    points = GOLDEN_POINTS.get(scenario, [])
    if not points:
        return _even(rows, 3), {}
    expected = {c["name"]: c for c in load_expected(scenario)}
    limits = [parse_lsn(expected[p]["lsn"]) for p in points]
    chunks: list[tuple[list, str | None]] = []
    current: list = []
    for row in rows:
        payload = row[3]
        decides = payload[0] in DECIDING and len(chunks) < len(limits)
        if decides and decode_message(payload).commit_lsn > limits[len(chunks)]:
            chunks.append((current, points[len(chunks)]))
            current = []
        current.append(row)
    chunks.append((current, points[len(chunks)] if len(chunks) < len(points) else None))
    chunks = [chunk for chunk in chunks if chunk[0]]
    while len(chunks) < 3:   # the largest chunk halved; its checkpoint follows the second half
        i = max(range(len(chunks)), key=lambda k: len(chunks[k][0]))
        part, point = chunks[i]
        chunks[i:i + 1] = [(part[:len(part) // 2], None), (part[len(part) // 2:], point)]
    return [part for part, _ in chunks], {i: point for i, (_, point) in enumerate(chunks) if point}


def _apply_sources_in_chunks(lake, cut: dict[str, list[list]], after=None) -> None:
    """The n-th chunks of every source landed as one commit and applied, so each batch applies every
    source at once; ``after(n, pipeline)`` runs after the n-th batch."""
    for n in range(max(len(parts) for parts in cut.values())):
        lake.land([row for parts in cut.values() if n < len(parts) for row in parts[n]])
        pipeline, _ = lake.apply()
        if after is not None:
            after(n, pipeline)


def _golden_differences(lake, scenario: str, checkpoint: dict, pipeline) -> tuple[list[str], int]:
    """Where the scenario's silver (``<silver>/<scenario>/<namespace>/<table>``) differs from PostgreSQL at
    ``checkpoint``, typed, and how many tables were compared."""
    from pyspark.sql import functions as F

    options = options_for(scenario)
    history = pipeline.histories[scenario]
    failures, compared = [], 0
    for name, table in checkpoint["tables"].items():
        if name in REJECTED_TABLES:
            continue
        relation = history.relations.get(table["oid"])
        first = relation.versions[0] if relation else None
        names = [c["name"] for c in table["columns"]]
        want = typed_expected(table, column_types(table, history.types, options))
        if first is None:
            if want:
                failures.append(f"{scenario}: {name}: PostgreSQL has rows but nothing was applied")
            continue
        path = lake.root / "silver" / scenario / first.namespace / first.name
        silver = lake.spark.read.format("delta").load(str(path)).select(*[F.col(f"`{n}`") for n in names])
        skip = skipped_columns(scenario, name, names, "binary" in CAPTURES[scenario])
        compared += 1
        if canonical(silver_rows(silver, names), skip) != canonical(want, skip):
            failures.append(f"{scenario}/{CAPTURES[scenario]}: {name} differs at checkpoint {checkpoint['name']}")
    return failures, compared


def _source_tables(lake, source: str) -> dict[str, object]:
    """One source's silver tables (``<silver>/<source>/<namespace>/<table>``) and bookkeeping rows."""
    from pyspark.sql import functions as F

    silver = lake.root / "silver" / source
    out = {f"silver {ns.name}.{t.name}": lake.spark.read.format("delta").load(str(t))
           for ns in sorted(silver.iterdir()) for t in sorted(ns.iterdir())}
    for table, clock in CLOCK_COLUMNS.items():
        out[table] = lake.state(table).where(F.col("source") == source).drop(*clock)
    return out


@dataclass
class BothPaths:
    """A group of captures (one ``apply.numeric`` setting) applied in chunks on the general path and
    on the driver-local path: each source's tables and rows on both, what the local path collected, how
    many of its batches decoded on the driver, and where its silver differed from PostgreSQL at the golden
    checkpoints (with the number of tables compared and the quarantine's errors per source)."""

    general: dict[str, dict[str, object]]
    local: dict[str, dict[str, object]]
    general_rows: dict[str, dict[str, list[str]]]
    local_rows: dict[str, dict[str, list[str]]]
    collected: list
    decoded: int
    batches: int
    golden_failures: dict[str, list[str]]
    golden_compared: dict[str, int]
    quarantined: dict[str, list[str]]


def _apply_both_ways(lake_factory, numeric: str) -> BothPaths:
    from cdc_apply.lake import decode_stage, pipeline

    scenarios = [s for s in CAPTURES if _numeric(s) == numeric]
    cuts = {s: _cut(s, [(s, seq, lsn, payload) for seq, lsn, _xid, payload in load_capture(s, CAPTURES[s])])
            for s in scenarios}
    cut = {s: parts for s, (parts, _) in cuts.items()}
    extra = {"apply": {"numeric": numeric, "on_error": "quarantine"}, "silver": {"source_in_path": True}}
    general = lake_factory(f"general_{numeric}", **extra)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(pipeline, "collect_micro_batch", lambda df, planned: None)
        _apply_sources_in_chunks(general, cut)
    local = lake_factory(f"local_{numeric}", **extra)
    collected, decoded = [], []
    golden_failures: dict[str, list[str]] = {s: [] for s in scenarios}
    golden_compared = {s: 0 for s in scenarios}

    def compare_golden(n: int, applied) -> None:
        for scenario in scenarios:
            point = cuts[scenario][1].get(n)
            if point is not None:
                checkpoint = next(c for c in load_expected(scenario) if c["name"] == point)
                failures, compared = _golden_differences(local, scenario, checkpoint, applied)
                golden_failures[scenario] += failures
                golden_compared[scenario] += compared

    collect, decode = pipeline.collect_micro_batch, decode_stage.decode_local
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(pipeline, "collect_micro_batch",
                        lambda df, planned: collected.append(collect(df, planned)) or collected[-1])
        patched.setattr(decode_stage, "decode_local", lambda rows, plan: decoded.append(1) or decode(rows, plan))
        _apply_sources_in_chunks(local, cut, compare_golden)
    quarantined: dict[str, list[str]] = {s: [] for s in scenarios}
    for r in local.state("quarantine").select("source", "error").collect():
        quarantined[r.source].append(r.error)
    tables = {("general", s): _source_tables(general, s) for s in scenarios}
    tables.update({("local", s): _source_tables(local, s) for s in scenarios})
    # Every table of both lakes read by one Spark job.
    named = [(key, name, df) for key, frames in tables.items() for name, df in frames.items()]
    rows = _json_rows({str(i): df for i, (_, _, df) in enumerate(named)})
    per_source: dict[tuple[str, str], dict[str, list[str]]] = {key: {} for key in tables}
    for i, (key, name, _) in enumerate(named):
        per_source[key][name] = rows[str(i)]
    return BothPaths({s: tables["general", s] for s in scenarios}, {s: tables["local", s] for s in scenarios},
                     {s: per_source["general", s] for s in scenarios}, {s: per_source["local", s] for s in scenarios},
                     collected, len(decoded), max(len(parts) for parts in cut.values()), golden_failures,
                     golden_compared, quarantined)


@pytest.fixture(scope="module")
def both_paths(lake_factory):
    """The captures applied on both paths, a lake per path for each ``apply.numeric`` setting (the
    captures sharing it are sources of one lake: 3 batches a path, not 3 a capture), built when a
    test first asks for its setting."""
    done: dict[str, BothPaths] = {}

    def get(scenario: str) -> BothPaths:
        numeric = _numeric(scenario)
        if numeric not in done:
            done[numeric] = _apply_both_ways(lake_factory, numeric)
        return done[numeric]

    return get


@pytest.mark.spark
@pytest.mark.parametrize("scenario", list(CAPTURES))
def test_a_capture_applied_on_the_driver_leaves_the_tables_and_logs_the_general_path_leaves(scenario, both_paths):
    """The capture is one source of a lake whose batches also apply the other captures of its
    ``apply.numeric`` setting, on each path; its source's silver tables and bookkeeping rows are compared."""
    run = both_paths(scenario)
    # Every micro-batch came to the driver; a batch that reads a carried transaction's rows again from
    # bronze decodes them in Spark, the others on the driver.
    assert len(run.collected) == run.batches > 1 and all(rows is not None for rows in run.collected) and run.decoded
    expected, got = run.general[scenario], run.local[scenario]
    assert sorted(got) == sorted(expected)
    assert any(name.startswith("silver ") for name in expected)
    for name, df in expected.items():
        assert got[name].schema == df.schema, name
    for name in expected:
        assert run.local_rows[scenario][name] == run.general_rows[scenario][name], name


@pytest.mark.spark
@pytest.mark.parametrize("scenario", list(GOLDEN_POINTS))
def test_a_golden_capture_applied_on_the_driver_equals_postgres_at_each_checkpoint(scenario, both_paths):
    """Every table of the capture's checkpoints, typed, equals PostgreSQL's contents there (the capture
    cut after each checkpoint, each chunk one batch; the other captures of its ``apply.numeric`` setting
    applied beside it, as other sources)."""
    run = both_paths(scenario)
    assert not run.golden_failures[scenario], "\n".join(run.golden_failures[scenario])
    assert run.golden_compared[scenario] >= len(GOLDEN_POINTS[scenario])


@pytest.mark.spark
def test_a_multi_dimensional_array_in_a_golden_capture_is_quarantined_by_policy(both_paths):
    """These lakes leave the table's array_dimensions unset: its columns are one-dimensional, and each 2-D or
    3-D value is quarantined naming the option (tests/lake/test_multi_dimensional_arrays.py sets it)."""
    errors = both_paths("types").quarantined["types"]
    assert errors and all("-dimensional array in a column of 1 dimension" in e and "array_dimensions" in e
                          and "table=public.types_array_multi" in e for e in errors)


def _json_rows(tables: dict[str, object]) -> dict[str, list[str]]:
    """Each table's rows as sorted JSON text (Python's dates do not reach PostgreSQL's infinity), all
    tables read by one Spark job: a job per table was a third of this module's time."""
    from functools import reduce

    from pyspark.sql import functions as F

    frames = [df.select(F.lit(name).alias("table"), F.to_json(F.struct(*[df[c] for c in df.columns])).alias("row"))
              for name, df in tables.items()]
    out: dict[str, list[str]] = {name: [] for name in tables}
    for r in reduce(lambda a, b: a.unionAll(b), frames).collect():
        out[r.table].append(r.row)
    return {name: sorted(rows) for name, rows in out.items()}


def _assert_same_rows(got: dict[str, object], expected: dict[str, object]) -> None:
    rows, wanted = _json_rows(got), _json_rows(expected)
    for name in expected:
        assert rows[name] == wanted[name], name


@pytest.mark.spark
def test_a_capture_applied_over_spark_connect_runs_its_small_batches_on_the_driver_and_leaves_the_same_tables(
        spark, connect_session, lake_factory, monkeypatch):
    """Over Spark Connect the plan says no size: a batch comes to the driver once its bounds count its
    payloads, and the tables and logs are those a classic session leaves."""
    import io

    from cdc_apply.lake import pipeline
    from cdc_apply.lake.pipeline import ApplyPipeline
    from cdc_apply.testing.connect_server import connect_mode

    capture = load_capture("truncate", "v4_parallel_binary_twophase")
    classic = lake_factory("classic_connect_twin")
    _apply_sources_in_chunks(classic, {"golden": _even([("golden", seq, lsn, payload)
                                                         for seq, lsn, _xid, payload in capture], 3)})
    remote = lake_factory("over_connect")
    collected = []
    collect = pipeline.collect_micro_batch
    monkeypatch.setattr(pipeline, "collect_micro_batch",
                        lambda df, planned: collected.append(collect(df, planned)) or collected[-1])
    rows = [("golden", seq, lsn, payload) for seq, lsn, _xid, payload in capture]
    size = -(-len(rows) // 3)
    for start in range(0, len(rows), size):
        remote.land(rows[start:start + size])   # landed through the classic session
        with connect_mode():
            ApplyPipeline.open(spark_tables(connect_session), remote.config, out=io.StringIO()).run(once=True)
    assert sum(rows is not None for rows in collected) == 3   # each batch's rows, once its bounds were known
    expected, got = _tables(classic), _tables(remote)
    assert sorted(got) == sorted(expected)
    _assert_same_rows(got, expected)
