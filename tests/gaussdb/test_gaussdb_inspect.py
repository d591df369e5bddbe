"""inspect_gaussdb_hex: one JSON object per record, errors printed and counted, the run goes on."""

from __future__ import annotations

import io
import json

from cdc_apply.gaussdb import Begin, Commit, Heartbeat, Insert, encode_gaussdb, inspect_gaussdb_hex


def test_inspect_prints_records_and_counts_failures(tmp_path):
    batch = encode_gaussdb([Begin(0x10, 5, 0x10, None, "alice"), Insert(0x20, "public", "t", (("id", 23, "1"),)),
                            Commit(0x30, 9)], batch=True)
    beat = encode_gaussdb([Heartbeat(0x30, 0x40, 1_716_170_400)], batch=False)
    path = tmp_path / "payloads.hex"
    path.write_text(f"# a comment\n{batch.hex()}\n\nzz\n0/30\tx\t{beat.hex()}\n{batch[:-1].hex()}\n", encoding="utf-8")
    out = io.StringIO()
    assert inspect_gaussdb_hex(str(path), out) == 2
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(x["seq"], x.get("index"), x["type"]) for x in lines] == [
        (1, 0, "Begin"), (1, 1, "Insert"), (1, 2, "Commit"), (3, None, None), (4, 0, "Heartbeat"), (5, None, None)]
    assert lines[0]["user_name"] == "alice" and lines[1]["new"] == [{"name": "id", "type_oid": 23, "value": "1"}]
    assert lines[4]["lsn"] == "0/30" and lines[4]["timestamp"] == "2024-05-20T02:00:00Z"
    assert "not hex" in lines[3]["error"]
    assert "without a separator" in lines[5]["error"] and "seq=5" in lines[5]["error"]
