"""What the lander reports: one line per landed batch, and the summary of a run."""

from __future__ import annotations

from dataclasses import dataclass

from cdc_apply.lander.state import ResumeState
from cdc_apply.pgoutput.messages import format_lsn


def human_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


@dataclass(frozen=True)
class BatchReport:
    """One landed batch (also the progress line)."""

    batch: int
    messages: int
    nbytes: int
    first_seq: int
    last_seq: int
    last_lsn: int
    flush_lsn: int
    slot_lag: int | None
    seconds: float

    def line(self, source: str) -> str:
        return (f"[land {source}] batch {self.batch}: {self.messages} messages, {human_bytes(self.nbytes)}, "
                f"seq {self.first_seq}..{self.last_seq}, last lsn {format_lsn(self.last_lsn)}, "
                f"flush {format_lsn(self.flush_lsn)}, slot lag {human_bytes(self.slot_lag)}, "
                f"{self.seconds:.2f} s")


@dataclass(frozen=True)
class LandSummary:
    """What one run of the lander did."""

    batches: tuple[BatchReport, ...]
    replayed: int
    reconnects: int
    seconds: float
    state: ResumeState

    @property
    def messages(self) -> int:
        return sum(b.messages for b in self.batches)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.batches)
