"""``make bench``: every benchmark in turn; each merges its keys into bench/results.json."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import decode  # noqa: E402
from bench.results import read_results  # noqa: E402


def main() -> int:
    decode.run(reps=5)
    from bench import apply as apply_bench

    apply_bench.run(reps=5)
    # The 1 GB transaction (plain and streamed): its own process and capture folder.
    subprocess.run([sys.executable, str(Path(__file__).with_name("apply.py")), "--large-only", "--large-mb", "1024"],
                   check=True, env={**os.environ, "CDC_APPLY_BENCH_WORK": str(Path(__file__).with_name("work") / "large")})
    from bench import naive

    naive.run(transactions=8, reps=5)
    from bench import wide

    wide.run(columns=120, reps=5)
    # The sustained figures: the sweep's largest batch replaces apply.py's 50k-change ones. Its own
    # process: its own capture folder and Spark session.
    sweep = [sys.executable, str(Path(__file__).with_name("sweep.py"))]
    subprocess.run([*sweep, "--headline", "--reps", "5", "--sizes", "1000000",
                    "--variants", "parallel,serial,serial_nocdf", "--tag", "local2_1m"], check=True)
    subprocess.run([*sweep, "--reps", "5", "--sizes", "1000,10000,100000", "--variants", "parallel",
                    "--tag", "local2_small"], check=True)
    # The scaling curve's first point: the same 1M batch on one core (two cores: the headline).
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    subprocess.run([*pin, *sweep, "--master", "local[1]", "--reps", "5", "--sizes", "1000000", "--variants",
                    "parallel", "--tag", "local1_1core_1m" if pin else "local1_1m"], check=True)
    # Lander and apply together against PostgreSQL at fixed offered rates.
    subprocess.run([sys.executable, str(Path(__file__).with_name("sustained.py")), "--rates",
                    "200,1000,4000,8000,16000", "--seconds", "60"], check=True)
    results = read_results()
    print("\nbench/results.json:")
    for key in sorted(results):
        value = results[key]
        if isinstance(value, (int, float)):
            print(f"  {key:40s} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
