"""Where the connection string comes from, how it is shown (never with its password),
and what a failed connection means in words a user can act on."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from cdc_apply.config import SourceConfig
from cdc_apply.errors import ConfigError, LandError

MASK = "***"

_KV_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_URI_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://[^:/@?#]*:)([^@/?#]*)(@)", re.IGNORECASE)
_URI_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#]*)", re.IGNORECASE)


def mask_dsn(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***`` (key/value and URI forms)."""
    masked = _KV_PASSWORD.sub(lambda m: m.group(1) + MASK, dsn)
    masked = _URI_USERINFO.sub(lambda m: m.group(1) + MASK + m.group(3), masked)
    return _URI_QUERY_PASSWORD.sub(lambda m: m.group(1) + MASK, masked)


def resolve_dsn(source: SourceConfig, environ: dict[str, str] | None = None) -> str:
    """``source.dsn``, else the environment variable named by ``source.dsn_env``."""
    if source.dsn:
        return source.dsn
    env = os.environ if environ is None else environ
    if source.dsn_env and env.get(source.dsn_env):
        return env[source.dsn_env]
    where = f"or set the environment variable {source.dsn_env}" if source.dsn_env else "(source.dsn_env is empty)"
    raise ConfigError(f"no connection string: set source.dsn {where}", key="source.dsn")


@dataclass(frozen=True)
class Target:
    """The parts of a DSN worth naming in an error (no password)."""

    host: str
    port: str
    dbname: str
    user: str
    shown: str     # the masked DSN

    @classmethod
    def of(cls, dsn: str) -> "Target":
        from psycopg2.extensions import parse_dsn

        try:
            parts = parse_dsn(dsn)
        except Exception:  # psycopg2.ProgrammingError: libpq could not parse it; its text may echo the DSN
            raise LandError("the connection string cannot be parsed; check source.dsn (or the variable "
                            "named by source.dsn_env)", dsn=mask_dsn(dsn)) from None
        env = os.environ
        return cls(host=parts.get("host") or env.get("PGHOST") or "localhost",
                   port=parts.get("port") or env.get("PGPORT") or "5432",
                   dbname=parts.get("dbname") or env.get("PGDATABASE") or parts.get("user") or "",
                   user=parts.get("user") or env.get("PGUSER") or "", shown=mask_dsn(dsn))


def scrub(text: str, dsn: str) -> str:
    """Remove the DSN's password from a server or libpq message, should it appear."""
    from psycopg2.extensions import parse_dsn

    try:
        password = parse_dsn(dsn).get("password")
    except Exception:
        password = None
    text = mask_dsn(text)
    if password and len(password) >= 3:
        text = text.replace(password, MASK)
    return text.strip()


def scrubbed_line(exc: BaseException, dsn: str) -> str:
    """An error's first line without the DSN's secrets (:func:`scrub`), or its type's name when it says nothing."""
    message = scrub(str(exc), dsn)
    return message.splitlines()[0] if message else type(exc).__name__


class SourceLandError(LandError):
    """A :class:`LandError` in reaching or checking the source, knowing whether it may heal by itself.

    ``transient``: the server is restarting, the network failed, ...; the lander then reconnects and
    checks again instead of stopping.
    """

    transient: bool = False   # also what copies made by ``with_context`` say

    def __init__(self, detail: str = "", transient: bool = False, **context: Any) -> None:
        self.transient = transient
        super().__init__(detail, **context)


def connection_error(exc: BaseException, dsn: str, replication: bool = False,
                     transient: bool = False) -> SourceLandError:
    """A :class:`LandError` that says what is wrong with connecting and what to do about it
    (``transient``: whether the failure may heal by itself, see :func:`is_transient`)."""
    target = Target.of(dsn)
    message, first = scrub(str(exc), dsn), scrubbed_line(exc, dsn)
    low = message.lower()
    where = f"{target.host}:{target.port}"
    if "password authentication failed" in low or "authentication failed" in low or \
            "no password supplied" in low or ("role" in low and "does not exist" in low):
        detail = (f"PostgreSQL at {where} refused the credentials of user {target.user!r} ({first}); "
                  "check the user and password in source.dsn or in the variable named by source.dsn_env")
    elif "must be superuser or replication role" in low or "replication attribute" in low \
            or "permission denied to start wal" in low:
        detail = (f"user {target.user!r} may not open a replication connection ({first}); "
                  f"run ALTER ROLE \"{target.user}\" REPLICATION; as a superuser")
    elif "no pg_hba.conf entry" in low:
        kind = "replication connections to" if replication else "connections to"
        detail = (f"pg_hba.conf at {where} does not allow {kind} database {target.dbname!r} for user "
                  f"{target.user!r} ({first}); add a line such as 'host {'replication' if replication else 'all'} "
                  f"{target.user} <client address>/32 scram-sha-256' and run SELECT pg_reload_conf();")
    elif "database" in low and "does not exist" in low:
        detail = f"database {target.dbname!r} does not exist at {where}; fix dbname in source.dsn"
    elif any(s in low for s in ("could not connect", "connection refused", "could not translate host",
                                "timeout expired", "no route to host", "network is unreachable",
                                "name or service not known", "server closed the connection",
                                "the database system is starting up", "the database system is shutting down")):
        detail = (f"PostgreSQL at {where} is unreachable ({first}); check that the server is running and "
                  "that host and port in source.dsn are right")
    else:
        detail = f"cannot connect to PostgreSQL at {where}: {first}"
    return SourceLandError(detail, transient=transient, dsn=target.shown)


def is_transient(exc: BaseException) -> bool:
    """Whether a connection failure may heal by itself (server restarting, network)."""
    low = str(exc).lower()
    return any(s in low for s in ("could not connect", "connection refused", "timeout expired",
                                  "server closed the connection", "starting up", "shutting down",
                                  "terminating connection", "connection to server", "no route to host",
                                  "network is unreachable", "is active for pid", "recovery mode",
                                  "ssl syscall error", "eof detected", "could not receive data"))
