"""What the publications publish, and each published table as pgoutput describes it.

The lander copies a table the way PostgreSQL's own table synchronisation
does (``fetch_table_list`` / ``fetch_remote_table_info``): the relations the
publications send changes for (a partition's root with
``publish_via_partition_root``), each publication's column list (which also
says which generated columns are published, ``publish_generated_columns``),
and the row filters OR-ed across publications — no filter at all when one
publication has none. The Relation (and Type) messages it writes for a
snapshot are the ones the walsender sends for the table (checked against a
real Relation message in tests/lander/test_lander_snapshot_catalog.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_apply.delta.names import pg_ident
from cdc_apply.errors import LandError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.snapshot import SNAPSHOT_XID
from cdc_apply.pgoutput.types import ColumnType, resolve_column_type

FIRST_GENBKI_OID = 10000        # pgoutput sends a Type message for column types from here on
INTEGER_TYPES = frozenset((20, 21, 23))   # int8, int2, int4: key columns a copy can be cut into ranges of
MIN_SERVER_VERSION = 150000     # pg_get_publication_tables with column lists and row filters

_PUBLISHED = """
SELECT p.pubname, gpt.relid::int8, n.nspname, c.relname, c.relkind, gpt.attrs::int2[],
       pg_get_expr(gpt.qual, gpt.relid)
FROM pg_publication p, LATERAL pg_get_publication_tables(p.pubname) gpt
JOIN pg_class c ON c.oid = gpt.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE p.pubname = ANY(%s)
"""
_ANCESTORS = """
SELECT r::int8, a.relid::int8 FROM unnest(%s::oid[]) r, LATERAL pg_partition_ancestors(r) a WHERE a.relid <> r
"""
_COLUMNS = """
SELECT a.attnum, a.attname, a.atttypid::int8, a.atttypmod, t.typsend::oid <> 0, pn.nspname, pp.proname
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_proc pp ON pp.oid = t.typoutput JOIN pg_namespace pn ON pn.oid = pp.pronamespace
WHERE a.attrelid = %s AND a.attnum = ANY(%s) AND NOT a.attisdropped ORDER BY a.attnum
"""
_IDENTITY = """
SELECT c.relreplident,
       (SELECT i.indkey::int2[] FROM pg_index i WHERE i.indrelid = c.oid AND CASE c.relreplident
            WHEN 'd' THEN i.indisprimary WHEN 'i' THEN i.indisreplident ELSE false END LIMIT 1)
FROM pg_class c WHERE c.oid = %s
"""
# A domain's Type message names its base type (logicalrep_write_typ uses getBaseType).
# The (namespace, name) of each user type, as pgoutput's Type message names it (a domain: its base type's).
TYPE_NAMES = """
WITH RECURSIVE b(oid, base) AS (
    SELECT t.oid, t.oid FROM pg_type t WHERE t.oid = ANY(%s::oid[])
    UNION ALL SELECT b.oid, t.typbasetype FROM b JOIN pg_type t ON t.oid = b.base WHERE t.typtype = 'd')
SELECT b.oid::int8, CASE WHEN n.nspname = 'pg_catalog' THEN '' ELSE n.nspname END, t.typname
FROM b JOIN pg_type t ON t.oid = b.base JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.typtype <> 'd'
"""
_LEAVES = """
SELECT c.oid::int8, n.nspname, c.relname, c.relkind
FROM pg_partition_tree(%s) t JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE t.isleaf ORDER BY n.nspname, c.relname
"""
# Membership as of the transaction's snapshot (catalog functions read the latest catalog instead).
_PUBLISHED_AT_SNAPSHOT = """
SELECT EXISTS (SELECT 1 FROM pg_publication p WHERE p.pubname = ANY(%s) AND (p.puballtables
    OR EXISTS (SELECT 1 FROM pg_publication_rel r WHERE r.prpubid = p.oid AND r.prrelid = ANY(%s::oid[]))
    OR EXISTS (SELECT 1 FROM pg_publication_namespace s WHERE s.pnpubid = p.oid
               AND s.pnnspid IN (SELECT relnamespace FROM pg_class WHERE oid = ANY(%s::oid[])))))
"""
_FAMILY = """
SELECT relid::int8 FROM pg_partition_ancestors(%s) UNION SELECT relid::int8 FROM pg_partition_tree(%s)
"""


@dataclass(frozen=True)
class PublishedRelation:
    """One relation the publications send changes for: its id, name, published columns and row filter."""

    relation_id: int
    namespace: str
    name: str
    relkind: str
    attnums: tuple[int, ...]
    row_filter: str | None

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}.{self.name}"

    @property
    def sql_name(self) -> str:
        return f"{pg_ident(self.namespace)}.{pg_ident(self.name)}"


@dataclass(frozen=True)
class CopySource:
    """A relation with storage whose rows are copied: the table itself, or a leaf partition of it."""

    oid: int
    sql_name: str


@dataclass(frozen=True)
class TableShape:
    """How one published relation is copied and described: its Relation and Type messages, the SELECT
    list of the copy and each column's tuple format ('b' send form, 't' output text)."""

    published: PublishedRelation
    relation: m.Relation
    types: tuple[m.Type, ...]
    select: tuple[str, ...]
    formats: bytes
    sources: tuple[CopySource, ...]
    skipped: tuple[str, ...] = ()        # leaf partitions without storage of their own (foreign tables)
    # The first column of the replica identity key (primary key or identity index) when it is an integer
    # type: the table can be copied in ranges of it (key-range chunks); None otherwise.
    range_column: str | None = None


def _query(cur, sql: str, params: tuple = ()) -> list[tuple]:
    cur.execute(sql, params)
    return cur.fetchall()


def published_relations(cur, publications: tuple[str, ...]) -> list[PublishedRelation]:
    """The relations ``publications`` send changes for, sorted by name.

    A partition whose ancestor is also published via the root drops out (pgoutput sends its changes
    as the ancestor's); different column lists for one relation in two publications are a LandError,
    as the walsender refuses them too.
    """
    version = int(_query(cur, "SHOW server_version_num")[0][0])
    if version < MIN_SERVER_VERSION:
        raise LandError(f"snapshots need PostgreSQL 15 or newer (the server is {version // 10000}); "
                        "set source.snapshot = \"never\"", key="source.snapshot")
    rows = _query(cur, _PUBLISHED, (list(publications),))
    found: dict[int, dict] = {}
    for pubname, relid, namespace, name, relkind, attrs, qual in rows:
        entry = found.setdefault(relid, {"name": (namespace, name, relkind), "attrs": {}, "quals": []})
        entry["attrs"][pubname] = tuple(sorted(attrs or ()))
        entry["quals"].append(qual)
    ancestors = _query(cur, _ANCESTORS, (list(found),)) if found else []
    covered = {relid for relid, ancestor in ancestors if ancestor in found}
    out = []
    for relid, entry in found.items():
        if relid in covered:
            continue
        namespace, name, relkind = entry["name"]
        lists = set(entry["attrs"].values())
        if len(lists) > 1:
            raise LandError(f"cannot use different column lists (or publish_generated_columns settings) for "
                            f"table \"{namespace}.{name}\" in different publications "
                            f"({', '.join(sorted(entry['attrs']))}); "
                            "the walsender refuses them too", key="source.publication")
        quals = entry["quals"]
        row_filter = None if any(q is None for q in quals) else " OR ".join(f"({q})" for q in sorted(set(quals)))
        out.append(PublishedRelation(relid, namespace, name, relkind, lists.pop(), row_filter))
    return sorted(out, key=lambda r: (r.namespace, r.name))


def published_at_snapshot(cur, relation: PublishedRelation, publications: tuple[str, ...]) -> bool:
    """Whether ``relation`` was in a publication as of ``cur``'s transaction snapshot (its consistent point)."""
    family = [r[0] for r in _query(cur, _FAMILY, (relation.relation_id, relation.relation_id))]
    family = sorted(set(family) | {relation.relation_id})
    return bool(_query(cur, _PUBLISHED_AT_SNAPSHOT, (list(publications), family, family))[0][0])


def same_both_ways(column_type: ColumnType) -> bool:
    """Whether the apply turns the type's send form and its output text into equal values (docs/TYPES.md)."""
    if column_type.kind in ("user", "opaque"):
        return False
    if column_type.kind != "array":
        return True
    element = column_type.element
    assert element is not None  # every "array" column type is built with its element type
    return same_both_ways(element)


def describe(cur, published: PublishedRelation, binary: bool) -> TableShape:
    """The Relation and Type messages pgoutput sends for ``published``, and how its rows are copied.

    ``binary``: the source streams in binary (``source.binary``). Columns the apply reads the same in
    both formats are copied in binary; the others as their output text, unless the stream itself sends
    them in binary (then the snapshot matches the stream).
    """
    columns = _query(cur, _COLUMNS, (published.relation_id, list(published.attnums)))
    identity = _query(cur, _IDENTITY, (published.relation_id,))
    if not identity:
        raise LandError(f"table {published.qualified_name} no longer exists", relation_id=published.relation_id)
    replident, key_columns = identity[0][0], tuple(identity[0][1] or ())
    key = set(key_columns)
    user_oids = sorted({c[2] for c in columns if c[2] >= FIRST_GENBKI_OID})
    named = {oid: (ns, name) for oid, ns, name in _query(cur, TYPE_NAMES, (user_oids,))} if user_oids else {}
    types = tuple(m.Type(SNAPSHOT_XID, c[2], *named[c[2]]) for c in columns if c[2] in named)
    rel_columns, select, formats = [], [], bytearray()
    for attnum, attname, typoid, typmod, has_send, out_ns, out_fn in columns:
        flags = 1 if replident == "f" or attnum in key else 0
        rel_columns.append(m.RelationColumn(flags, attname, typoid, typmod))
        column_type = resolve_column_type(typoid, typmod, named)
        if has_send and (same_both_ways(column_type) or binary):
            select.append(pg_ident(attname))
            formats += b"b"
        else:
            select.append(f"{pg_ident(out_ns)}.{pg_ident(out_fn)}({pg_ident(attname)})::text")
            formats += b"t"
    namespace = "" if published.namespace == "pg_catalog" else published.namespace
    relation = m.Relation(SNAPSHOT_XID, published.relation_id, namespace, published.name, replident,
                          tuple(rel_columns))
    sources, skipped = [CopySource(published.relation_id, published.sql_name)], []
    if published.relkind == "p":
        sources = []
        for oid, ns, name, relkind in _query(cur, _LEAVES, (published.relation_id,)):
            if relkind == "r":
                sources.append(CopySource(oid, f"{pg_ident(ns)}.{pg_ident(name)}"))
            elif relkind != "p":
                skipped.append(f"{ns}.{name}")
    first = next((c for c in columns if key_columns and c[0] == key_columns[0]), None)
    range_column = first[1] if replident in ("d", "i") and first is not None and first[2] in INTEGER_TYPES else None
    return TableShape(published, relation, types, tuple(select), bytes(formats), tuple(sources), tuple(skipped),
                      range_column)


def resolve_entry(entry: str | int, relations: list[PublishedRelation], cur) -> PublishedRelation | None:
    """The published relation a request entry names: a table name or relation id, or a partition of a
    relation published via its root (the root is copied whole: a snapshot empties the whole table)."""
    by_id = {r.relation_id: r for r in relations}
    if isinstance(entry, int):
        oid = entry
    else:
        match = [r for r in relations if r.qualified_name == entry]
        if match:
            return match[0]
        namespace, _, name = entry.partition(".")
        rows = _query(cur, "SELECT c.oid::int8 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                           "WHERE n.nspname = %s AND c.relname = %s", (namespace, name))
        if not rows:
            return None
        oid = rows[0][0]
    if oid in by_id:
        return by_id[oid]
    for (ancestor,) in _query(cur, "SELECT relid::int8 FROM pg_partition_ancestors(%s)", (oid,)):
        if ancestor in by_id:
            return by_id[ancestor]
    return None
