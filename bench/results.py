"""``bench/results.json``: every benchmark merges its keys into it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results.json"


def merge_results(out: dict[str, Any], sort_keys: bool = False) -> dict[str, Any]:
    """Replace ``out``'s top-level keys in the results file (written whole, then renamed into place)."""
    merged = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    merged.update(out)
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(merged, indent=2, sort_keys=sort_keys) + "\n")
    tmp.replace(RESULTS)
    return merged


def read_results() -> dict[str, Any]:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {}


def measured_at() -> str:
    """The checkout's commit (short), recorded beside a benchmark's figures."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=RESULTS.parent.parent, capture_output=True,
                          text=True).stdout.strip()
