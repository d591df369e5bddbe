"""Decode benchmark: pgoutput bytes -> typed Arrow columns, against pypgoutput and the reference decoder.

    .venv/bin/python -m bench.decode [--reps 5] [--no-before] [--no-stage] [--no-write]

or, from Python, ``from bench.decode import run; results = run()``.

The input is a real capture (``bench.capture``: PostgreSQL 18, pgoutput protocol 1, text
format, >= 200,000 Insert/Update/Delete messages over eight common column types), cached under
``bench/work/``. Every contender gets the same messages: the Relation messages and the
Insert/Update/Delete messages of the capture.

* ``ours``: the type bytes are read from the Arrow buffer, the Relation messages decoded and
  resolved to column types, the DML walked with :func:`walk_dml`, and each relation's rows
  converted column by column with ``convert_text`` (``convert_binary`` for 'b' values) into
  typed Arrow arrays (int32, int64, decimal128, timestamp[us, UTC], bool, float64, string).
* ``pypgoutput``: ``pypgoutput.decoders.Relation/Insert/Update/Delete(payload)`` per message
  (its README's way; it parses, leaving every value a Python ``str``).
* ``reference``: ``decode_message`` per message (parses, values as ``str``).
* ``before``: the walk as it was before the vectorised one (``walk_dml_reference``: the reference
  decoder message by message) plus the same conversions as ``ours``.
* ``stage``: the Spark decode stage's per-partition function without Spark:
  ``cdc_apply.decode.changes.decode_batches`` over record batches of 10,000 change rows (Spark's
  default ``maxRecordsPerBatch``), with a plan built beforehand (untimed) by ``plan_batch``. It
  decodes the Insert/Update/Delete rows only (the Relation messages are the plan's), so its
  rate counts those. Not a contender against pypgoutput: it shows what the rest of the stage
  costs around ``walk_dml`` and the converters.

Repetitions are interleaved (each repetition times every contender, in a rotating order) and
the medians are reported with min/max. The results are merged into ``bench/results.json``.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.capture import load_capture
from bench.results import merge_results
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.columnar import walk_dml, walk_dml_reference
from cdc_apply.pgoutput.decoder import decode_message
from cdc_apply.pgoutput.types import resolve_column_type
from cdc_apply.pgoutput.values import convert_binary, convert_text

PYPGOUTPUT = "pypgoutput==0.0.3"

_R, _I, _U, _D = (ord(c) for c in "RIUD")


def pypgoutput_decoders() -> ModuleType:
    """``pypgoutput.decoders``, installed first (``pip install --no-deps``) when missing.

    The module is loaded from its file: the package's ``__init__`` imports psycopg2 and pydantic
    for its replication reader, which the decoders themselves do not need.
    """
    spec = importlib.util.find_spec("pypgoutput")
    if spec is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", PYPGOUTPUT], check=True)
        importlib.invalidate_caches()
        spec = importlib.util.find_spec("pypgoutput")
        if spec is None:
            raise RuntimeError(f"`pip install --no-deps {PYPGOUTPUT}` did not make pypgoutput importable")
    path = Path(spec.submodule_search_locations[0]) / "decoders.py"
    module_spec = importlib.util.spec_from_file_location("pypgoutput_decoders", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def type_bytes(payloads: pa.Array) -> np.ndarray:
    """The first byte of every payload, read from the Arrow buffers."""
    _, offsets, data = payloads.buffers()
    starts = np.frombuffer(offsets, dtype=np.int32, count=len(payloads), offset=payloads.offset * 4)
    return np.frombuffer(data, dtype=np.uint8)[starts]


def _convert(column_type, raw: pa.Array, is_binary: np.ndarray) -> pa.Array:
    if not is_binary.any():
        return convert_text(column_type, raw)
    if is_binary.all() or not (raw.is_valid().to_numpy(zero_copy_only=False) & ~is_binary).any():
        return convert_binary(column_type, raw)
    mask = pa.array(is_binary)
    nulls = pa.nulls(len(raw), raw.type)
    return pc.if_else(mask, convert_binary(column_type, pc.if_else(mask, raw, nulls)),
                      convert_text(column_type, pc.if_else(mask, nulls, raw)))


def decode_ours(payloads: pa.Array, walk: Callable = walk_dml) -> dict[int, dict[str, list[pa.Array]]]:
    """Bytes -> typed Arrow columns, per relation: ``{relation_id: {"new": [...], "old": [...]}}``."""
    kinds = type_bytes(payloads)
    columns: dict[int, list] = {}
    for i in np.flatnonzero(kinds == _R).tolist():
        relation = decode_message(payloads[i].as_py())
        columns[relation.relation_id] = [resolve_column_type(c.type_oid, c.type_modifier) for c in relation.columns]
    dml = payloads.take(pa.array(np.flatnonzero((kinds == _I) | (kinds == _U) | (kinds == _D))))
    walked = walk(dml, np.zeros(len(dml), dtype=bool))
    bad = [e for e in walked.error if e is not None]
    if bad:
        raise RuntimeError(f"{len(bad)} messages did not decode, first: {bad[0]}")
    out: dict[int, dict[str, list[pa.Array]]] = {}
    for relation_id, types in columns.items():
        rows = np.flatnonzero(walked.relation_id == relation_id)
        typed: dict[str, list[pa.Array]] = {}
        for side, count, values, binary in (("new", walked.new_count, walked.new_values, walked.new_binary),
                                            ("old", walked.old_count, walked.old_values, walked.old_binary)):
            present = rows[count[rows] >= 0]
            take = pa.array(present)
            typed[side] = [_convert(t, values[c].take(take), binary[c][present]) for c, t in enumerate(types)]
        out[relation_id] = typed
    return out


def decode_pypgoutput(payloads: list[bytes], decoders: ModuleType) -> list:
    classes = {_R: decoders.Relation, _I: decoders.Insert, _U: decoders.Update, _D: decoders.Delete}
    return [classes[p[0]](p) for p in payloads]


def decode_reference(payloads: list[bytes]) -> list[m.PgOutputMessage]:
    return [decode_message(p) for p in payloads]


def stage_input(table: pa.Table, rows_per_batch: int = 10_000) -> tuple[list[pa.RecordBatch], object]:
    """The change rows as bronze-like record batches, and the decode plan of the whole capture."""
    from cdc_apply.planning.plan import plan_batch
    from cdc_apply.planning.schema import SchemaHistory
    from cdc_apply.planning.state import SourceState

    payloads = table.column("payload").combine_chunks()
    kinds = type_bytes(payloads)
    lsns = table.column("lsn").to_numpy()
    change = np.isin(kinds, [_I, _U, _D, ord("T"), ord("M")])
    controls = [(int(i), int(lsns[i]), payloads[int(i)].as_py()) for i in np.flatnonzero(~change)]
    plan = plan_batch({"bench": (SourceState(), SchemaHistory(), controls, len(payloads) - 1)},
                      lambda source, ranges, subxids: {})
    rows = np.flatnonzero(change)
    batch = pa.record_batch({"source": pa.array(["bench"] * len(rows)), "seq": pa.array(rows, pa.int64()),
                             "lsn": pa.array(lsns[rows], pa.int64()), "payload": payloads.take(pa.array(rows))})
    return [batch.slice(i, rows_per_batch) for i in range(0, len(rows), rows_per_batch)], plan.decode


def decode_stage(batches: list[pa.RecordBatch], plan) -> int:
    from cdc_apply.decode.changes import decode_batches

    return sum(b.num_rows for b in decode_batches(batches, plan))


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall-clock and CPU seconds (this process, all threads) of one call."""
    gc.collect()
    started, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - started, time.process_time() - cpu


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _spread(values: list[float], digits: int = 1) -> dict[str, float]:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)}


def _check_same_values(selected: pa.Array, listed: list[bytes], decoders: ModuleType) -> None:
    """All contenders read the same values (a sample of the rows)."""
    ours = decode_ours(selected.slice(0, 3000))
    theirs = decode_pypgoutput(listed[:3000], decoders)
    reference = decode_reference(listed[:3000])
    relation_id = next(iter(ours))
    first_insert = next(i for i, msg in enumerate(reference) if isinstance(msg, m.Insert))
    want = [v for v in reference[first_insert].new]
    got = [c.col_data for c in theirs[first_insert].new_tuple.column_data]
    assert got == want, (got, want)
    row = sum(1 for msg in reference[:first_insert] if getattr(msg, "relation_id", None) == relation_id
              and getattr(msg, "new", None) is not None and not isinstance(msg, m.Relation))
    assert ours[relation_id]["new"][0][row].as_py() == int(want[0])


def run(reps: int = 5, before: bool = True, stage: bool = True, write: bool = True) -> dict:
    """Run the benchmark; returns (and by default merges into ``bench/results.json``) its results."""
    decoders = pypgoutput_decoders()
    load_before = _load()
    table, meta = load_capture()
    payloads = table.column("payload").combine_chunks()
    kinds = type_bytes(payloads)
    selected = payloads.take(pa.array(np.flatnonzero(np.isin(kinds, [_R, _I, _U, _D]))))
    listed = selected.to_pylist()
    n, size = len(listed), sum(map(len, listed))
    counts = {chr(k): int(v) for k, v in zip(*np.unique(type_bytes(selected), return_counts=True))}
    dml_size = size - sum(len(p) for p in listed if p[0] == _R)
    _check_same_values(selected, listed, decoders)

    contenders: dict[str, Callable[[], object]] = {
        "ours": lambda: decode_ours(selected),
        "pypgoutput": lambda: decode_pypgoutput(listed, decoders),
        "reference": lambda: decode_reference(listed),
    }
    if before:
        contenders["before"] = lambda: decode_ours(selected, walk_dml_reference)
    stage_rows = 0
    if stage:
        stage_batches, stage_plan = stage_input(table)
        stage_rows = sum(b.num_rows for b in stage_batches)
        contenders["stage"] = lambda: decode_stage(stage_batches, stage_plan)
        decode_stage([stage_batches[0].slice(0, 2000)], stage_plan)
    # warm-up on a slice (imports, compiled patterns, caches)
    decode_ours(selected.slice(0, 2000))
    decode_pypgoutput(listed[:2000], decoders)
    decode_reference(listed[:2000])

    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    cpu_seconds: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for rep in range(reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            wall, cpu = _timed(contenders[name])
            seconds[name].append(wall)
            cpu_seconds[name].append(cpu)
        print(f"  rep {rep + 1}/{reps}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in seconds.items()),
              file=sys.stderr)

    counted = {name: stage_rows if name == "stage" else n for name in seconds}
    sized = {name: dml_size if name == "stage" else size for name in seconds}
    rate = {name: [counted[name] / s for s in secs] for name, secs in seconds.items()}
    ratio = [o / p for o, p in zip(rate["ours"], rate["pypgoutput"])]
    ratio_ref = [o / r for o, r in zip(rate["ours"], rate["reference"])]
    detail = {
        "what": "pgoutput bytes -> typed Arrow columns (walk_dml + convert_text per column, per relation)",
        "capture": {**meta, "messages": n, "bytes": size, "by_type": counts,
                    "columns": "int4 int8 text numeric(12,2) timestamptz bool float8 varchar(32)",
                    "protocol": 1, "format": "text"},
        "reps": reps,
        "seconds": {name: _spread(secs, 3) for name, secs in seconds.items()},
        "cpu_seconds": {name: _spread(secs, 3) for name, secs in cpu_seconds.items()},
        "cpu_msgs_per_s": {name: _spread([counted[name] / s for s in secs], 0) for name, secs in cpu_seconds.items()},
        "cpu_vs_pypgoutput": _spread([p / o for o, p in zip(cpu_seconds["ours"], cpu_seconds["pypgoutput"])], 2),
        "msgs_per_s": {name: _spread(r, 0) for name, r in rate.items()},
        "mb_per_s": {name: _spread([sized[name] / s / 1e6 for s in secs], 2) for name, secs in seconds.items()},
        "vs_pypgoutput": _spread(ratio, 2),
        "vs_reference": _spread(ratio_ref, 2),
        "machine": {"python": platform.python_version(), "machine": platform.machine(),
                    "cpus": os.cpu_count(), "load_average_before": load_before, "load_average_after": _load(),
                    "pyarrow": pa.__version__, "numpy": np.__version__},
    }
    if stage:
        detail["stage_messages"] = stage_rows
        detail["stage_vs_ours"] = _spread([s_ / o for s_, o in zip(rate["stage"], rate["ours"])], 3)
    if before:
        detail["vs_before"] = _spread([o / b for o, b in zip(rate["ours"], rate["before"])], 2)
    results = {
        "decode_msgs_per_s": detail["msgs_per_s"]["ours"]["median"],
        "decode_mb_per_s": detail["mb_per_s"]["ours"]["median"],
        "decode_vs_pypgoutput": detail["vs_pypgoutput"]["median"],
        "decode_vs_reference": detail["vs_reference"]["median"],
        "decode": detail,
    }
    if stage:
        results["decode_stage_msgs_per_s"] = detail["msgs_per_s"]["stage"]["median"]
    if write:
        merge_results(results, sort_keys=True)
    return results


def print_table(results: dict) -> None:
    d = results["decode"]
    cap = d["capture"]
    print(f"decode: {cap['messages']:,} messages ({cap['bytes'] / 1e6:.1f} MB; {cap['by_type']}), "
          f"median of {d['reps']} interleaved reps [min - max]")
    print(f"{'contender':<12} {'messages/s':>28} {'MB/s':>24}")
    for name in d["msgs_per_s"]:
        r, b = d["msgs_per_s"][name], d["mb_per_s"][name]
        print(f"{name:<12} {r['median']:>10,.0f} [{r['min']:>7,.0f} - {r['max']:>7,.0f}] "
              f"{b['median']:>8.2f} [{b['min']:.2f} - {b['max']:.2f}]")
    if "stage_messages" in d:
        print(f"(stage counts its {d['stage_messages']:,} Insert/Update/Delete rows; "
              "the Relation messages are the plan's)")
    for key in ("vs_pypgoutput", "vs_reference", "vs_before"):
        if key in d:
            s = d[key]
            print(f"ours {key.replace('_', ' ')}: {s['median']:.1f}x [{s['min']:.1f} - {s['max']:.1f}]")
    s = d["cpu_vs_pypgoutput"]
    print(f"ours vs pypgoutput in CPU time: {s['median']:.1f}x [{s['min']:.1f} - {s['max']:.1f}]; "
          f"load average before/after {d['machine']['load_average_before']} / {d['machine']['load_average_after']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.decode", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions (default 5)")
    parser.add_argument("--no-before", action="store_true", help="skip the pre-vectorisation walk")
    parser.add_argument("--no-stage", action="store_true", help="skip the decode stage (changes.decode_batches)")
    parser.add_argument("--no-write", action="store_true", help="do not merge into bench/results.json")
    args = parser.parse_args(argv)
    results = run(reps=args.reps, before=not args.no_before, stage=not args.no_stage, write=not args.no_write)
    print_table(results)


if __name__ == "__main__":
    main()
