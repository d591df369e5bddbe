"""History settings that cannot apply to a table stop the batch before any silver or history table is made."""

from __future__ import annotations

import pytest

from cdc_apply.errors import ConfigError
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


def test_track_columns_naming_a_missing_column_is_refused_before_any_table_is_created(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("status", "text", False)])
    lake = lake_factory("track_missing", silver={"history": ["public.*"]},
                        tables={"public.t": {"track_columns": ["statuz"]}})
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "status": "new"})
    lake.land(b.rows())
    with pytest.raises(ConfigError) as info:
        lake.apply()
    assert "key=tables.public.t.track_columns" in str(info.value) and "statuz" in str(info.value)
    assert not (lake.root / "silver" / "public" / "t").exists()
    assert not (lake.root / "silver_history" / "public" / "t").exists()
    assert lake.state("schema_history").count() == 0
