"""The benchmarks' one runner (``make bench``): each step in its own process, in order; each merges its
keys into bench/results.json.

    .venv/bin/python -m bench.run                      # every default step (~4 hours on 2 cores)
    .venv/bin/python -m bench.run faults               # a step outside the default set, by name
    .venv/bin/python -m bench.run decode wide          # the steps named, in the order given
    .venv/bin/python -m bench.run sweep                # a module's name: every step that runs it
    .venv/bin/python -m bench.run --list               # the steps and their commands
    .venv/bin/python -m bench.run --dry-run [names]    # print the commands only

Run from the repository root. Every step is ``python -m bench.<module> ...`` with this interpreter, the
repository root as working directory (so ``bench`` and ``cdc_apply`` import from this checkout), its
own JVM where it starts Spark. The runner stops at the first step that fails (exit code 1). To run a
benchmark with other arguments, run its module: ``python -m bench.<module> --help``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.results import read_results

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work"


@dataclass(frozen=True)
class Step:
    name: str
    module: str                     # bench.<module>
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    prefix: tuple[str, ...] = ()    # e.g. taskset
    what: str = ""
    default: bool = True            # run by `make bench` with no names; otherwise only when named

    def command(self) -> list[str]:
        return [*self.prefix, sys.executable, "-m", f"bench.{self.module}", *self.args]

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return " ".join(filter(None, [env, shlex.join(self.command())]))


def _pin() -> tuple[tuple[str, ...], str]:
    """The one-core point of the scaling curve: pinned to CPU 0 with taskset where there is one."""
    if shutil.which("taskset"):
        return ("taskset", "-c", "0"), "local1_1core_1m"
    return (), "local1_1m"


_PIN, _PIN_TAG = _pin()

# `make bench`, in this order (a step with default=False only when named). The sweep's headline run
# replaces apply.py's changes_per_second and merge_vs_append with the ~1M-change batch's (a job that
# keeps up runs batches that large).
STEPS: tuple[Step, ...] = (
    Step("decode", "decode", ("--reps", "5"),
         what="pgoutput bytes -> typed Arrow columns, against pypgoutput and the reference decoder"),
    Step("apply", "apply", ("--reps", "5"),
         what="bronze -> silver on the 100k-row capture: MERGE vs append, decode floor, a 128 MB transaction"),
    Step("apply_large", "apply", ("--large-only", "--large-mb", "1024"),
         env={"CDC_APPLY_BENCH_WORK": str(WORK / "large")},
         what="the 1 GB transaction, plain and streamed (its own capture folder)"),
    Step("naive", "naive", ("--transactions", "8", "--reps", "5"),
         what="one batch per source transaction vs one batch"),
    Step("wide", "wide", ("--columns", "120", "--reps", "5"),
         what="a 120-column MERGE source with constraint propagation on vs off"),
    Step("sweep_headline", "sweep", ("--headline", "--reps", "5", "--sizes", "1000000",
                                     "--variants", "parallel,serial,serial_nocdf", "--tag", "local2_1m"),
         what="the ~1M-change batch on the 1M-row base: changes_per_second, merge_vs_append, Delta's floor"),
    Step("sweep_small", "sweep", ("--reps", "5", "--sizes", "1000,10000,100000", "--variants", "parallel",
                                  "--tag", "local2_small"),
         what="batches of 1,000, 10,000 and 100,000 changes"),
    Step("sweep_1core", "sweep", ("--master", "local[1]", "--reps", "5", "--sizes", "1000000",
                                  "--variants", "parallel", "--tag", _PIN_TAG), prefix=_PIN,
         what="the ~1M-change batch on one core (the scaling curve's first point)"),
    Step("sustained", "sustained", ("--rates", "200,1000,4000,8000", "--seconds", "60", "--warmup", "30"),
         what="lander and apply together against PostgreSQL at fixed offered rates"),
    Step("sustained_1000", "sustained", ("--rates", "1000", "--seconds", "60", "--key", "sustained_1000", "--floor"),
         what="the 1,000 rows/s window alone after 120 s of load at that rate: latency_p50_seconds, and "
              "Delta's latency floor under the same load"),
    Step("small_batch", "small_batch", ("--reps", "5", "--floor"),
         what="small batches by shape: 1,000 changes over ten tables, insert-only vs append, recent vs random keys; "
              "Delta's own MERGE and append floors for them"),
    Step("large_batch", "large_batch", ("--reps", "1", "--previous", "c9068a9", "--floor"),
         what="~1M-change batches over ten tables, mixed and mostly new keys, against c9068a9 in the same run "
              "and against Delta's own MERGEs of them"),
    Step("scheduled_run", "scheduled_run", ("--reps", "5"),
         what="`cdc-apply apply --once` as a fresh process on a 1,000-change backlog over ten tables landed from "
              "PostgreSQL, against a fresh process doing Delta's own MERGEs of the same rows"),
    Step("many_tables", "many_tables", ("--tables", "500", "--touched", "10,50,200"),
         what="a 500-table publication, batches touching 10, 50, 200 tables with 5 changes each, against "
              "Delta's own MERGEs at parallelism 1, 2, 4"),
    Step("snapshot", "snapshot", ("--rows", "10000000"),
         what="a 10M-row table PostgreSQL -> bronze -> silver by the initial snapshot, vs binary COPY into Parquet, "
              "a Delta append of it and bronze's rows through an identity mapInArrow"),
    Step("verify", "verify", ("--rows", "10000000"),
         what="`cdc-apply verify` of a 10M-row table with an apply job running, vs PostgreSQL hashing every row, "
              "one Spark scan of silver and Spark hashing every row with verify's encoding"),
    Step("status", "status", ("--reps", "7"),
         what="`cdc-apply status --json`, process start to exit, on a lake of three sources with quarantined "
              "messages and a lag (local paths: no JVM)"),
    Step("lander", "lander", ("--reps", "3", "--rate", "5000", "--seconds", "40", "--backlog", "200000"),
         what="`cdc-apply land` (bronze at a path: no JVM): process start to first bronze commit, peak memory at "
              "5,000 messages/s, a 200,000-message backlog against pg_recvlogical"),
    Step("lander_s3", "lander_s3", ("--backlog", "100000", "--reps", "3"),
         what="`cdc-apply land` into bronze on s3:// (moto's S3-compatible server on 127.0.0.1, delta-rs, no JVM) "
              "against the same backlog landed into a local path, 100,000 messages, 3 landings each"),
    Step("connect", "connect", ("--measured", "2"),
         what="the apply job over Spark Connect (SPARK_REMOTE=local[2]) against a classic session: batches of "
              "1,000 changes over ten tables, connect_vs_classic"),
    # Not a measure of speed, and it mounts a small filesystem (root): run by name.
    Step("faults", "faults", (), default=False,
         what="faults: the apply SIGKILLed mid-batch, a 200 MiB value, a full disk during a MERGE (~1 hour, root)"),
)


def select(names: list[str]) -> list[Step]:
    """The steps named (a step's name, or a module's: every step that runs it), in the order given; no
    names: the default steps."""
    if not names:
        return [s for s in STEPS if s.default]
    chosen: list[Step] = []
    for name in names:
        matches = [s for s in STEPS if name in (s.name, s.module)]
        if not matches:
            raise SystemExit(f"unknown benchmark {name!r}; the steps: {', '.join(s.name for s in STEPS)} "
                             f"(or a module: {', '.join(sorted({s.module for s in STEPS}))})")
        chosen += [s for s in matches if s not in chosen]
    return chosen


def run_step(step: Step) -> int:
    print(f"\n[bench] {step.name}: {step.shell()}", flush=True)
    started = time.monotonic()
    code = subprocess.run(step.command(), cwd=ROOT, env={**os.environ, **step.env}).returncode
    print(f"[bench] {step.name}: {'done' if code == 0 else f'failed (exit code {code})'} "
          f"in {time.monotonic() - started:.0f} s", flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="steps or modules to run (default: every default step, in order)")
    parser.add_argument("--list", action="store_true", help="list the steps and their commands")
    parser.add_argument("--dry-run", action="store_true", help="print the commands without running them")
    args = parser.parse_args(argv)
    if args.list:
        for step in STEPS:
            print(f"{step.name:15s} {step.what}{'' if step.default else ' [only when named]'}\n"
                  f"{'':15s} {step.shell()}")
        return 0
    steps = select(args.names)
    if args.dry_run:
        for step in steps:
            print(step.shell())
        return 0
    for step in steps:
        if run_step(step):
            return 1
    results = read_results()
    print("\nbench/results.json:")
    for key in sorted(results):
        value = results[key]
        if isinstance(value, (int, float)):
            print(f"  {key:40s} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
