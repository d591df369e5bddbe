"""What the lander says when it cannot work, and the options it refuses before connecting."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from lander_helpers import make_config

from cdc_apply.cli.main import main
from cdc_apply.config import SourceConfig, parse_config
from cdc_apply.errors import ConfigError, LandError
from cdc_apply.lander.dsn import mask_dsn, resolve_dsn
from cdc_apply.lander.lander import Lander
from cdc_apply.lander.options import replication_options

MATRIX = Path(__file__).resolve().parents[1] / "golden" / "data" / "option_matrix.json"
DB = "land_errors"


# -- options and connection strings (no server) ---------------------------------------
@pytest.mark.parametrize("case", [c for c in json.loads(MATRIX.read_text()) if c["proto_version"] <= 4
                                  and not c["slot_two_phase"]],
                         ids=lambda c: f"proto{c['proto_version']}-{c['streaming']}-2pc{int(c['two_phase_option'])}")
def test_protocol_options_are_refused_exactly_where_postgresql_refuses_them(case):
    source = SourceConfig(proto_version=case["proto_version"], streaming=case["streaming"],
                          two_phase=case["two_phase_option"])
    if case["accepted"]:
        options = replication_options(source)
        assert options["proto_version"] == str(case["proto_version"])
        assert options.get("streaming", "off") == case["streaming"]
        assert ("two_phase" in options) == case["two_phase_option"]
    else:
        with pytest.raises(ConfigError) as err:
            replication_options(source)
        key = "source.streaming" if "streaming" in case["error"] else "source.two_phase"
        assert err.value.context["key"] == key


def test_the_options_sent_name_the_publication_as_an_identifier_and_carry_every_setting():
    options = replication_options(SourceConfig(publication='My "Pub"', binary=True, messages=False,
                                               origin="none", streaming="on", proto_version=3, two_phase=False))
    assert options == {"proto_version": "3", "publication_names": '"My ""Pub"""', "messages": "false",
                       "binary": "true", "origin": "none", "streaming": "on"}


@pytest.mark.parametrize("dsn, shown", [
    ("host=db port=5432 user=u password=s3cret dbname=x", "host=db port=5432 user=u password=*** dbname=x"),
    ("host=db password='p w d' user=u", "host=db password=*** user=u"),
    ("postgresql://u:s3cret@db:5432/x?sslmode=require", "postgresql://u:***@db:5432/x?sslmode=require"),
    ("postgres://db/x?user=u&password=s3cret", "postgres://db/x?user=u&password=***"),
    ("host=db user=u dbname=x", "host=db user=u dbname=x"),
])
def test_a_connection_string_is_shown_without_its_password(dsn, shown):
    assert mask_dsn(dsn) == shown


def test_the_connection_string_comes_from_the_config_or_the_named_environment_variable():
    assert resolve_dsn(SourceConfig(dsn="host=a"), {"CDC_APPLY_DSN": "host=b"}) == "host=a"
    assert resolve_dsn(SourceConfig(dsn_env="MY_DSN"), {"MY_DSN": "host=c"}) == "host=c"
    with pytest.raises(ConfigError, match="MY_DSN") as err:
        resolve_dsn(SourceConfig(dsn_env="MY_DSN"), {})
    assert err.value.context["key"] == "source.dsn"


def test_the_cli_refuses_parallel_streaming_on_protocol_2_before_starting_anything(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text('[bronze]\npath = "b"\n[silver]\npath = "s"\n[state]\npath = "st"\n'
                      '[source]\ndsn = "host=127.0.0.1"\nproto_version = 2\nstreaming = "parallel"\n')
    assert main(["land", "--config", str(config), "--once"]) == 2
    err = capsys.readouterr().err
    assert "source.streaming" in err and "proto_version 4" in err


# -- a real server that says no ----------------------------------------------------------
def lander_for(tmp_path, dsn, **source):
    config = parse_config({"bronze": {"path": str(tmp_path / "bronze")}, "silver": {"path": str(tmp_path / "s")},
                           "state": {"path": str(tmp_path / "st")},
                           "source": {"name": "e", "dsn": dsn, "connect_timeout": 2, **source}})
    return Lander(config, spark=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.postgres
def test_an_unreachable_server_is_named_with_host_and_port_and_no_password(tmp_path):
    port = free_port()
    with pytest.raises(LandError) as err:
        lander_for(tmp_path, f"host=127.0.0.1 port={port} user=u password=hunter2 dbname=x").run(once=True)
    text = str(err.value)
    assert f"127.0.0.1:{port} is unreachable" in text and "check that the server is running" in text
    assert "hunter2" not in text and "password=***" in text


@pytest.fixture(scope="module")
def db(postgres):
    postgres.create_database(DB)
    return postgres


@pytest.mark.postgres
def test_a_missing_slot_says_how_to_create_it(db, tmp_path):
    db.execute("CREATE PUBLICATION pub_e FOR ALL TABLES", dbname=DB)
    with pytest.raises(LandError) as err:
        lander_for(tmp_path, db.dsn(DB), slot="no_such_slot", publication="pub_e").run(once=True)
    text = str(err.value)
    assert "replication slot 'no_such_slot' does not exist" in text
    assert "source.create_slot = true" in text
    assert "SELECT pg_create_logical_replication_slot('no_such_slot', 'pgoutput', false, true)" in text


@pytest.mark.postgres
def test_a_missing_publication_says_how_to_create_it(db, tmp_path):
    with pytest.raises(LandError) as err:
        lander_for(tmp_path, db.dsn(DB), publication="no_such_pub").run(once=True)
    text = str(err.value)
    assert "publication 'no_such_pub' does not exist" in text
    assert 'CREATE PUBLICATION "no_such_pub" FOR ALL TABLES' in text and "source.create_publication" in text


@pytest.mark.postgres
def test_each_of_several_publications_is_checked_and_the_missing_one_named(db, tmp_path):
    db.execute("CREATE PUBLICATION pub_there FOR ALL TABLES", dbname=DB)
    with pytest.raises(LandError) as err:
        lander_for(tmp_path, db.dsn(DB), publication="pub_there,pub_gone").run(once=True)
    text = str(err.value)
    assert "publication 'pub_gone' does not exist" in text and "pub_there'" not in text.split("(")[0]
    assert 'CREATE PUBLICATION "pub_gone"' in text and "CREATE PUBLICATION \"pub_there\"" not in text
    assert err.value.context["key"] == "source.publication"


def test_create_publication_with_several_publications_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as err:
        replication_options(SourceConfig(publication="pub_a, pub_b", create_publication=True))
    assert err.value.context["key"] == "source.create_publication"
    assert "pub_a, pub_b" in str(err.value)
    assert replication_options(SourceConfig(publication="pub_a, pub_b"))["publication_names"] == '"pub_a","pub_b"'


@pytest.mark.postgres
def test_a_role_without_replication_is_told_to_get_it(db, tmp_path):
    db.execute("DO $$ BEGIN CREATE ROLE land_plain LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    db.execute(f"GRANT ALL ON DATABASE {DB} TO land_plain")
    db.execute("SELECT pg_create_logical_replication_slot('err_slot', 'pgoutput', false, true)", dbname=DB)
    db.execute("CREATE PUBLICATION pub_r FOR ALL TABLES", dbname=DB)
    dsn = f"host=127.0.0.1 port={db.port} user=land_plain dbname={DB}"
    with pytest.raises(LandError) as err:
        lander_for(tmp_path, dsn, slot="err_slot", publication="pub_r").run(once=True)
    assert 'ALTER ROLE "land_plain" REPLICATION' in str(err.value)


@pytest.mark.spark
@pytest.mark.postgres
def test_a_bronze_table_with_another_schema_is_refused(db, spark, tmp_path):
    spark.range(1).write.format("delta").save(str(tmp_path / "bronze"))
    db.execute("SELECT pg_create_logical_replication_slot('err_bronze', 'pgoutput', false, true)", dbname=DB)
    db.execute("CREATE PUBLICATION pub_b FOR ALL TABLES", dbname=DB)
    config = make_config(tmp_path, db.dsn(DB), "e", "err_bronze", "pub_b")
    with pytest.raises(LandError, match="does not have the bronze schema"):
        Lander(config, spark).run(once=True)


@pytest.fixture(scope="module")
def replica_server(tmp_path_factory):
    """A server with wal_level = replica whose role 'pw' must give a password."""
    from cdc_apply.testing.postgres import start_postgres

    server = start_postgres(tmp_path_factory.mktemp("replica") / "data", wal_level="replica")
    try:
        server.execute("CREATE ROLE pw LOGIN PASSWORD 'right-secret'")
        hba = server.datadir / "pg_hba.conf"
        hba.write_text("host all pw 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        server.execute("SELECT pg_reload_conf()")
        yield server
    finally:
        server.destroy()


@pytest.mark.postgres
def test_wal_level_replica_is_refused_with_what_to_run(replica_server, tmp_path):
    with pytest.raises(LandError) as err:
        lander_for(tmp_path, replica_server.dsn()).run(once=True)
    text = str(err.value)
    assert "wal_level is 'replica'" in text and "ALTER SYSTEM SET wal_level = logical" in text
    assert "restart" in text


@pytest.mark.postgres
def test_wrong_credentials_are_named_without_showing_the_password(replica_server, tmp_path):
    dsn = f"host=127.0.0.1 port={replica_server.port} user=pw password=wrong-secret dbname=postgres"
    with pytest.raises(LandError) as err:
        lander_for(tmp_path, dsn).run(once=True)
    text = str(err.value)
    assert "refused the credentials of user 'pw'" in text and "source.dsn" in text
    assert "wrong-secret" not in text and "password=***" in text
