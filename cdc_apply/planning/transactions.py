"""What assembling one source's control messages decides: transactions committed or aborted, schema events,
   quarantined transactions and bad control messages (:mod:`cdc_apply.planning.assemble` produces them)."""

from __future__ import annotations

from dataclasses import dataclass

from cdc_apply.pgoutput import messages as m
from cdc_apply.planning.state import SeqRange, SourceState, TxnKind


@dataclass(frozen=True, slots=True)
class DecidedTxn:
    """A transaction whose fate is known: committed (in commit order) or aborted."""

    kind: TxnKind
    xid: int
    begin_seq: int
    decide_seq: int
    ranges: tuple[SeqRange, ...]
    in_stream: bool
    commit_lsn: int | None = None
    end_lsn: int | None = None
    commit_ts: int | None = None
    gid: str | None = None
    origin: str | None = None   # the origin's name, free text (see state.OpenTxn)
    origin_lsn: int | None = None
    sub_aborts: tuple[tuple[int, int], ...] = ()
    directives: tuple[tuple[str, str], ...] = ()  # cdc_apply's own messages in it: (prefix, content)

    @property
    def committed_lsn(self) -> int:
        """``commit_lsn`` of a committed transaction: every commit message carries one, only aborted
        transactions have none."""
        assert self.commit_lsn is not None, f"transaction xid {self.xid} was not committed"
        return self.commit_lsn

    @property
    def committed_ts(self) -> int:
        """``commit_ts`` of a committed transaction (see :attr:`committed_lsn`)."""
        assert self.commit_ts is not None, f"transaction xid {self.xid} was not committed"
        return self.commit_ts


@dataclass(frozen=True, slots=True)
class SchemaEvent:
    """A Relation or Type message, with where it sits."""

    seq: int
    lsn: int
    message: m.Relation | m.Type


@dataclass(frozen=True, slots=True)
class QuarantinedTxn:
    """A transaction a bad control message made unappliable: its changes go to quarantine whole."""

    begin_seq: int
    decide_seq: int
    ranges: tuple[SeqRange, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class BadControl:
    """A control message that could not be decoded or broke the framing (``on_error = "quarantine"``)."""

    seq: int
    lsn: int
    payload: bytes
    error: str


@dataclass(frozen=True, slots=True)
class Assembly:
    committed: tuple[DecidedTxn, ...]
    aborted: tuple[DecidedTxn, ...]
    schema_events: tuple[SchemaEvent, ...]
    state: SourceState
    quarantined: tuple[QuarantinedTxn, ...] = ()
    bad_controls: tuple[BadControl, ...] = ()

    def skip_ranges(self) -> tuple[SeqRange, ...]:
        """Ranges whose change rows must not be applied now: aborted, or still pending."""
        out = [r for t in self.aborted for r in t.ranges]
        out.extend(self.state.pending_ranges())
        return tuple(sorted(out))
