"""The pgoutput options of START_REPLICATION, and the session settings of the walsender.

:func:`replication_options` refuses the combinations PostgreSQL refuses, with a
:class:`ConfigError` naming the key, before any connection is made.
"""

from __future__ import annotations

from cdc_apply.config import SourceConfig
from cdc_apply.config.choices import Streaming
from cdc_apply.delta.names import pg_ident
from cdc_apply.errors import ConfigError

# The walsender formats text-mode values with its session's settings. These are the ones the
# decoder is proven against (golden captures): ISO dates, exact floats, hex bytea, UTC.
SESSION_SETTINGS: dict[str, str] = {
    "TimeZone": "UTC",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "extra_float_digits": "3",
    "bytea_output": "hex",
    "lc_monetary": "C",
    "client_encoding": "UTF8",
}

# A server that vanishes without closing the socket is noticed within about 25 s, not TCP's 15 min.
TCP_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}


def publication_names(source: SourceConfig) -> tuple[str, ...]:
    """The publications ``source.publication`` names (a comma-separated list), in order."""
    names = tuple(p.strip() for p in source.publication.split(","))
    if not any(names):
        raise ConfigError("must name a publication", key="source.publication")
    if not all(names):
        raise ConfigError(f"has an empty name in its list {source.publication!r}", key="source.publication")
    return names


def replication_options(source: SourceConfig) -> dict[str, str]:
    """The pgoutput options for ``source``, checked against its ``proto_version``.

    Mirrors PostgreSQL 18: streaming = on needs protocol 2, streaming =
    parallel needs 4, two_phase needs 3 (see tests/golden/data/option_matrix.json).
    ``create_publication`` is refused with several publications: it would not
    know which tables each is to publish.
    """
    proto = source.proto_version
    if proto not in (1, 2, 3, 4):
        raise ConfigError(f"must be 1, 2, 3 or 4, got {proto!r}", key="source.proto_version")
    if source.streaming == Streaming.ON and proto < 2:
        raise ConfigError(f"streaming = 'on' needs proto_version 2 or higher (proto_version is {proto})",
                          key="source.streaming")
    if source.streaming == Streaming.PARALLEL and proto < 4:
        raise ConfigError(f"streaming = 'parallel' needs proto_version 4 (proto_version is {proto}); "
                          "use 'on' or 'off', or raise proto_version", key="source.streaming")
    if source.two_phase and proto < 3:
        raise ConfigError(f"two_phase needs proto_version 3 or higher (proto_version is {proto})",
                          key="source.two_phase")
    if source.origin not in ("any", "none"):
        raise ConfigError(f"must be 'any' or 'none', got {source.origin!r}", key="source.origin")
    publications = publication_names(source)
    if source.create_publication and len(publications) > 1:
        # One table list (source.publication_tables) cannot say which tables go into which publication.
        raise ConfigError(f"creates one publication, but source.publication names {len(publications)} "
                          f"({', '.join(publications)}): create them with CREATE PUBLICATION, or name one",
                          key="source.create_publication")
    if not source.slot.strip():
        raise ConfigError("must name a replication slot", key="source.slot")
    options = {
        "proto_version": str(proto),
        "publication_names": ",".join(pg_ident(p) for p in publications),
        "messages": "true" if source.messages else "false",
        "binary": "true" if source.binary else "false",
        "origin": source.origin,
    }
    if source.streaming != Streaming.OFF:
        options["streaming"] = str(source.streaming)
    if source.two_phase:
        options["two_phase"] = "on"
    return options


def options_string(settings: dict[str, str]) -> str:
    """libpq's ``options`` connection parameter: ``-c key=value`` with spaces escaped."""
    return " ".join(f"-c {key}={value.replace(' ', chr(92) + ' ')}" for key, value in settings.items())
