"""Bronze rows that break the contract are errors naming source and seq (or quarantine rows), never
skipped: unknown, empty and null payloads, a (source, seq) landed twice, a row appended below the
applied seq."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from shared_lake import SharedLake

from cdc_apply.errors import CdcApplyError
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def shared(spark, tmp_path_factory):
    """One lake for the module's batches: each test lands its own source into its own silver table
    (namespace = source) and applies its micro-batches with ApplyPipeline.process (shared_lake.py)."""
    return SharedLake(spark, tmp_path_factory.mktemp("bronze_contract"))


def _good(source: str, ids=(1, 2)):
    b = StreamBuilder(source)
    t = b.relation(source, "t", [("id", "int4", True), ("v", "text", False)])
    for i in ids:
        with b.transaction() as tx:
            tx.insert(t, {"id": i, "v": f"v{i}"})
    return b.rows()


def _land_nullable(shared, bronze: str, rows):
    """Bronze as a user might create it: the same columns, payload nullable; returns the micro-batch."""
    path = str(shared.bronze_path(bronze))
    schema = "source STRING, seq BIGINT, lsn BIGINT, payload BINARY, landed_at TIMESTAMP"
    shared.spark.createDataFrame([(*r, None) for r in rows], schema).coalesce(1) \
        .write.format("delta").mode("append").save(path)
    return shared.newest_commit(bronze)


def _ids(shared, source: str):
    return sorted((r.id, r.v) for r in shared.silver(source, "t").collect())


def test_an_unknown_message_type_stops_the_batch_naming_source_seq_and_lsn(shared):
    rows = _good("unknown_type")
    last = rows[-1]
    batch = shared.land(rows + [("unknown_type", last[1] + 1, 0x1234, b"Zgarbage")])
    with pytest.raises(CdcApplyError) as info:
        shared.process(batch)
    text = str(info.value)
    assert "unknown message type 'Z'" in text and f"seq={last[1] + 1}" in text and "source=unknown_type" in text
    assert not shared.silver_exists("unknown_type", "t")


def test_unknown_empty_and_null_payloads_become_quarantine_rows_and_the_rest_applies(shared):
    rows = _good("bad_payloads")
    n = rows[-1][1]
    batch = _land_nullable(shared, "nullable", rows + [("bad_payloads", n + 1, 1, b"Zgarbage"),
                                                       ("bad_payloads", n + 2, 2, b""), ("bad_payloads", n + 3, 3, None)])
    shared.process(batch, bronze="nullable", apply={"on_error": "quarantine"})
    assert _ids(shared, "bad_payloads") == [(1, "v1"), (2, "v2")]
    quarantined = {r.seq: r.error for r in shared.state("quarantine", "bad_payloads").collect()}
    assert set(quarantined) == {n + 1, n + 2, n + 3}
    assert "unknown message type 'Z'" in quarantined[n + 1]
    assert "empty message" in quarantined[n + 2]
    assert "null payload" in quarantined[n + 3]


def test_an_unknown_message_type_inside_a_rolled_back_transaction_is_still_an_error(shared):
    b = StreamBuilder("unknown_in_abort")
    t = b.relation("unknown_in_abort", "t", [("id", "int4", True), ("v", "text", False)])
    big = b.stream()
    with big.block() as blk:
        blk.insert(t, {"id": 1, "v": "dropped"})
    big.abort()
    rows = b.rows()
    blocks = [i for i, r in enumerate(rows) if r[3][:1] == b"I"]
    source, seq, lsn, _ = rows[blocks[0]]
    rows[blocks[0]] = (source, seq, lsn, b"Q\x00\x01")
    batch = shared.land(rows)
    with pytest.raises(CdcApplyError) as info:
        shared.process(batch)
    assert f"seq={seq}" in str(info.value) and "unknown message type 'Q'" in str(info.value)


@pytest.mark.parametrize("budget", ["driver", "memory", "bronze"],
                         ids=["rows on the driver", "bronze copy in memory", "bronze read each time"])
def test_a_source_seq_landed_twice_stops_the_batch_before_anything_is_applied(shared, monkeypatch, budget):
    from cdc_apply.lake import local_batch, pipeline

    if budget != "driver":
        monkeypatch.setattr(local_batch, "LOCAL_BATCH_BYTES", -1)
    if budget == "bronze":
        monkeypatch.setattr(pipeline, "FRESH_CACHE_BYTES", 0)
    source = f"duplicate_seq_{budget}"
    rows = _good(source, ids=(1, 2))
    insert = next(r for r in rows if r[3][:1] == b"I")
    batch = shared.land(rows + [insert])
    with pytest.raises(CdcApplyError) as info:
        shared.process(batch)
    text = str(info.value)
    assert "landed more than once" in text and f"seq={insert[1]}" in text and f"source={source}" in text
    assert not shared.silver_exists(source, "t")


def test_a_batch_over_the_memory_budget_reads_bronze_each_time_and_applies_the_same(shared, monkeypatch):
    from cdc_apply.lake import pipeline

    monkeypatch.setattr(pipeline, "FRESH_CACHE_BYTES", 0)   # no batch is kept in memory
    rows = _good("over_budget", ids=(1, 2, 3))
    middle = len(rows) // 2   # the second transaction begins in the first batch, commits in the second
    shared.process(shared.land(rows[:middle]))
    assert _ids(shared, "over_budget") == [(1, "v1")]
    shared.process(shared.land(rows[middle:]))
    assert _ids(shared, "over_budget") == [(1, "v1"), (2, "v2"), (3, "v3")]


def test_a_micro_batch_of_exactly_the_next_seqs_is_applied_as_read_and_one_with_a_gap_from_bronze_by_seq(
        shared, monkeypatch):
    from cdc_apply.lake.pipeline import ApplyPipeline

    held = []
    holds = ApplyPipeline._holds_the_batch
    monkeypatch.setattr(ApplyPipeline, "_holds_the_batch",
                        lambda self, stats, last: held.append(holds(self, stats, last)) or held[-1])
    b = StreamBuilder("holds_the_batch")
    t = b.relation("holds_the_batch", "t", [("id", "int4", True), ("v", "text", False)])
    for i in (1, 2):
        with b.transaction() as tx:
            tx.insert(t, {"id": i, "v": "a"})
    shared.process(shared.land(b.rows()))
    with b.transaction() as tx:
        tx.update(t, {"id": 1, "v": "b"})
        tx.insert(t, {"id": 3, "v": "b"})
    rows = b.rows()[-4:]
    # the source's seqs jump by 10: gaps are allowed
    shared.process(shared.land([(r[0], r[1] + 10, *r[2:]) for r in rows]))
    assert held == [True, False]
    assert _ids(shared, "holds_the_batch") == [(1, "b"), (2, "a"), (3, "b")]


def test_a_seq_landed_twice_beside_a_missing_one_stops_a_batch_read_as_it_is(shared):
    rows = _good("duplicate_beside_gap", ids=(1, 2))
    insert = next(r for r in rows if r[3][:1] == b"I")
    missing = rows[len(rows) // 2]   # as many rows as seqs from the first to the last landed
    assert missing != insert
    batch = shared.land([r for r in rows if r != missing] + [insert])
    with pytest.raises(CdcApplyError) as info:
        shared.process(batch)
    assert "landed more than once" in str(info.value) and f"seq={insert[1]}" in str(info.value)
    assert not shared.silver_exists("duplicate_beside_gap", "t")


def test_a_row_appended_later_at_or_below_the_applied_seq_is_an_error(shared):
    rows = _good("late_row", ids=(1, 2, 3))
    middle = len(rows) // 2
    held = rows[middle]  # landed only after everything around it was applied
    shared.process(shared.land(rows[:middle] + rows[middle + 1:]))
    late = shared.land([held])   # the next micro-batch: the late row alone
    with pytest.raises(CdcApplyError) as info:
        shared.process(late)
    text = str(info.value)
    assert "below the applied seq" in text and f"seq={held[1]}" in text and "source=late_row" in text


def test_a_bronze_replay_after_a_lost_checkpoint_applies_nothing_again(shared):
    # Its own bronze, read by a streaming query with no checkpoint: the batch was applied without one (by
    # ApplyPipeline.process), so the query starts from bronze's first commit, as after a lost checkpoint.
    shared.process(shared.land(_good("replay", ids=(1, 2)), bronze="replay"), bronze="replay")
    assert not (shared.root / "checkpoints" / "replay").exists()
    _, printed = shared.stream("replay")
    assert _ids(shared, "replay") == [(1, "v1"), (2, "v2")]
    assert "0 txns applied" in printed


# -- proving (source, seq) unique from the files' runs (bronze_contract.count_runs) -------------------

def _read_settings(packed: bool) -> dict[str, str]:
    # Spark packs files into a partition up to a split size: packed, opening a file costs nothing and
    # one split takes the whole table; otherwise opening one costs a whole split.
    return {"spark.sql.files.openCostInBytes": "0" if packed else "134217728",
            "spark.sql.files.maxPartitionBytes": "134217728", "spark.sql.files.minPartitionNum": "1"}


def _bronze_of_files(spark, path, files, packed: bool):
    """A Delta table with one Parquet file per entry of ``files`` (each a list of (source, seq)), in that
    order, written by Spark, read back with every file in one partition (``packed``) or one a partition."""
    schema = "source STRING, seq BIGINT, lsn BIGINT, payload BINARY"
    for rows in files:
        frame = spark.createDataFrame([(s, q, q, b"x") for s, q in rows], schema).coalesce(1)
        frame.write.format("delta").mode("append").save(str(path))
    return spark.read.format("delta").load(str(path)), _read_settings(packed)


def _landed_files(spark, path, files, packed: bool):
    """:func:`_bronze_of_files`, its Parquet files written by pyarrow and committed by delta-rs, a commit
    each, as a lander writes a local bronze (no Spark job: a Spark append costs ~0.5 s)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    schema = pa.schema([("source", pa.string()), ("seq", pa.int64()), ("lsn", pa.int64()), ("payload", pa.binary())])
    for rows in files:
        table = pa.table([[s for s, _ in rows], [q for _, q in rows], [q for _, q in rows], [b"x"] * len(rows)],
                         schema=schema)
        write_deltalake(str(path), table, mode="append")
    bronze = spark.read.format("delta").load(str(path))
    assert len(bronze.inputFiles()) == len(files)   # a file an entry
    return bronze, _read_settings(packed)


def _count(spark, bronze, settings):
    from cdc_apply.lake.sources.bronze_contract import count_runs
    from cdc_apply.spark.session import session_settings

    with session_settings(spark, settings):
        assert bronze.rdd.getNumPartitions() == (1 if settings["spark.sql.files.openCostInBytes"] == "0"
                                                  else len(bronze.inputFiles()))
        return count_runs(bronze)


@pytest.mark.parametrize("packed", [False, True], ids=["a file a partition", "files packed in one partition"])
def test_files_of_consecutive_seqs_prove_the_batch_unique_without_counting_each_seq(spark, tmp_path, packed):
    files = [[("a", q) for q in range(1, 6)], [("a", q) for q in range(6, 9)] + [("b", q) for q in range(1, 4)],
             [("a", q) for q in range(20, 31)]]
    bronze, settings = _landed_files(spark, tmp_path / "bronze", files, packed)
    assert _count(spark, bronze, settings) == {"a": 19, "b": 3}


def test_a_seq_in_two_files_is_not_proven_unique_and_the_count_names_it(spark, tmp_path):
    from cdc_apply.lake.sources.bronze_contract import count_rows

    files = [[("a", q) for q in range(1, 6)], [("a", q) for q in range(5, 9)]]
    bronze, settings = _landed_files(spark, tmp_path / "bronze", files, packed=False)
    assert _count(spark, bronze, settings) is None
    with pytest.raises(CdcApplyError) as info:
        count_rows(bronze, bronze)
    assert "landed more than once" in str(info.value) and "seq=5" in str(info.value)


def test_unique_seqs_out_of_order_in_a_file_are_counted_each(spark, tmp_path):
    from cdc_apply.lake.sources.bronze_contract import count_rows

    files = [[("a", q) for q in (1, 3, 2, 4)]]
    bronze, settings = _landed_files(spark, tmp_path / "bronze", files, packed=False)
    assert _count(spark, bronze, settings) is None
    assert count_rows(bronze, bronze) == {"a": 4}


@given(layout=st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 12), st.integers(1, 6), st.booleans()),
                       min_size=1, max_size=3),
       packed=st.booleans())
@hyp_settings(max_examples=6)
def test_runs_never_prove_a_seq_landed_twice_unique(spark, tmp_path_factory, layout, packed):
    from collections import Counter

    # Each file is a run of one source's consecutive seqs, which runs of other files may overlap, or that
    # run backwards with its lowest seq twice.
    files = [[(source, q) for q in (range(start, start + length) if forwards
                                    else [*range(start + length - 1, start - 1, -1), start])]
             for source, start, length, forwards in layout]
    bronze, settings = _landed_files(spark, tmp_path_factory.mktemp("bronze"), files, packed)
    counted = _count(spark, bronze, settings)
    seen = Counter(row for rows in files for row in rows)
    if counted is not None:
        assert max(seen.values()) == 1
        assert counted == dict(Counter(s for s, _ in seen))


@pytest.mark.connect
@pytest.mark.system
def test_runs_prove_a_batch_unique_over_spark_connect(connect_spark, tmp_path):
    """Serverless and standard access mode are Spark Connect: the file metadata the proof groups by is
    read there too."""
    from cdc_apply.lake.sources.bronze_contract import count_runs

    files = [[("a", q) for q in range(1, 6)], [("a", q) for q in range(6, 9)]]
    bronze, _ = _bronze_of_files(connect_spark, tmp_path / "bronze", files, packed=False)
    assert count_runs(bronze) == {"a": 8}
    assert count_runs(bronze.union(bronze)) is None


def test_a_batch_whose_bronze_files_exceed_the_memory_budget_is_read_in_place_though_its_payloads_fit(
        shared, monkeypatch):
    from cdc_apply.lake import pipeline

    rows = _good("files_over_budget", ids=(1, 2, 3))
    payloads = sum(len(r[3]) for r in rows)
    batch = shared.land(rows)
    files = sum(f.stat().st_size for f in shared.newest_files())
    assert payloads < files   # Parquet's footers and the other columns: the files hold more than the payloads
    monkeypatch.setattr(pipeline, "FRESH_CACHE_BYTES", payloads)   # the payloads alone would be kept in memory
    in_place = []
    count = pipeline.count_rows

    def counted(fresh, bronze_rows=None):   # bronze's own files are handed over only for an in-place read
        in_place.append(bronze_rows is not None)
        return count(fresh, bronze_rows)

    monkeypatch.setattr(pipeline, "count_rows", counted)
    shared.process(batch)
    assert in_place == [True]
    assert _ids(shared, "files_over_budget") == [(1, "v1"), (2, "v2"), (3, "v3")]
