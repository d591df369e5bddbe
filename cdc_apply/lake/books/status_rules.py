"""What ``cdc-apply status`` makes of the rows it read, whichever way it read them: which sources it shows,
the failure that counts, each source's health and lag and its entry. Plain rows in (dicts keyed by the
bookkeeping tables' column names), plain dicts out: the Spark read (:mod:`~cdc_apply.lake.books.status`)
and the read without a JVM (:mod:`~cdc_apply.lake.books.status_files`) share every rule here, and the
tables they read (:class:`StatusRefs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Literal, TypedDict

from cdc_apply.config import Config
from cdc_apply.delta.refs import TableRef, bronze_ref, state_ref
from cdc_apply.pgoutput.messages import format_lsn
from cdc_apply.planning.state import SourceState

Health = Literal["failing", "quarantining", "lagging", "ok"]

# Exit codes of ``cdc-apply status``, worst first (the command exits with the worst source's code).
EXIT_CODES: dict[Health, int] = {"failing": 4, "quarantining": 3, "lagging": 5, "ok": 0}
SEVERITY: tuple[Health, ...] = ("failing", "quarantining", "lagging", "ok")


@dataclass(frozen=True)
class StatusRefs:
    """The tables one status reads, named once per call and handed to whichever read runs: three
    bookkeeping tables and bronze."""

    progress: TableRef
    failures: TableRef
    quarantine: TableRef
    bronze: TableRef

    @classmethod
    def of(cls, config: Config) -> StatusRefs:
        return cls(state_ref(config, "progress"), state_ref(config, "failures"), state_ref(config, "quarantine"),
                   bronze_ref(config))

    def all(self) -> tuple[TableRef, ...]:
        return self.progress, self.failures, self.quarantine, self.bronze


class StatusEntry(TypedDict):
    """One entry of ``cdc-apply status`` (:func:`cdc_apply.status`), its keys in ``KEYS`` order, as ``--json``
    prints it. A failure whose error names no source is an entry of its own: ``source`` None, ``health``
    "failing", ``last_error`` set and every other value None."""

    source: str | None
    health: Health
    apply_version: int | None
    applied_seq: int | None
    applied_commit_lsn: str | None         # PostgreSQL's X/Y
    applied_commit_ts: datetime | None     # as the progress row holds it
    pending_open: int | None
    pending_streamed: int | None
    pending_prepared: int | None
    prepared_gids: list[str] | None
    oldest_needed_seq: int | None
    bronze_max_seq: int | None
    lag_seq: int | None
    lag_seconds: float | None
    applied_commit_age_seconds: float | None
    quarantined: int | None
    quarantined_recently: int | None
    last_error: str | None
    updated_at: datetime | None


KEYS: tuple[str, ...] = tuple(StatusEntry.__annotations__)   # an entry's keys, in order

# The progress, failures and quarantine columns the rules read.
PROGRESS_COLUMNS = ("source", "apply_version", "applied_seq", "applied_commit_lsn", "applied_commit_ts", "state",
                    "oldest_needed_seq", "updated_at")
FAILURE_COLUMNS = ("source", "apply_version", "error", "failed_at")


def worst_exit_code(entries: list[StatusEntry]) -> int:
    """The exit code of the least healthy source (0 when there is none)."""
    states = {e["health"] for e in entries}
    return next((EXIT_CODES[h] for h in SEVERITY if h in states), 0)


def newest_progress(rows: Iterable[dict]) -> dict[str, dict]:
    """Each source's progress row of its highest apply version."""
    latest: dict[str, dict] = {}
    for row in rows:
        have = latest.get(row["source"])
        if have is None or row["apply_version"] > have["apply_version"]:
            latest[row["source"]] = row
    return latest


def current_failure(newest: dict | None, latest: dict[str, dict]) -> dict | None:
    """The newest failed attempt (``newest``, by ``failed_at`` then ``apply_version``) while no batch of its
    apply version has succeeded since (a re-run that succeeds writes progress rows of that version); None
    otherwise. Only the newest: an earlier attempt's error, on a source since left out or before the cause
    was fixed, no longer says why the job stops."""
    applied = max((r["apply_version"] for r in latest.values()), default=0)
    return newest if newest is not None and newest["apply_version"] > applied else None


def newest_failure(rows: Iterable[dict]) -> dict | None:
    """The failure row ``current_failure`` weighs: the latest ``failed_at``, then the highest apply version."""
    never = datetime.min.replace(tzinfo=timezone.utc)   # Spark's descending order puts NULL last
    return max(rows, key=lambda r: (_instant(r["failed_at"]) or never, r["apply_version"]), default=None)


def shown_sources(latest: dict[str, dict], failure: dict | None) -> list[str]:
    """Sources with a progress row, plus one the failing attempt names that has none yet (its first batch
    failed)."""
    sources = sorted(latest)
    if failure is not None and failure["source"] is not None and failure["source"] not in latest:
        sources = sorted([*sources, failure["source"]])
    return sources


def source_states(latest: dict[str, dict], sources: list[str]) -> dict[str, SourceState]:
    return {s: SourceState.from_json(latest[s]["state"]) if s in latest else SourceState() for s in sources}


def health(failing: bool, quarantined_recently: int, lag_seconds: float, max_lag_seconds: float | None) -> Health:
    """``failing`` (the newest attempt failed on this source's message), ``quarantining`` (messages
    quarantined within the window), ``lagging`` (``max_lag_seconds`` given and ``lag_seconds`` above it) or
    ``ok``."""
    if failing:
        return "failing"
    if quarantined_recently:
        return "quarantining"
    if max_lag_seconds is not None and lag_seconds > max_lag_seconds:
        return "lagging"
    return "ok"


def lag_seq(bronze_max: int | None, applied: int) -> int:
    """Bronze's messages past the applied seq (0 when bronze holds nothing past it)."""
    return max((applied if bronze_max is None else bronze_max) - applied, 0)


def entries(latest: dict[str, dict], failure: dict | None, sources: list[str], states: dict[str, SourceState],
            applied: dict[str, int], bronze_max: dict[str, int], ages: dict[str, float],
            quarantined: dict[str, tuple[int, int]], now: datetime,
            max_lag_seconds: float | None) -> list[StatusEntry]:
    """One dict per source (``KEYS``); a failing attempt whose error names no source is an entry of its
    own with ``source`` None, rather than a failure of sources it did not name. Timestamps as the rows
    hold them (Spark's: naive, in this process's local time)."""
    out: list[StatusEntry] = []
    for source in sources:
        row, state = latest.get(source), states[source]
        pending = state.describe_pending()
        committed_at = _instant(row["applied_commit_ts"]) if row is not None else None
        total, recent = quarantined.get(source, (0, 0))
        failing = failure is not None and failure["source"] == source
        out.append({
            "source": source,
            "health": health(failing, recent, ages[source], max_lag_seconds),
            "apply_version": row["apply_version"] if row is not None else None,
            "applied_seq": row["applied_seq"] if row is not None else None,
            "applied_commit_lsn": format_lsn(row["applied_commit_lsn"])
            if row is not None and row["applied_commit_lsn"] is not None else None,
            "applied_commit_ts": row["applied_commit_ts"] if row is not None else None,
            "pending_open": pending["open"],
            "pending_streamed": pending["streamed"],
            "pending_prepared": pending["prepared"],
            "prepared_gids": [p.gid for p in state.prepared],
            "oldest_needed_seq": row["oldest_needed_seq"] if row is not None else None,
            "bronze_max_seq": bronze_max.get(source),
            "lag_seq": lag_seq(bronze_max.get(source), applied[source]),
            "lag_seconds": ages[source],
            "applied_commit_age_seconds": max((now - committed_at).total_seconds(), 0.0)
            if committed_at is not None else None,
            "quarantined": total,
            "quarantined_recently": recent,
            "last_error": failure["error"] if failure is not None and failing else None,
            "updated_at": row["updated_at"] if row is not None else None,
        })
    if failure is not None and failure["source"] is None:
        out.append({
            "source": None, "health": "failing", "apply_version": None, "applied_seq": None,
            "applied_commit_lsn": None, "applied_commit_ts": None, "pending_open": None, "pending_streamed": None,
            "pending_prepared": None, "prepared_gids": None, "oldest_needed_seq": None, "bronze_max_seq": None,
            "lag_seq": None, "lag_seconds": None, "applied_commit_age_seconds": None, "quarantined": None,
            "quarantined_recently": None, "last_error": failure["error"], "updated_at": None,
        })
    return out


def _instant(ts: datetime | None) -> datetime | None:
    """A timestamp as an aware UTC one (a naive one is in this process's local time, as Spark collects)."""
    if ts is None:
        return None
    return ts.astimezone(timezone.utc)
