"""The keys ``cdc-apply forget`` removes, and which bronze messages carry them.

A key is given per key column as text (``--key 42``, or ``--key '{"id": 42, "region": "eu"}'`` for a key of
several columns). PostgreSQL renders each value three ways (:mod:`cdc_apply.forgetting.source`): its output
text, which a ``t`` tuple value holds; its send form, which a ``b`` value holds (a binary stream, and the
lander's snapshot rows of every stream); and verify's canonical text, which Spark builds from silver's typed
column (:mod:`cdc_apply.verification.value_text`) — so one key is found in every form the lake holds it.

A message *carries* a forgotten key when a tuple of it (an Insert's new tuple; an Update's key or old tuple
and its new tuple; a Delete's key or old tuple) holds the key's values in every key column. Such a message
carries nothing else the lake needs (the key's own row), so it is removed whole — except an Update that moves
a row from a forgotten key to another key or back: its new row is another key's data, and the forget is
refused naming the other key (forget both, or neither). Pure: no Spark, no PostgreSQL connection.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from dataclasses import dataclass
from typing import Iterable, Iterator, Literal, Sequence

from cdc_apply.errors import CdcApplyError, ForgetError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.decoder import decode_message

# What a scanned message is to the forget: one that carries a forgotten key, an Update moving a row between a
# forgotten key and another, or a message that could not be decoded (a quarantined one may be garbled).
Found = Literal["carries", "moves", "undecodable"]
CHANGE_TYPES = (m.Insert.TYPE, m.Update.TYPE, m.Delete.TYPE)


@dataclass(frozen=True)
class ForgetKey:
    """One key to forget: the values given, and per key column the output text, send bytes and verify's text."""

    given: tuple[str, ...]
    text: tuple[str, ...]
    send: tuple[bytes, ...]
    canonical: tuple[str, ...]

    def digest(self, table: str) -> str:
        """What the ``forgotten`` state table keeps of the key: a SHA-256 of the table and the canonical
        texts (length-prefixed), so the table names no value the forget removed."""
        text = table + "".join(f"V{len(v)}:{v}" for v in self.canonical)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def shown(self, columns: Sequence[str]) -> str:
        return ", ".join(f"{c}={v}" for c, v in zip(columns, self.given))


def parse_keys(given: Sequence[str], key_columns: Sequence[str], table: str) -> list[tuple[str, ...]]:
    """Each ``--key`` as one text per key column, in ``key_columns`` order; a :class:`ForgetError` naming the
    table and its key columns for a key that does not name every key column once."""
    if not key_columns:
        raise ForgetError("the table has no replica identity key: its rows cannot be told apart to forget one "
                          "(REPLICA IDENTITY FULL or NOTHING)", table=table)
    out = []
    for raw in given:
        values: dict | None = None
        if raw.lstrip().startswith("{"):
            try:
                values = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ForgetError(f"--key {raw!r} is not a JSON object: {exc.msg}", table=table) from None
        if values is None:
            if len(key_columns) != 1:
                raise ForgetError(f"the key has {len(key_columns)} columns ({', '.join(key_columns)}): give --key as "
                                  'a JSON object, e.g. {"' + key_columns[0] + '": ...}', table=table)
            values = {key_columns[0]: raw}
        if not isinstance(values, dict) or set(values) != set(key_columns):
            raise ForgetError(f"--key {raw!r} must name exactly the key columns {', '.join(key_columns)}", table=table)
        if any(v is None for v in values.values()):
            raise ForgetError(f"--key {raw!r}: a key column is never NULL", table=table)
        out.append(tuple(v if isinstance(v, str) else json.dumps(v) for v in (values[c] for c in key_columns)))
    if not out:
        raise ForgetError("no key given (--key)", table=table)
    return out


@dataclass(frozen=True)
class ScanSpec:
    """What a scan of bronze (or the quarantine) needs on an executor: the table's relation ids, per relation
    the seqs its versions start after and each version's key column positions, the keys, and the source's
    stream blocks (``(start seq, stop seq)``: a change inside one carries its transaction's xid)."""

    versions: dict[int, tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]]
    keys: tuple[ForgetKey, ...]
    streams: tuple[tuple[int, int], ...] = ()

    def in_stream(self, seq: int) -> bool:
        i = bisect.bisect_right(self.streams, (seq, 2 ** 63)) - 1
        return i >= 0 and self.streams[i][0] < seq < self.streams[i][1]

    def positions(self, relation_id: int, seq: int) -> tuple[int, ...] | None:
        seqs, positions = self.versions.get(relation_id, ((), ()))
        i = bisect.bisect_left(seqs, seq)
        return positions[i - 1] if i else (positions[0] if positions else None)


def key_of(values: m.TupleData | None, positions: Sequence[int], keys: Sequence[ForgetKey]) -> int | None:
    """Which of ``keys`` the tuple holds (its index), None when none (or no tuple)."""
    if values is None or not positions or max(positions) >= len(values):
        return None
    for index, key in enumerate(keys):
        for slot, at in enumerate(positions):
            value = values[at]
            if isinstance(value, str):
                if value != key.text[slot]:
                    break
            elif isinstance(value, bytes):
                if value != key.send[slot]:
                    break
            else:   # NULL or unchanged TOAST: no key value
                break
        else:
            return index
    return None


def classify(payload: bytes, seq: int, spec: ScanSpec) -> tuple[Found, str] | None:
    """What ``payload`` (a change of the table, at ``seq``) is to the forget, with a detail for a key move or an
    undecodable message; None when it carries no forgotten key."""
    try:
        msg = decode_message(payload, spec.in_stream(seq))
    except CdcApplyError as exc:
        return "undecodable", str(exc)
    if not isinstance(msg, (m.Insert, m.Update, m.Delete)):
        return None
    positions = spec.positions(msg.relation_id, seq)
    if positions is None:
        return None
    if isinstance(msg, m.Insert):
        return ("carries", "") if key_of(msg.new, positions, spec.keys) is not None else None
    old = msg.key if msg.key is not None else msg.old
    if isinstance(msg, m.Delete):
        return ("carries", "") if key_of(old, positions, spec.keys) is not None else None
    new = key_of(msg.new, positions, spec.keys)
    before = new if old is None else key_of(old, positions, spec.keys)
    if before is None and new is None:
        return None
    if before is not None and new is not None and before == new:
        return "carries", ""
    moved_from = "a key not forgotten" if before is None else f"forgotten key #{before + 1}"
    moved_to = "a key not forgotten" if new is None else f"forgotten key #{new + 1}"
    return "moves", f"an Update moves a row from {moved_from} to {moved_to}"


def scan_batches(batches: Iterable, spec: ScanSpec) -> Iterator:
    """``mapInArrow``'s function: of each batch's rows (``seq``, ``lsn``, ``payload``), those :func:`classify`
    finds, as (``seq``, ``lsn``, ``found``, ``detail``)."""
    import pyarrow as pa

    for batch in batches:
        seqs, lsns, payloads = (batch.column(i).to_pylist() for i in range(3))
        out: tuple[list, list, list, list] = ([], [], [], [])
        for seq, lsn, payload in zip(seqs, lsns, payloads):
            got = classify(payload, seq, spec)
            if got is not None:
                for column, value in zip(out, (seq, lsn, got[0], got[1])):
                    column.append(value)
        yield pa.RecordBatch.from_arrays([pa.array(out[0], pa.int64()), pa.array(out[1], pa.int64()),
                                          pa.array(out[2], pa.string()), pa.array(out[3], pa.string())],
                                         names=["seq", "lsn", "found", "detail"])
