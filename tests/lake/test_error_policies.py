"""Bad input: ``fail`` stops with an error naming source, seq and LSN and applies nothing;
``quarantine`` records the message with its error and applies the rest."""

from __future__ import annotations

import pytest

from cdc_apply.errors import CdcApplyError
from cdc_apply.pgoutput import messages as m
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


def _stream():
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "good"})
        bad_at = b.emit(m.Insert(None, t.oid, ("2", "x")))
        tx.insert(t, {"id": 3, "v": "good too"})
        b.emit(m.Insert(None, 99999, ("7",)))          # a relation no Relation message described
    rows = b.rows()
    source, seq, lsn, payload = rows[bad_at]
    kind_at = payload.index(b"t", payload.index(b"t") + 1)
    garbled = payload[:kind_at] + b"?" + payload[kind_at + 1:]  # an unknown tuple column kind
    rows[bad_at] = (source, seq, lsn, garbled)
    return rows, seq, lsn


def test_fail_stops_with_an_error_naming_source_seq_and_lsn_and_applies_nothing(lake_factory):
    lake = lake_factory("fail")
    rows, seq, lsn = _stream()
    lake.land(rows)
    with pytest.raises(CdcApplyError) as info:
        lake.apply()
    text = str(info.value)
    assert "source=src" in text and f"seq={seq}" in text and f"lsn={m.format_lsn(lsn)}" in text
    assert "unknown tuple column kind" in text
    assert not (lake.root / "silver" / "public" / "t").exists()


def test_fail_names_the_first_bad_message_however_the_decode_is_partitioned(lake_factory, monkeypatch):
    from cdc_apply.lake import decode_stage, local_batch

    monkeypatch.setattr(local_batch, "LOCAL_BATCH_BYTES", -1)   # decoded in Spark, not on the driver
    monkeypatch.setattr(decode_stage, "DECODE_VALUES_PER_PARTITION", 1)  # a decode task per message
    lake = lake_factory("fail_partitioned")
    rows, seq, _ = _stream()
    lake.land(rows)
    with pytest.raises(CdcApplyError) as info:
        lake.apply()
    assert f"seq={seq}" in str(info.value) and "unknown tuple column kind" in str(info.value)
    assert not (lake.root / "silver" / "public" / "t").exists()


def test_quarantine_records_bad_messages_and_applies_the_rest(lake_factory):
    lake = lake_factory("quarantine", apply={"on_error": "quarantine"})
    rows, seq, _ = _stream()
    lake.land(rows)
    lake.apply()
    assert sorted((r.id, r.v) for r in lake.silver("public", "t").collect()) == [(1, "good"), (3, "good too")]
    quarantined = {r.seq: r.error for r in lake.state("quarantine").collect()}
    assert set(quarantined) == {seq, seq + 2}
    assert "unknown tuple column kind" in quarantined[seq]
    assert "no Relation message described" in quarantined[seq + 2]


def test_quarantine_puts_a_bad_control_message_and_its_whole_transaction_in_quarantine(lake_factory):
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    for i in (1, 2, 3):
        with b.transaction() as tx:
            tx.insert(t, {"id": i, "v": "a"})
            tx.insert(t, {"id": 10 + i, "v": "b"})
    rows = b.rows()
    commits = [r for r in rows if r[3][:1] == b"C"]
    source, seq, lsn, payload = commits[1]
    rows = [(source, seq, lsn, payload[:-4]) if r[1] == seq else r for r in rows]  # a truncated Commit
    lake = lake_factory("quarantine_control", apply={"on_error": "quarantine"})
    lake.land(rows)
    _, printed = lake.apply()
    assert sorted(r.id for r in lake.silver("public", "t").collect()) == [1, 3, 11, 13]
    quarantined = {r.seq: r.error for r in lake.state("quarantine").collect()}
    inserts = [r[1] for r in rows if r[3][:1] == b"I"][2:4]
    assert set(quarantined) == {seq, *inserts}
    assert "truncated" in quarantined[seq] and all("not applied" in quarantined[s] for s in inserts)
    assert "3 quarantined" in printed
