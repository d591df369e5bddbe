"""The decode stage's output layout: slots share pooled columns, so width follows the widest relation."""

from __future__ import annotations

import pyarrow as pa

from cdc_apply.pgoutput.types import resolve_column_type
from cdc_apply.planning.decode_plan import DecodePlan, Slot, output_ddl, output_schema, pool_columns

INT4, INT8, TEXT, NUMERIC = 23, 20, 25, 1700


def _slot(name: str, *oids: int, lineage: tuple[int, ...] = ()) -> Slot:
    types = tuple(resolve_column_type(oid, -1 if oid != NUMERIC else ((12 << 16) | 2) + 4, {}) for oid in oids)
    return Slot("src", hash(name) & 0xFFFF, 0, f"public.{name}", tuple(f"c{j}" for j in range(len(oids))), types,
                lineage)


def test_fifty_tables_of_the_same_shape_decode_into_one_tables_width_of_columns():
    plan = DecodePlan(sources={}, slots=tuple(_slot(f"t{k}", INT4, TEXT, NUMERIC) for k in range(50)))
    pool = pool_columns(plan)
    assert len(pool.types) == 3
    assert set(pool.columns) == {(0, 1, 2)}
    pooled = [f.name for f in output_schema(plan) if f.name.partition("_")[2].isdigit()]
    assert pooled == ["new_0", "old_0", "new_1", "old_1", "new_2", "old_2"]


def test_a_column_shares_only_with_columns_of_exactly_its_type():
    plan = DecodePlan(sources={}, slots=(_slot("a", INT4, INT4, TEXT), _slot("b", TEXT, INT8, TEXT, INT4)))
    pool = pool_columns(plan)
    for k, slot in enumerate(plan.slots):
        assert len(set(pool.columns[k])) == len(slot.column_types)  # no two columns of a row collide
        for j, t in enumerate(slot.column_types):
            assert pool.types[pool.columns[k][j]].arrow_type == t.arrow_type
    assert len(pool.types) == 5  # int4 x2 (a), text x2 (b), int8
    schema = output_schema(plan)
    assert schema.field(pool.new(1, 1)).type == pa.int64()
    assert f"{pool.old(0, 2)} STRING" in output_ddl(plan)


def test_the_layout_depends_only_on_the_plan_so_driver_and_workers_agree():
    slots = (_slot("a", INT4, NUMERIC), _slot("b", NUMERIC, INT4, INT4))
    assert pool_columns(DecodePlan({}, slots)) == pool_columns(DecodePlan({}, slots))


def test_a_column_keeps_its_pooled_column_across_versions_when_an_earlier_column_is_dropped():
    # Version 1: (id int4, a int4, b int4, note text); version 2 dropped a: b moved from position 2 to 1.
    v1 = _slot("t", INT4, INT4, INT4, TEXT, lineage=(0, 1, 2, 3))
    v2 = _slot("t", INT4, INT4, TEXT, lineage=(0, 2, 3))
    pool = pool_columns(DecodePlan({}, (v1, v2)))
    assert pool.columns[1][1] == pool.columns[0][2]  # b
    assert pool.columns[1][2] == pool.columns[0][3]  # note
    assert len(set(pool.columns[1])) == 3
    # A dropped column's pooled column stays with it: width counts every int4 column the versions had.
    assert len(pool.types) == 4
