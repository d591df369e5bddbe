"""Column exclusion and masking (``exclude_columns``, ``mask_columns``) on a real PostgreSQL 18: the
initial snapshot and streamed changes of a keyed table (one column excluded, one hashed, one redacted,
a hashed TOAST column left unchanged by an update, columns renamed), a table keyed by a hashed column
(updates, a key move, a delete) and a keyless REPLICA IDENTITY FULL table. Then every file the pipeline
wrote but bronze (which keeps the raw WAL by contract) is searched for the clear values."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pg_lake import PgLake

from cdc_apply.errors import ConfigError
from tests.verify.test_verify_spark import verify_while_applying

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

SALT = "salt-of-the-column-rules-test"
SSN = "secret-ssn-123-45-6789"
PASSWORD = "secret-password-hunter2-correct-horse"
EMAIL = "secret-mail-alice@example.com"
KEY_MAIL = "secret-key-bob@example.com"
MOVED_MAIL = "secret-key-carol@example.com"
FULL_SECRET = "secret-full-identity-value"
# TOAST: stored out of line uncompressed (STORAGE EXTERNAL), well over the 2 kB threshold.
DOC = "secret-doc-" + "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(100))
CLEAR = [SSN, PASSWORD, EMAIL, KEY_MAIL, MOVED_MAIL, FULL_SECRET, DOC[:64], SALT]

SETUP = [
    "CREATE TABLE people (id int PRIMARY KEY, email text, ssn text, pw text, doc text, n int)",
    "ALTER TABLE people ALTER COLUMN doc SET STORAGE EXTERNAL",
    f"INSERT INTO people VALUES (1, '{EMAIL}', '{SSN}', '{PASSWORD}', '{DOC}', 1), (2, NULL, NULL, NULL, NULL, 2)",
    "CREATE TABLE accounts (email text PRIMARY KEY, n int)",
    f"INSERT INTO accounts VALUES ('{KEY_MAIL}', 1), ('plain@example.com', 2)",
    "CREATE TABLE full_rows (a int, secret text)",
    "ALTER TABLE full_rows REPLICA IDENTITY FULL",
    f"INSERT INTO full_rows VALUES (1, '{FULL_SECRET}'), (1, '{FULL_SECRET}'), (2, 'other')",
]
RULES = {
    "silver": {"history": ["public.people"], "mask_columns": {"public.*.email": "sha256"}},
    "tables": {"public.people": {"exclude_columns": ["pw"], "mask_columns": {"ssn": "redact", "doc": "sha256"}},
               "public.full_rows": {"mask_columns": {"secret": "sha256"}}},
}


def _hash(value: str) -> str:
    return hashlib.sha256((SALT + value).encode()).hexdigest()


@pytest.fixture(scope="module")
def masked(postgres, spark, tmp_path_factory):
    before = os.environ.get("CDC_APPLY_MASK_SALT")
    os.environ["CDC_APPLY_MASK_SALT"] = SALT
    root = tmp_path_factory.mktemp("column_rules")
    lake = PgLake(postgres, spark, root, "column_rules", SETUP, RULES)
    printed = [lake.land_and_apply()]
    lake.run(f"INSERT INTO people VALUES (3, '{EMAIL}', '{SSN}', '{PASSWORD}', NULL, 3)",
             "UPDATE people SET n = 10 WHERE id = 1",   # doc: unchanged TOAST
             f"UPDATE accounts SET n = 5 WHERE email = '{KEY_MAIL}'",
             f"UPDATE accounts SET email = '{MOVED_MAIL}' WHERE email = 'plain@example.com'",
             "UPDATE full_rows SET a = 3 WHERE a = 2", "DELETE FROM full_rows WHERE ctid = "
             f"(SELECT min(ctid) FROM full_rows WHERE secret = '{FULL_SECRET}')")
    printed.append(lake.land_and_apply())
    lake.run("ALTER TABLE people RENAME COLUMN ssn TO social", "ALTER TABLE people RENAME COLUMN pw TO pass")
    lake.run(f"UPDATE people SET social = '{SSN}-2', pass = '{PASSWORD}-2', n = 20 WHERE id = 2",
             f"DELETE FROM accounts WHERE email = '{KEY_MAIL}'")
    printed.append(lake.land_and_apply())
    yield lake, root, printed
    lake.close()
    if before is None:
        os.environ.pop("CDC_APPLY_MASK_SALT", None)
    else:
        os.environ["CDC_APPLY_MASK_SALT"] = before


def test_silver_equals_postgresql_with_the_same_exclusions_and_masks(masked):
    lake, _, _ = masked
    assert lake.silver_differences() == []


def test_the_history_table_holds_every_state_postgresql_went_through_masked_alike(masked):
    lake, _, _ = masked
    # Only public.people keeps a history table; the other tables' states name theirs missing.
    assert [d for d in lake.history_differences() if "public.people" in d] == []


def test_an_excluded_column_is_no_silver_column_even_after_a_rename(masked):
    lake, _, _ = masked
    columns = lake.spark.read.format("delta").load(f"{lake.config.silver.path}/public/people").columns
    assert "pw" not in columns and "pass" not in columns
    assert [c for c in columns if not c.startswith("_cdc_")] == ["id", "email", "social", "doc", "n"]


def test_masked_values_are_the_salted_hash_or_redacted_and_a_renamed_column_stays_masked(masked):
    lake, _, _ = masked
    rows = {r.id: r for r in lake.spark.read.format("delta").load(f"{lake.config.silver.path}/public/people").collect()}
    assert rows[1].email == _hash(EMAIL) == rows[3].email   # stable across batches: joins still work
    assert (rows[1].social, rows[2].social, rows[3].social) == ("REDACTED", "REDACTED", "REDACTED")
    assert rows[2].email is None                             # NULL stays NULL


def test_an_unchanged_toast_value_of_a_masked_column_keeps_its_hash(masked):
    lake, _, _ = masked
    row = lake.spark.read.format("delta").load(f"{lake.config.silver.path}/public/people").where("id = 1").first()
    assert (row.n, row.doc) == (10, _hash(DOC))


def test_a_hashed_key_matches_its_updates_key_moves_and_deletes(masked):
    lake, _, _ = masked
    rows = sorted(tuple(r) for r in lake.spark.read.format("delta").load(
        f"{lake.config.silver.path}/public/accounts").select("email", "n").collect())
    assert rows == [(_hash(MOVED_MAIL), 2)]


def test_a_keyless_full_identity_table_matches_rows_on_their_masked_values(masked):
    lake, _, _ = masked
    rows = sorted(tuple(r) for r in lake.spark.read.format("delta").load(
        f"{lake.config.silver.path}/public/full_rows").select("a", "secret").collect())
    assert rows == [(1, _hash(FULL_SECRET)), (3, _hash("other"))]


def _file_texts(path: Path):
    """A file's bytes, and for Parquet every value of every column as text too (pages may be compressed)."""
    data = path.read_bytes()
    yield data.decode("utf-8", "replace")
    if path.suffix == ".parquet" or path.name.endswith(".checkpoint.parquet"):
        table = pq.read_table(path)
        for column in table.columns:
            yield "\n".join(map(str, column.to_pylist()))


def test_no_file_the_pipeline_wrote_but_bronze_holds_a_clear_value_of_an_excluded_or_masked_column(masked):
    lake, root, printed = masked
    found = [(value, "stdout") for text in printed for value in CLEAR if value in text]
    scanned = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.relative_to(root).parts[0] == "bronze":
            continue
        scanned += 1
        for text in _file_texts(path):
            found += [(value, str(path.relative_to(root))) for value in CLEAR if value in text]
    assert scanned > 50 and {p.relative_to(root).parts[0] for p in root.iterdir()} >= {"silver", "silver_history", "state"}
    assert found == []
    history = lake.spark.read.format("delta").load(f"{root}/silver_history/public/people")
    assert "pw" not in history.columns and history.where(f"email = '{_hash(EMAIL)}'").count() >= 2


def test_bronze_keeps_the_raw_values_by_contract(masked):
    _, root, _ = masked
    bronze = b"".join(p.read_bytes() for p in (root / "bronze").rglob("*.parquet"))
    texts = bronze.decode("latin-1") + "".join(
        "\n".join(map(str, c.to_pylist())) for p in (root / "bronze").rglob("*.parquet") for c in pq.read_table(p).columns)
    assert PASSWORD in texts or PASSWORD.encode().hex() in texts


def test_an_apply_with_a_hashed_column_and_no_salt_stops_naming_the_key(masked, monkeypatch):
    lake, _, _ = masked
    monkeypatch.delenv("CDC_APPLY_MASK_SALT")
    with pytest.raises(ConfigError) as err:
        lake.apply()
    assert err.value.context.get("key") == "silver.mask_salt_env" and SALT not in str(err.value)


def test_verify_leaves_masked_columns_uncompared_and_names_a_masked_key(masked):
    lake, _, _ = masked
    # Verify waits for silver to pass its snapshot: the job lands and applies meanwhile, a second apart.
    run = verify_while_applying(lake, [], 0, steady=False, tables=["public.people", "public.accounts"], record=False)
    results = {t.table: t for t in run.tables}
    people, accounts = results["public.people"], results["public.accounts"]
    assert people.status == "equal", people.line()
    assert sorted(people.unhashed_columns) == ["doc", "email", "social"] and people.source_only_columns == ["pass"]
    assert accounts.status == "error" and "email" in accounts.error and "masked" in accounts.error


def test_a_hashed_integer_key_copied_in_key_ranges_stops_naming_snapshot_chunk_rows(postgres, spark, tmp_path,
                                                                                    monkeypatch):
    from cdc_apply.errors import CdcApplyError

    monkeypatch.setenv("CDC_APPLY_MASK_SALT", SALT)
    lake = PgLake(postgres, spark, tmp_path, "column_rules_chunks",
                  ["CREATE TABLE ids (id int PRIMARY KEY, v text)", "INSERT INTO ids VALUES (1, 'a'), (2, 'b')"],
                  {"tables": {"public.ids": {"mask_columns": {"id": "sha256"}}}})
    try:
        with pytest.raises(CdcApplyError) as err:
            lake.land_and_apply()
        assert "snapshot_chunk_rows" in str(err.value) and "public.ids" in str(err.value)
    finally:
        lake.close()
