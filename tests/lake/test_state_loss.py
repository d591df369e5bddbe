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
