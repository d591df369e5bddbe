"""Read the golden captures (pure Python, no Spark, no server).

    from golden.loader import load_capture, load_expected

    for seq, lsn, xid, payload in load_capture("transactions", "v2_stream"):
        ...

Layout under ``tests/golden/data``: ``<scenario>/<config>.hex`` (one message per line,
``lsn<TAB>xid<TAB>payload hex``, ``#`` lines are headers), ``<scenario>/expected.json``
(checkpoints), ``<scenario>/meta.json``, ``types/values.json`` and ``option_matrix.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from cdc_apply.pgoutput.messages import parse_lsn

DATA_DIR = Path(__file__).resolve().parent / "data"


class Message(NamedTuple):
    """One captured pgoutput message; unpacks as ``(seq, lsn, xid, payload)``."""

    seq: int
    lsn: int
    xid: int
    payload: bytes

    @property
    def kind(self) -> str:
        """The message type byte as a one-character string ('B', 'I', 'S', ...)."""
        return chr(self.payload[0])


Capture = list[Message]


def _root(data_dir: Path | str | None) -> Path:
    return Path(data_dir) if data_dir is not None else DATA_DIR


def list_scenarios(data_dir: Path | str | None = None) -> list[str]:
    """Scenario names (folders holding an ``expected.json``), sorted."""
    return sorted(p.parent.name for p in _root(data_dir).glob("*/expected.json"))


def list_configs(scenario: str, data_dir: Path | str | None = None) -> list[str]:
    """Capture config names of ``scenario`` (its ``*.hex`` files), sorted."""
    return sorted(p.stem for p in (_root(data_dir) / scenario).glob("*.hex"))


def read_capture(path: Path | str) -> Capture:
    """Parse one ``.hex`` capture file; ``seq`` is the 0-based index among message lines."""
    messages: Capture = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            try:
                lsn, xid, payload = line.split("\t")
                messages.append(Message(len(messages), parse_lsn(lsn), int(xid), bytes.fromhex(payload)))
            except ValueError as exc:
                raise ValueError(f"{path}:{line_no}: bad capture line: {exc}") from exc
    return messages


def load_capture(scenario: str, config: str, data_dir: Path | str | None = None) -> Capture:
    """The messages of one capture in the order PostgreSQL sent them."""
    path = _root(data_dir) / scenario / f"{config}.hex"
    if not path.exists():
        raise FileNotFoundError(f"no capture {config!r} for scenario {scenario!r} "
                                f"(have: {', '.join(list_configs(scenario, data_dir)) or 'none'})")
    return read_capture(path)


def _json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def load_expected(scenario: str, data_dir: Path | str | None = None) -> list[dict[str, Any]]:
    """The checkpoints of ``scenario``: ``{"name", "lsn", "tables": {"schema.table": {...}}}``.

    Each table has ``columns`` (name, type, type_oid, typmod), ``key`` (primary key columns
    or None), ``identity_index``, ``replica_identity``, ``oid`` and ``rows``: sorted lists of
    output-function text (None for NULL), the same text pgoutput sends in text mode.
    """
    return _json(_root(data_dir) / scenario / "expected.json")


def load_meta(scenario: str, data_dir: Path | str | None = None) -> dict[str, Any]:
    """Server version, session settings, capture method and per-config options of ``scenario``."""
    return _json(_root(data_dir) / scenario / "meta.json")


def load_values(data_dir: Path | str | None = None) -> list[dict[str, Any]]:
    """The value oracle of the ``types`` scenario: one dict per (table, key, column).

    Fields: table, key (primary key as text), column, type (format_type), type_oid, typmod,
    send_function, text (output function, TimeZone UTC; None for NULL), send_hex (send
    function bytes as hex; None for NULL) and, where it differs, text_asia_kolkata.
    """
    return _json(_root(data_dir) / "types" / "values.json")


def load_option_matrix(data_dir: Path | str | None = None) -> list[dict[str, Any]]:
    """Which pgoutput option combinations PostgreSQL 18 accepted or rejected, with its error."""
    return _json(_root(data_dir) / "option_matrix.json")
