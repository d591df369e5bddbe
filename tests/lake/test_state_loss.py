"""A lost or older state is noticed before a write is skipped: silver records the apply version of
each write (Delta's txnVersion), and a state behind it stops the job."""

from __future__ import annotations

import shutil

import pytest

from cdc_apply.errors import StateError
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


def test_a_deleted_state_folder_stops_the_job_instead_of_skipping_later_rows(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    lake = lake_factory("state_loss")
    done = 0
    for i in (1, 2):
        with b.transaction() as tx:
            tx.insert(t, {"id": i, "v": "x"})
        lake.land(b.rows()[done:])
        done = len(b.rows())
        lake.apply()
    shutil.rmtree(lake.root / "state")
    done = len(b.rows())
    with b.transaction() as tx:
        tx.insert(t, {"id": 3, "v": "x"})
        tx.insert(t, {"id": 4, "v": "x"})
    lake.land(b.rows()[done:])
    with pytest.raises(StateError) as info:
        lake.apply()
    text = str(info.value)
    assert "apply version 2" in text and "public.t" in text and "Restore the state" in text
    assert sorted(r.id for r in lake.silver("public", "t").collect()) == [1, 2]


def _two_rows_then_two_more(lake_factory, name: str, **extra):
    """A lake whose first batch inserted ids 1, 2, with a second transaction (ids 3, 4) landed after it."""
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    # One micro-batch per run, as `apply --once` takes everything landed (with one file a batch, a re-run
    # from a lost state would cut its first batch where the lost one was cut, and lose nothing).
    lake = lake_factory(name, bronze={"max_files_per_trigger": None}, **extra)
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "x"})
        tx.insert(t, {"id": 2, "v": "x"})
    lake.land(b.rows())
    done = len(b.rows())
    lake.apply()
    with b.transaction() as tx:
        tx.insert(t, {"id": 3, "v": "x"})
        tx.insert(t, {"id": 4, "v": "x"})
    lake.land(b.rows()[done:])
    return lake


def test_a_state_deleted_after_its_only_batch_stops_the_job_instead_of_losing_the_next_rows(lake_factory):
    lake = _two_rows_then_two_more(lake_factory, "state_one_behind")
    shutil.rmtree(lake.root / "state")
    with pytest.raises(StateError) as info:
        lake.apply()
    text = str(info.value)
    assert "apply version 1" in text and "seqs" in text and "public.t" in text
    assert sorted(r.id for r in lake.silver("public", "t").collect()) == [1, 2]


def test_a_state_restored_from_a_copy_one_batch_old_stops_the_job_instead_of_losing_rows(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    lake = lake_factory("state_restored_one_behind", bronze={"max_files_per_trigger": None})
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "x"})
    lake.land(b.rows())
    done = len(b.rows())
    lake.apply()
    shutil.copytree(lake.root / "state", lake.root / "state_copy")
    with b.transaction() as tx:
        tx.insert(t, {"id": 2, "v": "x"})
    lake.land(b.rows()[done:])
    done = len(b.rows())
    lake.apply()
    with b.transaction() as tx:
        tx.insert(t, {"id": 3, "v": "x"})
    lake.land(b.rows()[done:])
    shutil.rmtree(lake.root / "state")
    shutil.copytree(lake.root / "state_copy", lake.root / "state")
    with pytest.raises(StateError) as info:
        lake.apply()
    assert "apply version 2" in str(info.value)
    assert sorted(r.id for r in lake.silver("public", "t").collect()) == [1, 2]


def test_a_changed_silver_path_stops_the_job_instead_of_starting_a_silver_without_the_older_rows(lake_factory):
    lake = _two_rows_then_two_more(lake_factory, "silver_moved")
    lake.extra["silver"] = {"path": str(lake.root / "silver_elsewhere")}
    with pytest.raises(StateError) as info:
        lake.apply()
    text = str(info.value)
    assert "does not exist" in text and "silver.path" in text and "public.t" in text
    assert not (lake.root / "silver_elsewhere" / "public" / "t" / "_delta_log").exists()


def test_a_silver_table_replaced_by_an_older_copy_stops_the_job(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    lake = lake_factory("silver_older_copy", bronze={"max_files_per_trigger": None})
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "x"})
    lake.land(b.rows())
    done = len(b.rows())
    lake.apply()
    table = lake.root / "silver" / "public" / "t"
    shutil.copytree(table, lake.root / "t_copy")
    for i in (2, 3):
        with b.transaction() as tx:
            tx.insert(t, {"id": i, "v": "x"})
        lake.land(b.rows()[done:])
        done = len(b.rows())
        lake.apply()
    shutil.rmtree(table)
    shutil.copytree(lake.root / "t_copy", table)
    with b.transaction() as tx:
        tx.insert(t, {"id": 4, "v": "x"})
    lake.land(b.rows()[done:])
    with pytest.raises(StateError) as info:
        lake.apply()
    assert "older copy" in str(info.value)
