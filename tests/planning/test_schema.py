from __future__ import annotations

from cdc_apply.pgoutput import messages as m
from cdc_apply.planning.schema import SchemaHistory, match_columns
from cdc_apply.planning.tables import SchemaOp, evolve, identity_of, slot_mapping, widens

INT4, INT8, TEXT = 23, 20, 25
DDL = {INT4: "INT", INT8: "BIGINT", TEXT: "STRING"}


def cols(*spec):
    return tuple(m.RelationColumn(1 if n == "id" else 0, n, t, -1) for n, t in spec)


def rel(*spec, identity="d", oid=1):
    return m.Relation(None, oid, "public", "t", identity, cols(*spec))


def type_of(oid, typmod, column=""):
    return DDL[oid]


def test_same_names_match_and_appended_columns_are_new():
    assert match_columns(cols(("id", INT4), ("a", TEXT)), cols(("id", INT4), ("a", TEXT), ("b", INT4))) == [0, 1, None]


def test_a_renamed_column_between_surviving_ones_is_a_rename():
    assert match_columns(cols(("id", INT4), ("a", TEXT), ("c", INT4)), cols(("id", INT4), ("b", TEXT), ("c", INT4))) == [0, 1, 2]


def test_a_dropped_middle_column_vanishes():
    assert match_columns(cols(("id", INT4), ("a", TEXT), ("c", INT4)), cols(("id", INT4), ("c", INT4))) == [0, 2]


def test_trailing_columns_of_another_type_are_a_drop_and_an_add():
    assert match_columns(cols(("id", INT4), ("a", TEXT)), cols(("id", INT4), ("b", INT4))) == [0, None]


def test_history_versions_changes_by_seq_and_ignores_identical_resends():
    h = SchemaHistory()
    assert h.record(5, 0, rel(("id", INT4), ("a", TEXT))) is not None
    assert h.record(9, 0, rel(("id", INT4), ("a", TEXT))) is None
    v2 = h.record(20, 0, rel(("id", INT4), ("b", TEXT)))
    assert v2.lineage == (0, 1)
    assert h.version_at(1, 6).column_names == ("id", "a")
    assert h.version_at(1, 21).column_names == ("id", "b")
    assert h.version_at(1, 5) is None


def _chain(*rels):
    h = SchemaHistory()
    for i, r in enumerate(rels):
        h.record(10 * (i + 1), 0, r)
    return h.relations[1].versions


def test_evolution_renames_adds_and_drops_in_order():
    chain = _chain(rel(("id", INT4), ("a", TEXT), ("gone", INT4)),
                   rel(("id", INT4), ("b", TEXT)),
                   rel(("id", INT4), ("b", TEXT), ("c", INT8)))
    columns, ops = evolve(chain, type_of)
    assert [c.name for c in columns] == ["id", "b", "c"]
    assert ops == [SchemaOp("drop", "gone"), SchemaOp("rename", "a", new_name="b"),
                   SchemaOp("add", "c", spark_ddl="BIGINT")]


def test_kept_dropped_columns_stay_and_still_receive_old_versions_values():
    chain = _chain(rel(("id", INT4), ("a", TEXT), ("z", INT4)), rel(("id", INT4), ("a", TEXT)))
    columns, ops = evolve(chain, type_of, drop_policy="keep")
    assert [(c.name, c.dropped) for c in columns] == [("id", False), ("a", False), ("z", True)]
    assert ops == []
    assert slot_mapping(chain[0], columns) == (0, 1, 2)
    assert slot_mapping(chain[1], columns) == (0, 1)


def test_swapped_names_go_through_a_temporary_name():
    chain = _chain(rel(("id", INT4), ("a", TEXT), ("b", TEXT), ("c", INT4)),
                   rel(("id", INT4), ("b", TEXT), ("a", TEXT), ("c", INT4)))
    columns, ops = evolve(chain, type_of)
    assert [c.name for c in columns] == ["id", "b", "a", "c"]
    names = ["id", "a", "b", "c"]
    for op in ops:
        assert op.kind == "rename" and op.column in names and op.new_name not in names
        names[names.index(op.column)] = op.new_name
    assert names == ["id", "b", "a", "c"]


def test_int_to_bigint_widens_in_place_and_int_to_text_rewrites():
    chain = _chain(rel(("id", INT4), ("n", INT4), ("s", INT4)), rel(("id", INT4), ("n", INT8), ("s", TEXT)))
    _, ops = evolve(chain, type_of)
    assert ops == [SchemaOp("retype", "n", spark_ddl="BIGINT", old_ddl="INT", in_place=True),
                   SchemaOp("retype", "s", spark_ddl="STRING", old_ddl="INT", in_place=False)]
    assert widens("DECIMAL(10,2)", "DECIMAL(12,2)") and not widens("DECIMAL(10,2)", "DECIMAL(10,4)")


def test_full_identity_matches_on_all_values_unless_keys_are_configured():
    h = SchemaHistory()
    v = h.record(1, 0, m.Relation(None, 1, "public", "t", "f", tuple(
        m.RelationColumn(1, n, INT4, -1) for n in ("id", "x"))))
    assert identity_of(v) is None
    assert identity_of(v, ["id"]) == ("id",)
    d = h.record(2, 0, rel(("id", INT4), ("a", TEXT), oid=2))
    assert identity_of(d) == ("id",)
