"""What one source carries from batch to batch: open transactions, stream blocks, prepared transactions.

Only metadata is carried — seq ranges and decided fields — never the changes
themselves: those stay in bronze and are read again by seq range when their
transaction is decided. So a prepared transaction that waits a thousand
batches costs a few bytes here.

Everything here is plain data with a JSON round trip (the progress table
stores it as a string).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

SeqRange = tuple[int, int]  # inclusive bounds
# How a transaction arrives: Begin ... Commit, Stream Start ... Stop blocks, or Begin Prepare ... Prepare.
TxnKind = Literal["plain", "streamed", "prepared"]


@dataclass(frozen=True, slots=True)
class OpenTxn:
    """A transaction being received: Begin ... Commit, or Begin Prepare ... Prepare."""

    kind: TxnKind  # "plain" or "prepared" (a streamed one is a StreamedTxn)
    xid: int
    begin_seq: int
    begin_lsn: int  # Begin's final LSN, or Begin Prepare's prepare LSN
    begin_ts: int
    gid: str | None = None
    # The Origin message's origin name: any name an upstream gave its replication origin, so no word list
    # (config.choices.Origin is the policy that filters on whether there is one).
    origin: str | None = None
    origin_lsn: int | None = None
    quarantined: str | None = None  # why the whole transaction goes to quarantine (on_error = quarantine)
    directives: tuple[tuple[str, str], ...] = ()  # cdc_apply's own messages in it: (prefix, content)


@dataclass(frozen=True, slots=True)
class StreamedTxn:
    """A top-level transaction whose changes arrive in Stream Start ... Stop blocks."""

    xid: int
    blocks: tuple[SeqRange, ...] = ()
    sub_aborts: tuple[tuple[int, int], ...] = ()  # (subxid, seq of the Stream Abort)
    origin: str | None = None
    origin_lsn: int | None = None
    first_lsn: int | None = None  # its first Stream Start's LSN (the transaction's first LSN)
    directives: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PreparedTxn:
    """A prepared transaction waiting for Commit Prepared or Rollback Prepared."""

    xid: int
    gid: str
    ranges: tuple[SeqRange, ...]
    in_stream: bool
    sub_aborts: tuple[tuple[int, int], ...]
    begin_seq: int
    prepare_seq: int
    prepare_lsn: int
    prepare_end_lsn: int
    prepare_ts: int
    origin: str | None = None
    origin_lsn: int | None = None
    quarantined: str | None = None  # why the whole transaction goes to quarantine when it commits
    directives: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SourceState:
    """The carried state of one source after its last applied batch."""

    applied_seq: int = -1  # every message with seq <= applied_seq has been handled
    in_stream: bool = False
    stream_xid: int | None = None
    block_start: int | None = None
    open_txn: OpenTxn | None = None
    streams: tuple[StreamedTxn, ...] = ()
    prepared: tuple[PreparedTxn, ...] = ()
    last_commit_lsn: int | None = None
    last_commit_ts: int | None = None
    last_end_lsn: int | None = None
    format_state: str | None = None  # a non-pgoutput source's own carried state (JSON)
    # Bronze rows with seq <= applied_seq when they were applied: bronze only grows, so more rows there
    # later means some were appended below the applied seq (None: not counted, e.g. an older state).
    applied_rows: int | None = None
    # Snapshots committed (relation id, LSN C): later transactions committed below C skip that relation.
    snapshot_resets: tuple[tuple[int, int], ...] = ()
    # Column missing values announced by the source's event trigger, waiting for the Relation version
    # that adds the column: (relation id, column name, value as text).
    column_defaults: tuple[tuple[int, str, str], ...] = ()

    def pending_ranges(self) -> tuple[SeqRange, ...]:
        """Seq ranges holding changes of transactions not yet decided (open ranges end at ``applied_seq``)."""
        out: list[SeqRange] = []
        if self.open_txn is not None:
            out.append((self.open_txn.begin_seq, self.applied_seq))
        for stream in self.streams:
            out.extend(stream.blocks)
        if self.block_start is not None:
            out.append((self.block_start, self.applied_seq))
        for prepared in self.prepared:
            out.extend(prepared.ranges)
        return tuple(sorted(out))

    def oldest_needed_seq(self) -> int | None:
        """The smallest seq bronze must still keep for this source (``None``: nothing pending)."""
        ranges = self.pending_ranges()
        return ranges[0][0] if ranges else None

    def describe_pending(self) -> dict[str, int]:
        return {
            "open": int(self.open_txn is not None),
            "streamed": len(self.streams),
            "prepared": len(self.prepared),
        }

    # -- JSON ------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> "SourceState":
        if not text:
            return cls()
        raw: dict[str, Any] = json.loads(text)
        open_txn = raw.pop("open_txn")
        streams = raw.pop("streams")
        prepared = raw.pop("prepared")
        resets = raw.pop("snapshot_resets", ())
        defaults = raw.pop("column_defaults", ())
        return cls(
            **raw,
            snapshot_resets=_pairs(resets),
            column_defaults=tuple((int(r), str(c), str(v)) for r, c, v in defaults),
            open_txn=_open(open_txn) if open_txn else None,
            streams=tuple(_streamed(s) for s in streams),
            prepared=tuple(_prepared(p) for p in prepared),
        )


def _pairs(items: list[list[int]]) -> tuple[tuple[int, int], ...]:
    return tuple((int(a), int(b)) for a, b in items)


def _directives(raw: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple((str(p), str(c)) for p, c in raw.get("directives", ()))


def _open(raw: dict[str, Any]) -> OpenTxn:
    return replace(OpenTxn(**raw), directives=_directives(raw))


def _streamed(raw: dict[str, Any]) -> StreamedTxn:
    return replace(StreamedTxn(**raw), blocks=_pairs(raw["blocks"]), sub_aborts=_pairs(raw["sub_aborts"]),
                   directives=_directives(raw))


def _prepared(raw: dict[str, Any]) -> PreparedTxn:
    return replace(PreparedTxn(**raw), ranges=_pairs(raw["ranges"]), sub_aborts=_pairs(raw["sub_aborts"]),
                   directives=_directives(raw))


__all__ = ["OpenTxn", "PreparedTxn", "SeqRange", "SourceState", "StreamedTxn"]
