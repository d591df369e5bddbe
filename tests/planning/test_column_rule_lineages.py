"""Column exclusion and masking resolved to lineages: a rule follows its column through renames, an
excluded column is no silver column, a masked one is STRING, and keys cannot be excluded or redacted."""

from __future__ import annotations

import hashlib

import pytest

from cdc_apply.config import parse_config
from cdc_apply.config.columns import ColumnPolicy
from cdc_apply.errors import ConfigError
from cdc_apply.pgoutput import messages as m
from cdc_apply.planning.masks import mask_value
from cdc_apply.planning.schema import SchemaHistory
from cdc_apply.planning.table_plan import check_key_rules
from cdc_apply.planning.tables import evolve, identity_of, resolve_rules

INT4, TEXT = 23, 25
DDL = {INT4: "INT", TEXT: "STRING"}
BASE = {"bronze": {"path": "/b"}, "silver": {"path": "/s"}, "state": {"path": "/st"}}


def _chain(*specs, identity="d"):
    h = SchemaHistory()
    for i, spec in enumerate(specs):
        columns = tuple(m.RelationColumn(1 if n == "id" else 0, n, t, -1) for n, t in spec)
        h.record(10 * (i + 1), 0, m.Relation(None, 1, "public", "t", identity, columns))
    return h.relations[1].versions


def _type_of(oid, typmod, column=""):
    return DDL[oid]


def test_an_excluded_column_renamed_later_stays_out_of_silver_and_a_masked_one_stays_masked():
    chain = _chain([("id", INT4), ("pw", TEXT), ("ssn", INT4)], [("id", INT4), ("pass", TEXT), ("social", INT4)])
    rules = resolve_rules(chain, ColumnPolicy((("pw", True),), (("ssn", True, "sha256"),)))
    columns, ops = evolve(chain, _type_of, rules=rules)
    assert [(c.name, c.spark_ddl) for c in columns] == [("id", "INT"), ("social", "STRING")]
    assert [(o.kind, o.column, o.new_name) for o in ops] == [("rename", "ssn", "social")]


def test_silver_wildcards_name_table_and_column_patterns_and_a_table_rule_comes_first():
    config = parse_config({**BASE, "silver": {"path": "/s", "exclude_columns": ["*.*.pw*"],
                                              "mask_columns": {"public.*.email": "redact"}},
                           "tables": {"public.t": {"mask_columns": {"email": "sha256"}}}})
    assert config.columns_for("public.t").mask_of("email") == "sha256"
    assert config.columns_for("public.u").mask_of("email") == "redact"
    assert config.columns_for("other.u").mask_of("email") is None
    assert config.columns_for("x.y").excludes("pw_hash") and not config.columns_for("x.y").excludes("id")


@pytest.mark.parametrize("table, key", [
    ({"key": ["id"], "exclude_columns": ["id"]}, "tables.public.t.exclude_columns"),
    ({"key": ["id"], "mask_columns": {"id": "redact"}}, "tables.public.t.mask_columns"),
    ({"mask_columns": {"a": "md5"}}, "tables.public.t.mask_columns"),
    ({"exclude_columns": ["a"], "mask_columns": {"a": "redact"}}, "tables.public.t.exclude_columns"),
    ({"mask_columns": ["a"]}, "tables.public.t.mask_columns"),
])
def test_a_bad_column_rule_is_a_config_error_naming_the_key(table, key):
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, "tables": {"public.t": table}})
    assert err.value.context["key"] == key


def test_a_silver_wildcard_without_a_column_part_is_refused():
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, "silver": {"path": "/s", "exclude_columns": ["public.pw"]}})
    assert err.value.context["key"] == "silver.exclude_columns"


def test_a_replica_identity_key_column_cannot_be_excluded_and_a_hashed_key_is_allowed():
    chain = _chain([("id", INT4), ("v", TEXT)])
    excluded = resolve_rules(chain, ColumnPolicy((("id", True),)))
    with pytest.raises(ConfigError) as err:
        check_key_rules(chain[0], identity_of(chain[0]), excluded)
    assert "'id'" in str(err.value) and err.value.context["key"] == "tables.public.t.exclude_columns"
    check_key_rules(chain[0], identity_of(chain[0]), resolve_rules(chain, ColumnPolicy((), (("id", True, "sha256"),))))


def test_a_hash_is_the_hex_sha256_of_salt_and_text_and_null_stays_null():
    assert mask_value("sha256", "pepper", "alice") == hashlib.sha256(b"pepperalice").hexdigest()
    assert mask_value("sha256", "pepper", 42) == hashlib.sha256(b"pepper42").hexdigest()
    assert mask_value("redact", "", "x") == "REDACTED" and mask_value("sha256", "s", None) is None


def test_the_salt_comes_from_the_named_environment_variable_and_its_absence_names_the_key(monkeypatch):
    config = parse_config({**BASE, "silver": {"path": "/s", "mask_salt_env": "MY_SALT"},
                           "tables": {"public.t": {"mask_columns": {"a": "sha256"}}}})
    monkeypatch.delenv("MY_SALT", raising=False)
    with pytest.raises(ConfigError) as err:
        config.mask_salt()
    assert err.value.context["key"] == "silver.mask_salt_env"
    monkeypatch.setenv("MY_SALT", "s3cret")
    assert config.mask_salt() == "s3cret"
    assert parse_config({**BASE, "tables": {"public.t": {"mask_columns": {"a": "redact"}}}}).mask_salt() == ""
