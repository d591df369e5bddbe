"""`cdc_apply.verify` of tables that keep no history table: the keys changed past the source's point come from
the transactions log and bronze, so a clean pipeline under a concurrent workload still verifies equal, and
damage is still found; a keyless table says it needs a history table. The publication has a row filter and
a column list, which the source's side follows; `--repair` copies differing ranges again."""

from __future__ import annotations

import random
import time

import pytest

from tests.lake.pg_lake import PgLake
from tests.verify.test_verify_spark import SETUP, TABLES, damage, differences, verify_while_applying, workload

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


@pytest.fixture(scope="module")
def lake(postgres, spark, tmp_path_factory):
    # A row filter and a column list, as a user's publication has: silver holds only what they pass.
    setup = SETUP + ["CREATE PUBLICATION verify_nh_pub FOR TABLE t_int, t_uuid, t_text WHERE (k NOT LIKE 'k1%'), "
                     "t_comp (a, b), t_full, p WITH (publish_via_partition_root = true)"]
    lake = PgLake(postgres, spark, tmp_path_factory.mktemp("verify_nh"), "verify_nh", setup)
    lake.land_and_apply()
    yield lake
    lake.close()


# Minutes of concurrent workload belong in make system (as test_verify_spark's other seeds).
@pytest.mark.system
def test_tables_without_history_verify_equal_under_a_concurrent_workload(lake, monkeypatch):
    from cdc_apply.verification import bronze_keys
    from cdc_apply.verification import silver as sv

    keyed_names = [t for t in TABLES if t != "public.t_full"]
    waited = sv.wait_applied

    def wait_applied_and_changed_past_the_point(engine, config, source, lsn, timeout, *args, **kwargs):
        waited(engine, config, source, lsn, timeout, *args, **kwargs)
        # Silver is pinned only once a transaction past the point changed a keyed table (the apply job logs a
        # transaction after writing it): its keys are then in silver and must be left out of both sides.
        deadline = time.monotonic() + 120
        while not bronze_keys.transactions_past(engine, config, source, keyed_names, lsn):
            assert time.monotonic() < deadline, "no transaction past the point changed a keyed table"
            time.sleep(0.5)
        return sv.applied_position(engine, config, source)[1]

    monkeypatch.setattr(sv, "wait_applied", wait_applied_and_changed_past_the_point)
    seed = 21
    print(f"seed {seed}")
    run = verify_while_applying(lake, workload(random.Random(seed), 30), seed)
    assert {t.table for t in run.tables} == set(TABLES)
    keyed = [t for t in run.tables if t.table != "public.t_full"]
    assert all(t.status == "equal" for t in keyed), run.lines()
    assert sum(t.excluded_keys for t in keyed) > 0, "the workload changed keys past the point"
    keyless = differences(run, "public.t_full")
    assert keyless.status == "error" and "needs a history table" in keyless.error
    t_text = differences(run, "public.t_text")
    assert 0 < t_text.source_rows < 299, "the row filter leaves the k1... keys out of the source's side"
    assert differences(run, "public.t_comp").source_only_columns == ["v"], "v is not in the column list"


def test_damage_to_a_table_without_history_is_found(lake):
    path = f"{lake.config.silver.path}/public/t_text"
    victim = lake.spark.read.format("delta").load(path).where("k NOT LIKE 'k1%'").orderBy("v").first().v
    damage(lake, "t_text", f"DELETE FROM {{t}} WHERE v = {victim}")
    run = verify_while_applying(lake, ["UPDATE t_int SET name = 'late' WHERE id = 3"], 0, steady=False,
                                tables=["public.t_text", "public.t_int"])
    t_text = differences(run, "public.t_text")
    assert t_text.status == "differs" and [s.what for s in t_text.samples] == ["missing"], t_text.line()
    assert differences(run, "public.t_int").status == "equal", differences(run, "public.t_int").line()


def test_verify_repair_copies_the_differing_ranges_again_and_then_verifies_equal(lake):
    damage(lake, "t_int", "DELETE FROM {t} WHERE id BETWEEN 100 AND 104")   # integer key: its ranges copied
    damage(lake, "t_uuid", "DELETE FROM {t} WHERE v = 'v20'")                # uuid key: copied whole
    # The lander and the apply job run meanwhile; the source is quiet.
    run = verify_while_applying(lake, [], 0, steady=False, tables=["public.t_int", "public.t_uuid", "public.t_comp"],
                                repair=True)
    t_int = differences(run, "public.t_int")
    assert t_int.status == "differs" and differences(run, "public.t_uuid").status == "differs"
    assert run.repair["tables"] == ["public.t_uuid"]
    copied = run.repair["ranges"]
    assert copied and {(t, c) for t, c, _, _ in copied} == {("public.t_int", "id")}
    assert len(copied) < t_int.ranges, "only the differing ranges are copied again"
    assert all((low is None or low <= 104) and (high is None or high > 100) for _, _, low, high in copied)
    assert sorted(t.table for t in run.repaired.tables) == ["public.t_int", "public.t_uuid"]
    assert all(t.status == "equal" for t in run.repaired.tables), run.lines()
    assert run.exit_code == 0


def test_a_table_quiet_since_the_point_is_compared_without_reading_the_transactions_log(lake, monkeypatch):
    from cdc_apply.verification import bronze_keys

    asked = []
    read = bronze_keys.transactions_past
    monkeypatch.setattr(bronze_keys, "transactions_past",
                        lambda engine, config, source, names, lsn: asked.append(names) or read(engine, config, source,
                                                                                             names, lsn))
    # The lander and the apply job run meanwhile; the source is quiet, so silver's newest writes precede the point.
    run = verify_while_applying(lake, [], 0, steady=False, tables=["public.t_int", "public.t_uuid"])
    assert run.exit_code == 0 and all(t.excluded_keys == 0 for t in run.tables), run.lines()
    assert asked == []
