"""The workloads, one module per scenario; ``SCENARIOS`` maps each name to its :class:`Scenario`."""

from __future__ import annotations

from ..harness import Scenario
from . import datatypes, ddl, replica_identity, transactions, truncate

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    datatypes.SCENARIO,
    replica_identity.SCENARIO,
    truncate.SCENARIO,
    transactions.SCENARIO,
    ddl.SCENARIO,
)}
