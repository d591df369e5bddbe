"""The Relation and Type messages a snapshot writes are the ones the walsender sends for the same table.

Each table gets a change; ``pg_logical_slot_peek_binary_changes`` shows what pgoutput sends for it, and
:func:`cdc_apply.lander.snapshots.catalog.describe` must give the same messages (with the snapshot's xid).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from lander_helpers import create_slot, peek

from cdc_apply.errors import LandError
from cdc_apply.lander.snapshots import catalog
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.decoder import decode_message

pytestmark = [pytest.mark.postgres]

DB = "snap_catalog"
SETUP = """
CREATE TYPE mood AS ENUM ('sad', 'ok');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TABLE k (id int PRIMARY KEY, v text, m mood, p posint, n numeric(10, 2), arr int[]);
CREATE TABLE f (a int, b text);
ALTER TABLE f REPLICA IDENTITY FULL;
CREATE TABLE u (a int NOT NULL, b text, c int NOT NULL);
CREATE UNIQUE INDEX u_ac ON u (c, a);
ALTER TABLE u REPLICA IDENTITY USING INDEX u_ac;
CREATE TABLE g (id int PRIMARY KEY, a int, twice int GENERATED ALWAYS AS (a * 2) STORED);
CREATE TABLE pr (id int, region text, v text, PRIMARY KEY (region, id)) PARTITION BY LIST (region);
CREATE TABLE pr_eu PARTITION OF pr FOR VALUES IN ('eu');
CREATE TABLE pr_us PARTITION OF pr FOR VALUES IN ('us');
CREATE TABLE cl (id int PRIMARY KEY, x text, secret text);
CREATE TABLE rf (id int PRIMARY KEY, v int);
CREATE PUBLICATION pub_a FOR TABLE k, f, u, g, pr, cl (id, x), rf WHERE (id > 10)
    WITH (publish_via_partition_root = true, publish_generated_columns = stored);
CREATE PUBLICATION pub_b FOR TABLE g, pr, rf WHERE (id < 0);
CREATE PUBLICATION pub_c FOR TABLE rf;
CREATE PUBLICATION pub_d FOR TABLE cl (id, secret);
CREATE PUBLICATION pub_e FOR TABLE rf WHERE (id < 0);
CREATE PUBLICATION pub_f FOR TABLE pr_eu;
"""
CHANGES = """
INSERT INTO k VALUES (1, 'v', 'ok', 3, 1.5, '{1,2}');
INSERT INTO f VALUES (1, 'x');
INSERT INTO u VALUES (1, 'b', 2);
INSERT INTO g (id, a) VALUES (1, 21);
INSERT INTO pr VALUES (1, 'eu', 'x');
INSERT INTO cl VALUES (1, 'x', 's');
INSERT INTO rf VALUES (11, 1), (-1, 1);
"""


@pytest.fixture(scope="module")
def db(postgres):
    postgres.create_database(DB)
    postgres.execute(SETUP, dbname=DB)
    for slot in ("cat_a", "cat_b"):
        create_slot(postgres, DB, slot, two_phase=False)
    postgres.execute(CHANGES, dbname=DB)
    return postgres


def sent(postgres, slot: str, publication: str) -> tuple[dict[int, m.Relation], dict[int, m.Type]]:
    """The Relation and Type messages pgoutput sends, by relation / type oid."""
    options = ["proto_version", "1", "publication_names", publication]
    messages = [decode_message(p) for _, p in peek(postgres, DB, slot, options)]
    return ({x.relation_id: x for x in messages if isinstance(x, m.Relation)},
            {x.type_oid: x for x in messages if isinstance(x, m.Type)})


def described(postgres, publications: tuple[str, ...], binary: bool = False) -> dict[str, catalog.TableShape]:
    conn = postgres.connect(DB)
    try:
        with conn.cursor() as cur:
            return {r.qualified_name: catalog.describe(cur, r, binary)
                    for r in catalog.published_relations(cur, publications)}
    finally:
        conn.close()


def test_every_relation_and_type_message_equals_what_the_walsender_sends_via_the_root(db):
    relations, types = sent(db, "cat_a", "pub_a")
    shapes = described(db, ("pub_a",))
    assert sorted(shapes) == ["public.cl", "public.f", "public.g", "public.k", "public.pr", "public.rf", "public.u"]
    for shape in shapes.values():
        assert replace(shape.relation, xid=None) == relations[shape.relation.relation_id]
        assert [replace(t, xid=None) for t in shape.types] == [types[t.type_oid] for t in shape.types]
    assert [c.name for c in shapes["public.g"].relation.columns] == ["id", "a", "twice"]   # stored, published
    assert [c.name for c in shapes["public.cl"].relation.columns] == ["id", "x"]
    assert [c.flags for c in shapes["public.u"].relation.columns] == [1, 0, 1]
    assert {t.name for t in shapes["public.k"].types} == {"mood", "int4"}                    # a domain: its base
    assert shapes["public.k"].formats == b"bbtbbb" and "enum_out" in shapes["public.k"].select[2]
    assert [s.sql_name for s in shapes["public.pr"].sources] == ['"public"."pr_eu"', '"public"."pr_us"']


def test_without_the_root_each_partition_is_its_own_relation_and_generated_columns_stay_out(db):
    relations, _ = sent(db, "cat_b", "pub_b")
    shapes = described(db, ("pub_b",))
    assert sorted(shapes) == ["public.g", "public.pr_eu", "public.pr_us", "public.rf"]
    for shape in shapes.values():
        if shape.relation.relation_id in relations:          # pr_us had no change: nothing sent for it
            assert replace(shape.relation, xid=None) == relations[shape.relation.relation_id]
    assert [c.name for c in shapes["public.g"].relation.columns] == ["id", "a"]


def test_row_filters_are_ored_across_publications_and_one_without_a_filter_removes_them(db):
    conn = db.connect(DB)
    try:
        with conn.cursor() as cur:
            filters = lambda pubs: {r.name: r.row_filter for r in catalog.published_relations(cur, pubs)}  # noqa: E731
            assert filters(("pub_a", "pub_e"))["rf"] == "((id < 0)) OR ((id > 10))"
            assert filters(("pub_a", "pub_c"))["rf"] is None
            names = {r.qualified_name for r in catalog.published_relations(cur, ("pub_a", "pub_f"))}
            assert "public.pr" in names and "public.pr_eu" not in names      # the root wins, as in pgoutput
    finally:
        conn.close()


def test_different_column_lists_in_two_publications_are_refused_as_the_walsender_refuses_them(db):
    conn = db.connect(DB)
    try:
        with conn.cursor() as cur, pytest.raises(LandError, match="different column lists") as err:
            catalog.published_relations(cur, ("pub_a", "pub_d"))
        assert err.value.context["key"] == "source.publication"
    finally:
        conn.close()
