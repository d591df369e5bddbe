"""What one apply batch did: counts, tables, lag and the seconds of each phase (the progress line)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cdc_apply.lake.silver_tables import TableStats


@dataclass
class BatchReport:
    """What one batch did (also printed as the progress line)."""

    apply_version: int
    batch_id: int
    messages: int = 0
    transactions: int = 0
    carried: int = 0
    aborted: int = 0
    tables: dict[str, TableStats] = field(default_factory=dict)
    quarantined: int = 0
    # Bronze messages past the applied point, and the age of the oldest change among them not yet in silver
    # (0 when caught up: see bronze_tail.unapplied_ages); the most behind source's, with several.
    lag_seq: int = 0
    lag_seconds: float | None = None
    # Each source's (lag_seq, lag_seconds), for the metrics (cdc_apply.metrics): the line shows the worst.
    lag_by_source: dict[str, tuple[int, float]] = field(default_factory=dict)
    # Seconds since the newest applied commit (or GaussDB heartbeat): grows in a quiet period, so it is
    # not the lag; the stalest source's, with several. None: no commit applied yet.
    applied_commit_age_seconds: float | None = None
    seconds: float = 0.0
    # Wall seconds per phase, in order: plan (read bronze, plan on the driver), decode (the decode job
    # and its counts), tables (schema history, then per table evolve, collapse and MERGE, tables in
    # parallel), logs (transactions, messages, quarantine: a small batch without a snapshot load
    # writes them beside the tables, and this is the time they took past the tables), progress.
    phases: dict[str, float] = field(default_factory=dict)
    clock: float = field(default_factory=time.monotonic, repr=False)  # end of the last phase marked
    # (source, relation id, table, stats) of every table the batch applied: the progress rows record versions
    written: list[tuple] = field(default_factory=list, repr=False)

    def line(self) -> str:
        parts = [f"batch {self.batch_id} (v{self.apply_version})", f"{self.messages} msgs",
                 f"{self.transactions} txns applied", f"{self.carried} carried"]
        if self.aborted:
            parts.append(f"{self.aborted} aborted")
        for name, t in sorted(self.tables.items()):
            detail = f"{name} +{t.inserted}/~{t.updated}/-{t.deleted}"
            if t.truncated:
                detail += " (truncated)"
            detail += f" {t.seconds:.1f}s"
            parts.append(detail)
        if self.quarantined:
            parts.append(f"{self.quarantined} quarantined")
        lag = f"lag {self.lag_seq} msgs, {self.lag_seconds or 0.0:.1f}s"
        if self.applied_commit_age_seconds is not None:
            lag += f" (last applied commit {self.applied_commit_age_seconds:.1f}s ago)"
        parts.append(lag)
        spent = f"{self.seconds:.1f}s"
        if self.phases:
            spent += " (" + ", ".join(f"{k} {v:.1f}" for k, v in self.phases.items()) + ")"
        parts.append(spent)
        return " | ".join(parts)

    def mark(self, phase: str) -> None:
        """Record the seconds since the last mark (or the report's creation) as ``phase``."""
        now = time.monotonic()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - self.clock
        self.clock = now
