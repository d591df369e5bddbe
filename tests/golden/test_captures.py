"""The golden captures contain what the README claims (pure Python: type bytes and fixed offsets).

The one ``postgres``-marked test re-runs the capture machinery on a tiny workload.
"""

from __future__ import annotations

import struct
from collections import Counter

import pytest

from cdc_apply.pgoutput.messages import format_lsn, parse_lsn

from .loader import (
    Message,
    list_configs,
    list_scenarios,
    load_capture,
    load_expected,
    load_meta,
    load_option_matrix,
    load_values,
    read_capture,
)

KNOWN_KINDS = set("BCOMRYIUDTSEcAbPKrp")
STREAM_KINDS = set("SEcA")
TWO_PHASE_KINDS = set("bPKrp")


def _configs(scenario: str) -> dict[str, dict]:
    return load_meta(scenario)["configs"]


def _kinds(scenario: str, config: str) -> Counter:
    return Counter(m.kind for m in load_capture(scenario, config))


def _cstring(buf: bytes, off: int) -> tuple[str, int]:
    end = buf.index(0, off)
    return buf[off:end].decode(), end + 1


def _tuple(buf: bytes, off: int) -> tuple[list[tuple[str, bytes | None]], int]:
    """TupleData at ``off``: ``[(kind, value bytes or None)]`` and the offset after it."""
    (count,) = struct.unpack_from(">H", buf, off)
    off += 2
    columns: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        kind = chr(buf[off])
        off += 1
        if kind in "tb":
            (length,) = struct.unpack_from(">i", buf, off)
            columns.append((kind, buf[off + 4:off + 4 + length]))
            off += 4 + length
        else:
            columns.append((kind, None))
    return columns, off


def _with_stream_flag(messages: list[Message]) -> list[tuple[Message, bool]]:
    """Each message with whether it sits inside a Stream Start/Stop block (then it has an xid)."""
    inside, out = False, []
    for message in messages:
        inside = inside or message.kind == "S"
        out.append((message, inside and message.kind not in "SE"))
        if message.kind == "E":
            inside = False
    return out


def _relations(messages: list[Message]) -> dict[int, tuple[str, list[str]]]:
    """Relation oid -> (schema.name, column names) from the last Relation message seen."""
    relations = {}
    for message, streamed in _with_stream_flag(messages):
        if message.kind == "R":
            off = 5 if streamed else 1
            (oid,) = struct.unpack_from(">I", message.payload, off)
            schema, off = _cstring(message.payload, off + 4)
            name, off = _cstring(message.payload, off)
            (ncols,) = struct.unpack_from(">H", message.payload, off + 1)
            off += 3
            names = []
            for _ in range(ncols):
                column, off = _cstring(message.payload, off + 1)
                names.append(column)
                off += 8
            relations[oid] = (f"{schema}.{name}", names)
    return relations


# -- every file ------------------------------------------------------------------------------

def test_there_are_five_scenarios_with_their_configs():
    assert list_scenarios() == ["ddl", "replica_identity", "transactions", "truncate", "types"]
    assert {"v1", "v1_binary", "v1_kolkata", "v4_parallel_binary_twophase"} <= set(list_configs("types"))
    for scenario in ("replica_identity", "truncate", "transactions", "ddl"):
        assert {"v1", "v1_binary", "v2_stream", "v2_stream_binary", "v3_twophase", "v3_twophase_stream",
                "v4_parallel", "v4_parallel_binary_twophase"} <= set(list_configs(scenario))
    assert "v4_stream" in list_configs("transactions")


@pytest.mark.parametrize("scenario", list_scenarios())
def test_every_capture_parses_and_matches_its_meta(scenario):
    meta = load_meta(scenario)
    assert meta["server"]["server_version"].startswith("18.")
    assert set(meta["configs"]) == set(list_configs(scenario))
    for config, facts in meta["configs"].items():
        messages = load_capture(scenario, config)
        assert [m.seq for m in messages] == list(range(len(messages)))
        assert len(messages) == facts["messages"]
        assert dict(Counter(m.kind for m in messages)) == facts["kinds"]
        assert {m.kind for m in messages} <= KNOWN_KINDS
        assert all(0 <= m.lsn < 1 << 64 and 0 <= m.xid < 1 << 32 for m in messages)


@pytest.mark.parametrize("scenario", list_scenarios())
def test_checkpoints_are_non_empty_and_ordered_by_lsn(scenario):
    checkpoints = load_expected(scenario)
    assert len(checkpoints) >= 3
    assert len({c["name"] for c in checkpoints}) == len(checkpoints)
    lsns = [parse_lsn(c["lsn"]) for c in checkpoints]
    assert lsns == sorted(lsns) and len(set(lsns)) == len(lsns)
    for checkpoint in checkpoints:
        assert checkpoint["tables"]
        for table in checkpoint["tables"].values():
            assert all(len(row) == len(table["columns"]) for row in table["rows"])


@pytest.mark.parametrize("scenario", list_scenarios())
def test_feature_flags_decide_which_message_kinds_appear(scenario):
    for config, facts in _configs(scenario).items():
        kinds = set(_kinds(scenario, config))
        if facts["streaming"] == "off":
            assert not kinds & STREAM_KINDS, config
        if not facts["slot_two_phase"]:
            assert not kinds & TWO_PHASE_KINDS, config


def test_lsn_text_round_trips():
    assert parse_lsn("16/B374D848") == 0x16B374D848
    assert format_lsn(0x16B374D848) == "16/B374D848"
    assert parse_lsn("0/0001A2B3") == 0x1A2B3  # zero-padded forms parse too
    assert format_lsn(0) == "0/0"
    with pytest.raises(ValueError):
        parse_lsn("12345")


def test_read_capture_skips_headers_and_names_bad_lines(tmp_path):
    path = tmp_path / "x.hex"
    path.write_text("# header\n0/10\t5\t42\nnot a line\n", encoding="utf-8")
    with pytest.raises(ValueError, match="x.hex:3"):
        read_capture(path)


# -- walsender facts -------------------------------------------------------------------------

@pytest.mark.parametrize("scenario", list_scenarios())
def test_relation_and_type_messages_carry_lsn_zero_over_the_walsender(scenario):
    for config in list_configs(scenario):
        messages = load_capture(scenario, config)
        assert all(m.lsn == 0 for m in messages if m.kind in "RY")
        assert all(m.lsn != 0 for m in messages if m.kind not in "RY")


# -- transactions ----------------------------------------------------------------------------

@pytest.mark.parametrize("config", ["v2_stream", "v2_stream_binary", "v4_stream", "v4_parallel"])
def test_streaming_configs_stream_commit_and_abort(config):
    kinds = _kinds("transactions", config)
    assert kinds["S"] == kinds["E"] >= 10 and kinds["c"] >= 5
    aborts = [m.payload for m in load_capture("transactions", config) if m.kind == "A"]
    xid_pairs = [struct.unpack_from(">II", p, 1) for p in aborts]
    assert any(xid == sub for xid, sub in xid_pairs), "a top-level stream abort"
    assert any(xid != sub for xid, sub in xid_pairs), "a subtransaction stream abort"
    parallel = _configs("transactions")[config]["streaming"] == "parallel"
    assert {len(p) for p in aborts} == ({25} if parallel else {9})


@pytest.mark.parametrize("config", ["v2_stream", "v3_twophase_stream", "v4_parallel_binary_twophase"])
def test_stream_blocks_are_well_formed_and_changes_inside_carry_an_xid(config):
    """Inside a block, a change of a subtransaction carries the subtransaction's xid, not the
    block's: that is what a subtransaction Stream Abort names."""
    seen_first: set[int] = set()
    subxids: dict[int, int] = {}
    current = None
    messages = load_capture("transactions", config)
    for message in messages:
        if message.kind == "S":
            assert current is None
            xid, first = struct.unpack_from(">IB", message.payload, 1)
            assert first == (xid not in seen_first)
            seen_first.add(xid)
            current = xid
        elif message.kind == "E":
            assert current is not None
            current = None
        elif current is not None:
            assert message.kind in "RYIUDTM"
            xid = struct.unpack_from(">I", message.payload, 1)[0]
            if xid != current:
                assert subxids.setdefault(xid, current) == current and xid > current
    assert current is None and len(seen_first) >= 6
    assert not set(subxids) & seen_first
    aborted = {struct.unpack_from(">II", m.payload, 1) for m in messages if m.kind == "A"}
    assert any((top, sub) in aborted for sub, top in subxids.items())


def test_two_phase_configs_carry_prepare_messages():
    assert {"b", "P", "K", "r"} <= set(_kinds("transactions", "v3_twophase"))
    for config in ("v3_twophase_stream", "v4_parallel_binary_twophase"):
        assert {"b", "P", "K", "r", "p", "S", "A"} <= set(_kinds("transactions", config))
    gids = {m.payload[30:-1].decode() for m in load_capture("transactions", "v3_twophase") if m.kind == "K"}
    assert gids == {"golden_small_commit", "golden_large_commit", "golden_interleaved"}


def test_logical_decoding_messages_have_both_flags_and_binary_content():
    for config in ("v1", "v2_stream"):
        streamed = dict((m.seq, s) for m, s in _with_stream_flag(load_capture("transactions", config)))
        found = []
        for message in load_capture("transactions", config):
            if message.kind == "M":
                off = 5 if streamed[message.seq] else 1
                flags = message.payload[off]
                prefix, off = _cstring(message.payload, off + 9)
                (length,) = struct.unpack_from(">I", message.payload, off)
                found.append((flags, prefix, message.payload[off + 4:off + 4 + length]))
        assert {f for f, _, _ in found} == {0, 1}
        assert (0, "golden.binary", b"\x00\xff\x00") in found
        assert not any(b"rolled back" in content for _, _, content in found)


# -- replica identity, truncate, types ----------------------------------------------------------

@pytest.mark.parametrize("config", ["v1", "v1_binary", "v4_parallel_binary_twophase"])
def test_updates_show_key_old_tuple_and_unchanged_toast(config):
    parts: Counter = Counter()
    for message in load_capture("replica_identity", config):
        if message.kind == "U":
            off = 5
            while off < len(message.payload):
                part = chr(message.payload[off])
                columns, off = _tuple(message.payload, off + 1)
                parts[part] += 1
                parts.update(f"{part}:{kind}" for kind, _ in columns)
    assert parts["K"] and parts["O"] and parts["N"]
    assert parts["N:u"] >= 5 and parts["K:u"] == 0


def test_truncate_option_bits_and_cascaded_relations():
    seen = set()
    for message in load_capture("truncate", "v1"):
        if message.kind == "T":
            nrels, options = struct.unpack_from(">iB", message.payload, 1)
            seen.add((nrels, options))
    assert {options for _, options in seen} == {0, 1, 2, 3}
    assert (2, 3) in seen and (2, 1) in seen and (2, 0) in seen


def test_type_messages_name_user_types_and_the_base_of_domains():
    for config in list_configs("types"):
        types = set()
        for message in load_capture("types", config):
            if message.kind == "Y":
                schema, off = _cstring(message.payload, 5)
                types.add((schema, _cstring(message.payload, off)[0]))
        assert {("public", "mood"), ("app", "pair"), ("", "int4"), ("", "text"), ("public", "_mood")} <= types


@pytest.mark.parametrize("config", ["v1", "v1_binary", "v1_kolkata", "v4_parallel_binary_twophase"])
def test_values_json_agrees_with_every_inserted_value(config):
    values = {(v["table"], v["key"], v["column"]): v for v in load_values()}
    messages = load_capture("types", config)
    relations = _relations(messages)
    checked = 0
    for message in messages:
        if message.kind != "I":
            continue
        table, names = relations[struct.unpack_from(">I", message.payload, 1)[0]]
        columns, _ = _tuple(message.payload, 6)
        key = columns[0][1].decode() if columns[0][0] == "t" else str(struct.unpack(">i", columns[0][1])[0])
        for name, (kind, data) in zip(names, columns, strict=True):
            value = values[(table, key, name)]
            if kind == "n":
                assert value["text"] is None
            elif kind == "b":
                assert data.hex() == value["send_hex"], (table, key, name)
            else:
                text = value.get("text_asia_kolkata", value["text"]) if config == "v1_kolkata" else value["text"]
                assert data.decode() == text, (table, key, name)
            checked += 1
    assert checked == len(values)


def test_option_matrix_records_what_postgres_rejects():
    matrix = {(r["slot_two_phase"], r["proto_version"], r["streaming"], r["two_phase_option"]): r
              for r in load_option_matrix()}
    assert "need 2 or higher" in matrix[(False, 1, "on", False)]["error"]
    assert "need 4 or higher" in matrix[(False, 3, "parallel", False)]["error"]
    assert "need 3 or higher" in matrix[(False, 2, "off", True)]["error"]
    assert not matrix[(False, 5, "off", False)]["accepted"]
    assert matrix[(False, 4, "parallel", True)]["accepted"]
    # Traps: a two-phase slot sends Begin Prepare/Prepare/Commit Prepared even at protocol 1,
    # and the two_phase option turns a plain slot into a two-phase one for good.
    assert matrix[(True, 1, "off", False)]["prepared_then_committed"].startswith("bRIPK")
    assert matrix[(False, 3, "off", True)]["slot_two_phase_after"] is True


# -- the machinery itself ----------------------------------------------------------------------

@pytest.mark.postgres
def test_capture_machinery_end_to_end(postgres, tmp_path):
    from .capture import capture_scenario
    from .harness import Scenario

    def tiny(w):
        w.script("CREATE TABLE t (id int4 PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a')")
        w.checkpoint("insert")
        w.sql("BEGIN")
        w.sql("INSERT INTO t SELECT g, 'x' || g FROM generate_series(2, 801) g")
        w.sync()
        w.sql("ROLLBACK")
        w.script("UPDATE t SET v = 'b' WHERE id = 1; SELECT pg_logical_emit_message(false, 'p', 'c')")
        w.checkpoint("update")

    scenario = Scenario("selftest", "tiny", tiny, configs=("v1", "v4_parallel_binary_twophase"))
    meta = capture_scenario(postgres, scenario, tmp_path, log=lambda _: None)
    assert list_scenarios(tmp_path) == ["selftest"]
    kinds = meta["configs"]["v1"]["kinds"]
    assert kinds.pop("R") >= 1  # a walsender may resend a Relation after any invalidation
    assert kinds == {"B": 2, "C": 2, "I": 1, "M": 1, "U": 1}
    parallel = load_capture("selftest", "v4_parallel_binary_twophase", tmp_path)
    aborts = [m for m in parallel if m.kind == "A"]
    assert len(aborts) == 1 and len(aborts[0].payload) == 25
    expected = load_expected("selftest", tmp_path)
    assert [c["name"] for c in expected] == ["insert", "update"]
    assert expected[-1]["tables"]["public.t"]["rows"] == [["1", "b"]]


@pytest.mark.parametrize("text", ["0x1/2", "+1/2", "1_0/2", "123456789/0", "1/", "/1", " 1/2", "1/2 ", "g/1", "1/2/3"])
def test_lsn_text_outside_pg_lsn_grammar_is_refused(text):
    with pytest.raises(ValueError, match="not an LSN"):
        parse_lsn(text)
