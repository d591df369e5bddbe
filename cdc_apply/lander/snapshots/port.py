"""What the snapshots need of their lander, and nothing else: the port
:class:`~cdc_apply.lander.snapshots.take.Snapshots`
is handed instead of the lander itself, so the room below the lander reaches only these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from cdc_apply.config import SourceConfig


@dataclass(frozen=True)
class SnapshotPort:
    """The lander's parts a snapshot uses."""

    source: SourceConfig          # the source's settings (slot, publications, snapshot mode and sizes)
    dsn: str                      # the source's connection string (sessions of its own: exported slot, copies)
    server: Any                   # the lander's source session (lander.server.SourceServer): catalog questions
    writer: Any                   # the lander's bronze writer (bronze_rs.RsBronzeWriter or bronze_writer.BronzeWriter)
    batch_bytes: int              # land.batch_bytes: bounds rows held for a commit through Spark's writer
    say: Callable[[str], None]    # one line of the lander's output
    probe: Callable[..., None]    # the lander's test probe, called at each step
