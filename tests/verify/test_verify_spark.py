"""`cdc_apply.verify` on a real PostgreSQL landed and applied by the real lander and apply job: equal under a
concurrent workload (several seeds), and silver damaged in each way found in the right ranges."""

from __future__ import annotations

import hashlib
import random
import threading
import uuid

import pytest

from cdc_apply.delta.refs import state_ref
from cdc_apply.errors import VerifyError
from cdc_apply.verification.run import verify
from tests.lake.pg_lake import PgLake

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

TABLES = ["public.t_int", "public.t_uuid", "public.t_text", "public.t_comp", "public.t_full", "public.p"]
SETUP = [
    """CREATE TABLE t_int (id int PRIMARY KEY, name text, amount numeric(10,2), ts timestamptz, d date, b bytea,
           flag bool, f float8, j jsonb, big text)""",
    "ALTER TABLE t_int ALTER COLUMN big SET STORAGE EXTERNAL",
    "CREATE TABLE t_uuid (id uuid PRIMARY KEY, v text, ts timestamp)",
    "CREATE TABLE t_text (k text PRIMARY KEY, v int, c char(5))",
    "CREATE TABLE t_comp (a int, b text, v text, PRIMARY KEY (a, b))",
    "CREATE TABLE t_full (x int, y text)",
    "ALTER TABLE t_full REPLICA IDENTITY FULL",
    "CREATE TABLE p (id int, region text, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region)",
    "CREATE TABLE p_eu PARTITION OF p FOR VALUES IN ('eu')",
    "CREATE TABLE p_us PARTITION OF p FOR VALUES IN ('us')",
    """INSERT INTO t_int SELECT g, 'n' || g, g * 1.5, '2024-01-01'::timestamptz + g * interval '1 hour',
           DATE '2020-01-01' + g, decode(md5(g::text), 'hex'), g % 2 = 0, g / 3.0, jsonb_build_object('g', g),
           CASE WHEN g = 7 THEN repeat(md5(g::text), 4000) END FROM generate_series(1, 400) g""",
    "INSERT INTO t_int VALUES (0, NULL, NULL, 'infinity', '-infinity', NULL, NULL, NULL, NULL, NULL)",
    """INSERT INTO t_uuid SELECT md5(g::text)::uuid, 'v' || g, '2000-01-01'::timestamp + g * interval '1 min'
           FROM generate_series(1, 300) g""",
    "INSERT INTO t_text SELECT 'k' || g || chr(200 + g % 50), g, 'ab' FROM generate_series(1, 300) g",
    "INSERT INTO t_comp SELECT g % 40, 'b' || g, 'v' || g FROM generate_series(1, 300) g",
    "INSERT INTO t_full SELECT g % 50, 'y' || (g % 7) FROM generate_series(1, 300) g",
    "INSERT INTO p SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, 'v' || g FROM generate_series(1, 300) g",
    "ANALYZE",
]


def workload(rng: random.Random, n: int) -> list[str]:
    """``n`` small transactions over every table: inserts, updates (TOAST left unchanged), deletes."""
    out = []
    for _ in range(n):
        i = rng.randrange(1, 600)
        out.append(rng.choice([
            f"INSERT INTO t_int (id, name, amount) VALUES ({i + 1000}, 'w{i}', {i}.25) ON CONFLICT (id) DO UPDATE SET amount = {i}",
            f"UPDATE t_int SET name = 'u{i}', ts = now() WHERE id = {i % 400}",
            f"DELETE FROM t_int WHERE id = {i % 400 + 1} AND id <> 7",
            f"UPDATE t_uuid SET v = 'w{i}' WHERE id = md5('{i % 300}')::uuid",
            f"DELETE FROM t_text WHERE v = {i % 300}",
            f"INSERT INTO t_comp VALUES ({i % 40}, 'w{i}', 'x') ON CONFLICT DO NOTHING",
            f"UPDATE t_full SET y = 'w{i}' WHERE x = {i % 50}",
            f"INSERT INTO t_full VALUES ({i % 50}, 'y1')",
            f"UPDATE p SET v = 'w{i}' WHERE id = {i % 300}",
            f"DELETE FROM p WHERE id = {i % 300 + 1}",
        ]))
    return out


@pytest.fixture(scope="module")
def lake(postgres, spark, tmp_path_factory):
    setup = SETUP + ["CREATE PUBLICATION verify_pub FOR ALL TABLES WITH (publish_via_partition_root = true)"]
    lake = PgLake(postgres, spark, tmp_path_factory.mktemp("verify"), "verify", setup,
                  {"silver": {"history": ["public.*"]}})
    lake.land_and_apply()
    yield lake
    lake.close()


def run_verify(lake, **kw):
    return verify(lake.spark, lake.lander_config, range_rows=kw.pop("range_rows", 60), wait_seconds=600, **kw)


ROUND = 10      # statements run in PostgreSQL before each landing and apply
PAUSE = 1.0     # seconds between rounds: the apply job keeps applying, and verify's own Spark jobs get the cores too


def apply_while(lake, work: list[str], seed: int, steady: bool = True):
    """Run ``work`` in PostgreSQL — then, when ``steady``, more of the workload — ``ROUND`` statements at a
    time (none when the source is quiet), landing and applying after each round and pausing ``PAUSE`` seconds
    before the next, in a thread until ``stop`` is set."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop():
        rng = random.Random(seed)
        pending = list(work)
        conn = lake.pg.connect(lake.dbname)
        try:
            while not stop.is_set():
                for sql in pending[:ROUND] or (workload(rng, ROUND) if steady else []):
                    with conn.cursor() as cur:
                        cur.execute(sql)
                del pending[:ROUND]
                lake.land_and_apply()
                stop.wait(PAUSE)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            conn.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return stop, thread, errors


def verify_while_applying(lake, work: list[str], seed: int, steady: bool = True, **kw):
    """:func:`run_verify` while :func:`apply_while` lands and applies (and runs ``work``); the run, printed."""
    stop, thread, errors = apply_while(lake, work, seed, steady)
    try:
        run = run_verify(lake, **kw)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    print("\n".join(run.lines()))
    return run


# One seed in make test; the others in make system, where minutes of concurrent workload belong.
@pytest.mark.parametrize("seed", [11, pytest.param(12, marks=pytest.mark.system),
                                  pytest.param(13, marks=pytest.mark.system)])
def test_a_clean_pipeline_under_a_concurrent_workload_verifies_equal(lake, seed):
    print(f"seed {seed}")
    stop, thread, errors = apply_while(lake, workload(random.Random(seed), 30), seed)
    try:
        run = run_verify(lake, record=False)     # the damage test below checks the verifications rows
    except VerifyError as err:
        run = err
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert not isinstance(run, VerifyError), run
    print("\n".join(run.lines()))
    assert {t.table for t in run.tables} == set(TABLES)
    assert run.exit_code == 0, run.lines()
    assert all(t.ranges >= 2 for t in run.tables), run.lines()
    assert all(not t.unhashed_columns for t in run.tables), run.lines()   # every column compared, the float too


def damage(lake, table: str, sql: str) -> None:
    lake.spark.sql(sql.format(t=f"delta.`{lake.config.silver.path}/public/{table}`"))


def differences(run, table: str):
    return next(t for t in run.tables if t.table == table)


def test_silver_damaged_in_five_ways_is_found_in_the_right_ranges(lake):
    damage(lake, "t_int", "DELETE FROM {t} WHERE id = 7")                        # a row deleted (the TOAST one)
    five = str(uuid.UUID(hashlib.md5(b"5").hexdigest()))
    damage(lake, "t_uuid", f"UPDATE {{t}} SET v = 'changed' WHERE id = '{five}'")   # a value changed
    damage(lake, "t_comp", "INSERT INTO {t} SELECT * FROM {t} WHERE a = 3 AND b = 'b3'")        # a duplicate
    damage(lake, "t_full", "INSERT INTO {t} SELECT * FROM {t} LIMIT 1")                         # a multiset copy
    damage(lake, "p", "DELETE FROM {t} WHERE id <= 40")         # the rows of a lost file: a range of keys gone
    run = verify_while_applying(lake, [], 0, steady=False)   # the apply job runs; the source is quiet
    assert run.exit_code == 1
    t_int = differences(run, "public.t_int")
    assert [(s.key, s.what) for s in t_int.samples] == [(("7",), "missing")]
    assert len(t_int.differing) == 1 and (t_int.differing[0].low or 0) <= 7 < (t_int.differing[0].high or 10 ** 9)
    assert [(s.key, s.what) for s in differences(run, "public.t_uuid").samples] == [((five,), "changed")]
    assert [(s.key, s.what) for s in differences(run, "public.t_comp").samples] == [(("3", "b3"), "duplicated")]
    assert [s.what for s in differences(run, "public.t_full").samples] == ["duplicated"]
    p = differences(run, "public.p")
    assert p.differing and all((d.low or 0) <= 40 for d in p.differing), p.line()
    assert {s.what for s in p.samples} == {"missing"} and all(int(s.key[0]) <= 40 for s in p.samples)
    for equal in ("public.t_text",):
        assert differences(run, equal).status == "equal", differences(run, equal).line()
    recorded = state_ref(lake.config, "verifications").read(lake.spark).where(f"run_id = '{run.run_id}'")
    assert sorted((r.table_name, r.status) for r in recorded.collect()) == sorted(
        (t.table, t.status) for t in run.tables)


def test_the_source_read_a_range_per_query_finds_what_one_grouped_scan_finds(lake):
    """Silver as the test above left it: the source's sums read in one scan grouped by range (width_bucket over
    the cut points, text under COLLATE "C") and, paced, a query per range give the same ranges and keys."""
    grouped = verify_while_applying(lake, [], 0, steady=False, record=False)
    paced = verify_while_applying(lake, [], 0, steady=False, record=False, max_source_rows_per_second=10 ** 9)

    def found(run):
        return {t.table: (t.status, t.source_rows, [(d.index, d.source_rows, d.silver_rows) for d in t.differing],
                          [(s.key, s.what) for s in t.samples]) for t in run.tables}

    assert found(grouped) == found(paced)
    assert {t for t, (status, *_) in found(grouped).items() if status == "differs"} == {
        "public.t_int", "public.t_uuid", "public.t_comp", "public.t_full", "public.p"}


@pytest.mark.parametrize("table", ["t_int", "t_uuid", "t_text"])
def test_one_grouped_scan_puts_each_row_in_the_range_a_query_per_range_does(lake, table):
    """Each key kind's ranges (text: non-ASCII keys, COLLATE "C"), summed by one scan and by a query each."""
    from cdc_apply.lander.dsn import resolve_dsn
    from cdc_apply.verification.encoding import NotCompared, cut_bounds, encode_column, range_bounds, range_kind
    from cdc_apply.verification.silver import silver_columns
    from cdc_apply.verification.source import SourceSnapshot, key_predicate

    silver = lake.spark.read.format("delta").load(f"{lake.config.silver.path}/public/{table}")
    types = silver_columns(silver, lake.config.silver.metadata_prefix)
    with SourceSnapshot(resolve_dsn(lake.lander_config.source)) as snap:
        snap.open()
        shape = snap.table("public", table)
        columns = [e for e in (encode_column(c.name, c.type, types[c.name]) for c in shape.columns)
                   if not isinstance(e, NotCompared)]
        key = shape.key[0]
        kind = range_kind(shape.column(key).type)
        bounds = cut_bounds(kind, snap.sample(shape, key), 7)
        assert len(bounds) == 6, bounds
        apart = {}
        for index in range(len(bounds) + 1):
            where, params = key_predicate(shape, key, kind, *range_bounds(bounds, index))
            apart.update({index: s for s in snap.range_sums(shape, columns, where, params).values()})
        assert snap.grouped_sums(shape, columns, key, kind, bounds) == apart


def test_a_silver_location_without_the_tables_is_an_error_naming_silver_not_an_empty_success(lake, tmp_path):
    """The pipeline's own state, but ``[silver] path`` at a folder that does not exist: no table can be
    compared, and verify says so at once instead of reporting a run with no table as equal."""
    from dataclasses import replace

    config = replace(lake.lander_config, silver=replace(lake.lander_config.silver, path=str(tmp_path / "nowhere")))
    with pytest.raises(VerifyError) as info:
        verify(lake.spark, config, wait_seconds=600, record=False)
    text = str(info.value)
    assert "has a silver table" in text and "nowhere" in text and "[silver] path" in text, text


def test_a_point_the_lander_has_not_landed_is_blamed_on_the_lander_not_the_apply_job(lake):
    """No lander runs beside this verify (the module lands by hand): its point never reaches bronze."""
    with pytest.raises(VerifyError) as info:
        verify(lake.spark, lake.lander_config, wait_seconds=2, record=False)
    text = str(info.value)
    assert "bronze did not receive the source's point" in text and "cdc-apply land" in text, text


def test_an_unreachable_source_is_named_in_verify_s_own_words(lake):
    from dataclasses import replace

    config = replace(lake.lander_config, source=replace(lake.lander_config.source, dsn="host=127.0.0.1 port=9 "
                                                        "dbname=verify user=postgres connect_timeout=2"))
    with pytest.raises(VerifyError) as info:
        verify(lake.spark, config, wait_seconds=5, record=False)
    text = str(info.value)
    assert text.startswith("cannot verify: no consistent point: ") and "cannot land changes" not in text, text
    assert "127.0.0.1:9" in text, text
