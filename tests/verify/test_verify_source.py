"""The source's side of a verification against a real PostgreSQL: how its one scan per table is planned."""

from __future__ import annotations

import pytest

from cdc_apply.verification.encoding import cut_bounds, encode_column
from cdc_apply.verification.source import SourceSnapshot, grouped_sums_sql

ROWS = 300_000
SILVER_TYPES = {"int8": "bigint", "int4": "int", "text": "string"}


@pytest.fixture(scope="module")
def dsn(postgres):
    postgres.create_database("verify_source")
    postgres.execute("CREATE TABLE big (id bigint PRIMARY KEY, a int, t text)", dbname="verify_source")
    postgres.execute(f"INSERT INTO big SELECT g, g % 1000, md5(g::text) FROM generate_series(1, {ROWS}) g",
                     dbname="verify_source")
    postgres.execute("VACUUM ANALYZE big", dbname="verify_source")
    return postgres.dsn("verify_source")


def plan_nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def test_the_grouped_scan_hashes_its_ranges_rather_than_sorting_the_table(dsn):
    """The planner takes ``width_bucket`` of a unique key for as many groups as rows: it would group them in one
    process, or sort every row (spilling to disk at scale); the scan tells it the ranges' count, so it plans as
    many groups as ranges, hashed, and no Sort sees the rows."""
    with SourceSnapshot(dsn) as snap:
        snap.open()
        shape = snap.table("public", "big")
        assert shape is not None
        columns = [encode_column(c.name, c.type, SILVER_TYPES[c.type.pg_name]) for c in shape.columns]
        bounds = cut_bounds("int", snap.sample(shape, "id"), 30)
        sql, params = grouped_sums_sql(shape, columns, "id", "int", bounds)
        [(explained,)] = snap.values("EXPLAIN (FORMAT JSON) " + sql, params)   # json: psycopg2 parses it
        nodes = list(plan_nodes(explained[0]["Plan"]))
        ranges = len(bounds) + 1
        assert nodes[0]["Node Type"] == "Aggregate" and nodes[0]["Plan Rows"] <= ranges, nodes[0]
        assert any(n["Node Type"] == "Aggregate" and n.get("Strategy") == "Hashed" for n in nodes), nodes
        assert all(n["Plan Rows"] <= 3 * ranges for n in nodes if n["Node Type"] == "Sort"), nodes
        sums = snap.grouped_sums(shape, columns, "id", "int", bounds)
    assert sorted(sums) == list(range(ranges))
    assert sum(n for n, _ in sums.values()) == ROWS

