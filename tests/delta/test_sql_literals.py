"""SQL text the job builds: every string literal goes through ``quote_literal`` and reads back exactly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_apply.delta.ddl import create_statement, create_table, set_properties
from cdc_apply.delta.engine import spark_tables
from cdc_apply.delta.names import pg_ident, pg_literal, quote_ident, quote_literal
from cdc_apply.delta.refs import TableRef

HOSTILE = ["plain", "it's", "back\\slash", "ends with \\", "\\'", "'; DROP TABLE x; --", "`tick`", 'dq "x"',
           "line\nbreak\ttab\r", "\\u0041 \\n \\%", "ü名前 \U0001f600", "", "nul\x00"]


class RecordingSpark:
    """Takes the SQL text a function runs, instead of running it."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def sql(self, text: str) -> None:
        self.statements.append(text)


@pytest.mark.parametrize("text, literal", [
    ("plain", "'plain'"), ("it's", "'it\\'s'"), ("back\\slash", "'back\\\\slash'"), ("ends with \\", "'ends with \\\\'"),
    ("\\'", "'\\\\\\''"), ("", "''"),
])
def test_a_literal_escapes_backslashes_and_single_quotes(text, literal):
    assert quote_literal(text) == literal


@pytest.mark.parametrize("text", HOSTILE)
def test_a_literal_has_no_unescaped_quote_inside(text):
    body = quote_literal(text)[1:-1]
    escaped = False
    for char in body:
        assert escaped or char != "'", (text, body)
        escaped = not escaped and char == "\\"
    assert not escaped  # the closing quote is not escaped


def test_an_identifier_doubles_its_backticks():
    assert quote_ident("a`b") == "`a``b`"


def test_table_properties_and_the_comment_are_written_as_literals():
    spark = RecordingSpark()
    ref = TableRef(path="/lake/silver/public/t")
    props = {"cdc_apply.relation": "public.ends with \\", "k'ey": "v'al"}
    created = create_statement(ref, [("id", "INT")], props, comment="of src:public.ends with \\")
    set_properties(spark, ref, props)
    altered, = spark.statements
    assert f"COMMENT {quote_literal('of src:public.ends with ' + chr(92))}" in created
    for statement in (created, altered):
        assert (f"{quote_literal('cdc_apply.relation')} = {quote_literal(props['cdc_apply.relation'])}, "
                f"{quote_literal(chr(39).join(['k', 'ey']))} = {quote_literal('v' + chr(39) + 'al')}") in statement


def test_replacing_a_table_writes_its_properties_and_comment_as_literals():
    spark = RecordingSpark()
    create_table(spark_tables(spark), TableRef(path="/p"), [("id", "INT")], {"k": "it's"}, comment="c\\", replace=True)
    (text,) = spark.statements
    assert text.startswith("REPLACE TABLE delta.`/p` (`id` INT) USING delta")
    assert f"COMMENT {quote_literal('c' + chr(92))}" in text and f"{quote_literal('k')} = {quote_literal('it' + chr(39) + 's')}" in text


@pytest.mark.spark
@settings(print_blob=True, max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
       | st.lists(st.sampled_from(["\\", "'", '"', "`", "\n", "\\u0041", "%", "_", ";", "--"]), max_size=8).map("".join))
def test_spark_parses_every_quoted_literal_back_to_its_text(spark, text):
    parsed = spark._jsparkSession.sessionState().sqlParser().parseExpression(quote_literal(text))
    assert parsed.eval(None).toString() == text


@pytest.mark.spark
def test_a_replaced_table_reads_its_hostile_properties_and_comment_back_exactly(spark, tmp_path):
    from cdc_apply.delta.ddl import table_properties

    ref = TableRef(path=str(tmp_path / "t"))
    create_table(spark_tables(spark), ref, [("id", "INT")], {"cdc_apply.relation": "public.first"}, comment="first")
    hostile = "it's \\ `x` \"y\" '; DROP TABLE x; -- \n ü \\"
    props = {"delta.columnMapping.mode": "name", "cdc_apply.relation": f"public.{hostile}"}
    create_table(spark_tables(spark), ref, [("id", "BIGINT"), (hostile, "STRING")], props, comment=f"of src:public.{hostile}",
                 replace=True)
    assert table_properties(spark, ref)["cdc_apply.relation"] == f"public.{hostile}"
    (detail,) = spark.sql(f"DESCRIBE DETAIL {ref.sql}").collect()
    assert detail.description == f"of src:public.{hostile}"
    assert ref.read(spark).columns == ["id", hostile]


def test_postgresql_reads_back_every_hostile_name_and_literal_quoted_by_pg_ident_and_pg_literal(postgres):
    # NUL cannot be in a PostgreSQL text or name at all: the rest must come back exactly as given.
    for text in [t for t in HOSTILE if "\x00" not in t and t]:
        rows = postgres.execute(f"SELECT {pg_literal(text)} AS {pg_ident(text)}")
        assert rows == [(text,)], text
        postgres.execute(f"CREATE TEMP TABLE IF NOT EXISTS {pg_ident(text[:60])} ()")
