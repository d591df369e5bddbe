"""Conversion speed per type, text vs binary (not a test): ``python tests/pgoutput/bench_values.py [rows]``.

Values are random and mostly distinct (the per-distinct-value paths get no help from
repetition); the forms are what PostgreSQL prints / sends. Prints values per second.
"""

from __future__ import annotations

import random
import struct
import sys
import time
import uuid
from decimal import Decimal

import pyarrow as pa
from value_vectors import numeric_send  # noqa: E402  (the script's folder, tests/pgoutput, is on sys.path)

from cdc_apply.pgoutput.types import resolve_column_type
from cdc_apply.pgoutput.values import convert_binary, convert_text

EPOCH_SHIFT_US = 946_684_800_000_000


def _timestamp_text(micros: int, zone: bool) -> str:
    import datetime as dt

    stamp = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)
    text = stamp.strftime("%Y-%m-%d %H:%M:%S")
    if stamp.microsecond:
        text += f".{stamp.microsecond:06d}".rstrip("0")
    return text + ("+00" if zone else "")


def cases(rows: int, rng: random.Random) -> dict[str, tuple[int, int, list[bytes], list[bytes]]]:
    """name -> (oid, typmod, text forms, binary forms)."""
    ints = [rng.randint(-(2**31), 2**31 - 1) for _ in range(rows)]
    big = [rng.randint(-(2**63), 2**63 - 1) for _ in range(rows)]
    floats = [rng.uniform(-1e9, 1e9) for _ in range(rows)]
    dec = [Decimal(rng.randint(-10**10 + 1, 10**10 - 1)).scaleb(-2) for _ in range(rows)]
    wide = [Decimal(rng.randint(-10**30 + 1, 10**30 - 1)).scaleb(-6) for _ in range(rows)]
    micros = [rng.randint(0, 2_000_000_000) * 1_000_000 + rng.randint(0, 999_999) for _ in range(rows)]
    days = [rng.randint(-20000, 30000) for _ in range(rows)]
    uuids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(rows)]
    words = ["".join(rng.choices("abcdefghij klmnop", k=rng.randint(3, 30))) for _ in range(rows)]
    blobs = [rng.randbytes(rng.randint(0, 40)) for _ in range(rows)]
    spans = [(rng.randint(-50, 50), rng.randint(-40, 40), rng.randint(-10**11, 10**11)) for _ in range(rows)]
    arrays = [[rng.randint(-1000, 1000) for _ in range(rng.randint(0, 8))] for _ in range(rows)]
    text_arrays = [[rng.choice(words) for _ in range(rng.randint(0, 5))] for _ in range(rows)]

    def interval_text(months: int, day: int, us: int) -> str:
        sign = "-" if us < 0 else ""
        seconds, fraction = divmod(abs(us), 1_000_000)
        return f"{months} mons {day} days {sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" \
               f".{fraction:06d}"

    def int_array(items: list[int]) -> bytes:
        if not items:
            return struct.pack(">iiI", 0, 0, 23)
        return struct.pack(">iiIii", 1, 0, 23, len(items), 1) + b"".join(struct.pack(">ii", 4, i) for i in items)

    def text_array(items: list[str]) -> bytes:
        if not items:
            return struct.pack(">iiI", 0, 0, 25)
        body = b"".join(struct.pack(">i", len(w.encode())) + w.encode() for w in items)
        return struct.pack(">iiIii", 1, 0, 25, len(items), 1) + body

    def quoted(items: list[str]) -> str:
        return "{" + ",".join(f'"{w}"' if " " in w else w for w in items) + "}"

    return {
        "bool": (16, -1, [rng.choice([b"t", b"f"]) for _ in range(rows)], [rng.choice([b"\x01", b"\x00"])
                                                                          for _ in range(rows)]),
        "int4": (23, -1, [str(i).encode() for i in ints], [struct.pack(">i", i) for i in ints]),
        "int8": (20, -1, [str(i).encode() for i in big], [struct.pack(">q", i) for i in big]),
        "float8": (701, -1, [repr(f).encode() for f in floats], [struct.pack(">d", f) for f in floats]),
        "numeric(12,2)": (1700, (12 << 16 | 2) + 4, [str(d).encode() for d in dec],
                          [numeric_send(d, 2) for d in dec]),
        "numeric(36,6)": (1700, (36 << 16 | 6) + 4, [str(d).encode() for d in wide],
                          [numeric_send(d, 6) for d in wide]),
        "numeric": (1700, -1, [str(d).encode() for d in dec], [numeric_send(d, 2) for d in dec]),
        "text": (25, -1, [w.encode() for w in words], [w.encode() for w in words]),
        "bytea": (17, -1, [b"\\x" + b.hex().encode() for b in blobs], blobs),
        "date": (1082, -1, [_timestamp_text(d * 86_400_000_000, False)[:10].encode() for d in days],
                 [struct.pack(">i", d - 10957) for d in days]),
        "timestamp": (1114, -1, [_timestamp_text(m, False).encode() for m in micros],
                      [struct.pack(">q", m - EPOCH_SHIFT_US) for m in micros]),
        "timestamptz": (1184, -1, [_timestamp_text(m, True).encode() for m in micros],
                        [struct.pack(">q", m - EPOCH_SHIFT_US) for m in micros]),
        "time": (1083, -1, [_timestamp_text(m, False)[11:].encode() for m in micros],
                 [struct.pack(">q", m % 86_400_000_000) for m in micros]),
        "interval": (1186, -1, [interval_text(*s).encode() for s in spans],
                     [struct.pack(">qii", s[2], s[1], s[0]) for s in spans]),
        "uuid": (2950, -1, [str(u).encode() for u in uuids], [u.bytes for u in uuids]),
        "jsonb": (3802, -1, [f'{{"k": "{w}"}}'.encode() for w in words],
                  [b"\x01" + f'{{"k": "{w}"}}'.encode() for w in words]),
        "inet": (869, -1, [".".join(str(b) for b in u.bytes[:4]).encode() for u in uuids],
                 [bytes([2, 32, 0, 4]) + u.bytes[:4] for u in uuids]),
        "money": (790, -1, [f"${abs(d):,.2f}".replace("$", "-$" if d < 0 else "$").encode() for d in dec],
                  [struct.pack(">q", int(d * 100)) for d in dec]),
        "int4[]": (1007, -1, [("{" + ",".join(map(str, a)) + "}").encode() for a in arrays],
                   [int_array(a) for a in arrays]),
        "text[]": (1009, -1, [quoted(a).encode() for a in text_arrays], [text_array(a) for a in text_arrays]),
    }


def rate(convert, column, values: pa.Array) -> float:
    convert(column, values.slice(0, 100))  # warm caches
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        convert(column, values)
        best = min(best, time.perf_counter() - started)
    return len(values) / best


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    rng = random.Random(42)
    print(f"{'type':<15}{'text values/s':>16}{'binary values/s':>18}   ({rows} rows, 10% null)")
    for name, (oid, typmod, text_forms, binary_forms) in cases(rows, rng).items():
        column = resolve_column_type(oid, typmod)
        nulls = [i % 10 == 9 for i in range(rows)]
        text_values = pa.array([None if n else v for v, n in zip(text_forms, nulls)], pa.binary())
        binary_values = pa.array([None if n else v for v, n in zip(binary_forms, nulls)], pa.binary())
        print(f"{name:<15}{rate(convert_text, column, text_values):>16,.0f}"
              f"{rate(convert_binary, column, binary_values):>18,.0f}")


if __name__ == "__main__":
    main()
