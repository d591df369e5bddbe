"""What the snapshots need of their lander, and nothing else: the port
:class:`~cdc_apply.lander.snapshots.take.Snapshots`
is handed instead of the lander itself, so the room below the lander reaches only these (and the records
of :mod:`cdc_apply.lander.state`, and the connection settings of ``dsn`` and ``options``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from cdc_apply.config import SourceConfig
from cdc_apply.lander.state import ResumeState

if TYPE_CHECKING:
    import pyarrow as pa


class Appender(Protocol):
    """Rows landed in bulk, in seq order, one Delta commit per :meth:`commit`
    (:class:`cdc_apply.lander.bronze_files.ArrowAppender`)."""

    staged_bytes: int            # payload bytes added since the last commit

    @property
    def direct(self) -> bool: ...   # written as Parquet files as they come; False: held for Spark's writer

    def add(self, payloads: pa.Array, first_seq: int) -> None: ...

    def commit(self, state: ResumeState) -> None: ...


@dataclass(frozen=True)
class SnapshotPort:
    """The lander's parts a snapshot uses."""

    source: SourceConfig          # the source's settings (slot, publications, snapshot mode and sizes)
    dsn: str                      # the source's connection string (sessions of its own: exported slot, copies)
    server: Any                   # the lander's source session (lander.server.SourceServer): catalog questions
    writer: Any                   # the lander's bronze writer (bronze_rs.RsBronzeWriter or bronze_writer.BronzeWriter)
    appender: Callable[[], Appender]   # a bulk appender on that writer, made at the first snapshot rows
    batch_bytes: int              # land.batch_bytes: bounds rows held for a commit through Spark's writer
    say: Callable[[str], None]    # one line of the lander's output
    probe: Callable[..., None]    # the lander's test probe, called at each step
