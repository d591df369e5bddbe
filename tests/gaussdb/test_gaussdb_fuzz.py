"""Fuzz the GaussDB decoder: mutated and truncated payloads end in success or DecodeError, quickly.

The corpus is every golden vector plus payloads the encoder writes for
seeded random records; each case applies one to three mutations (bit flips,
interesting bytes and lengths, truncation, deletion, insertion, duplication,
splicing). Seeded, so a failure reproduces; the seed and case are in the
assertion message. Decoded survivors are re-encoded (the decoder only yields
records the encoder can write) and fed to a transcoder, which may only raise
the project's own errors.
"""

from __future__ import annotations

import json
import random
import signal
import struct
import time
from pathlib import Path

from cdc_apply.errors import CdcApplyError, DecodeError
from cdc_apply.gaussdb import (
    Begin,
    Commit,
    Delete,
    GaussdbTranscoder,
    Heartbeat,
    Insert,
    Update,
    decode_gaussdb_payload,
    encode_gaussdb,
    format_timestamp,
)

SEED = 20240520
CASES = 100_000
BUDGET_S = 20.0
INTERESTING_BYTES = b"\x00\x01\x7f\x80\xff" + b"PFBCIUDNOTXh"
INTERESTING_INTS = (0, 1, 8, 9, 0x7F, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF)


def _random_tuple(rng: random.Random):
    names = ["id", "v", "name", '"Mixed"', "é", ""]
    return tuple((rng.choice(names), rng.choice([23, 25, 1043, 1700]),
                  rng.choice([None, "", "1", "hello", "ü€", "x" * rng.randint(0, 40)]))
                 for _ in range(rng.randint(0, 4)))


def _random_record(rng: random.Random):
    lsn = rng.getrandbits(64)
    ts = rng.choice([None, format_timestamp(rng.randint(-10**15, 10**15), rng.choice([0, 28800, -12600]))])
    kind = rng.randrange(5)
    if kind == 0:
        return Begin(lsn, rng.getrandbits(64), lsn, ts, rng.choice([None, "alice", "", "björk"]),
                     rng.choice([None, rng.getrandbits(64)]), rng.choice([None, 0, rng.getrandbits(32)]))
    if kind == 1:
        return Commit(lsn, rng.choice([None, rng.getrandbits(64)]), ts)
    schema, table = rng.choice(["public", "s", ""]), rng.choice(["t", "orders", "ü"])
    maybe = lambda: rng.choice([None, _random_tuple(rng)])  # noqa: E731
    if kind == 2:
        return Insert(lsn, schema, table, maybe())
    if kind == 3:
        return Update(lsn, schema, table, maybe(), maybe())
    return Delete(lsn, schema, table, maybe())


def corpus(rng: random.Random) -> list[bytes]:
    golden = json.loads((Path(__file__).parent / "gaussdb_golden.json").read_text(encoding="utf-8"))
    seeds = [bytes.fromhex("".join(p for p, _ in v["hex"])) for v in golden["vectors"]]
    for _ in range(300):
        recs = [_random_record(rng) for _ in range(rng.randint(1, 5))]
        seeds.append(encode_gaussdb(recs, batch=True, end=rng.choice("F0")))
        seeds.append(encode_gaussdb(recs[:1], batch=False))
    seeds.append(encode_gaussdb([Heartbeat(rng.getrandbits(64), rng.getrandbits(64), -1)], batch=False))
    return seeds


def mutate(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(8)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            buf[pos % len(buf)] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            buf[pos % len(buf)] = rng.choice(INTERESTING_BYTES)
        elif op == 2:
            del buf[pos:]
        elif op == 3:
            del buf[pos:pos + rng.randint(1, 16)]
        elif op == 4:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 5 and buf:
            start = rng.randrange(len(buf))
            buf[pos:pos] = buf[start:start + rng.randint(1, 32)]
        elif op == 6 and len(buf) >= 4:
            at = rng.randrange(len(buf) - 1)
            fmt = ">I" if at + 4 <= len(buf) and rng.random() < 0.6 else ">H"
            size = struct.calcsize(fmt)
            value = rng.choice(INTERESTING_INTS + (len(buf), len(buf) - at, rng.getrandbits(8 * size)))
            buf[at:at + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "big")
        else:
            other = rng.choice(seeds)
            buf = buf[:pos] + other[rng.randrange(len(other) + 1):]
    return bytes(buf)


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def test_decoder_survives_mutated_payloads():
    rng = random.Random(SEED)
    seeds = corpus(rng)
    transcoder = GaussdbTranscoder(keys={"public.orders": ["id"]}, exclude_users=frozenset({"björk"}))
    outcomes = {"ok": 0, "error": 0, "transcoded": 0}
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, BUDGET_S * 3)  # a hang fails the test instead of the run
    started = time.perf_counter()
    try:
        for case in range(CASES):
            payload = mutate(rng, rng.choice(seeds), seeds)
            try:
                records = decode_gaussdb_payload(payload)
            except DecodeError as err:
                assert isinstance(err.context.get("offset"), int), f"case {case}: {err}"
                assert 0 <= err.context["offset"] <= len(payload), f"case {case}: {err}"
                outcomes["error"] += 1
                continue
            except Exception as exc:  # pragma: no cover - the failure being hunted
                raise AssertionError(f"seed {SEED} case {case}: {type(exc).__name__}: {exc} "
                                     f"on payload {payload.hex()}") from exc
            outcomes["ok"] += 1
            if case % 8 == 0 and not any(isinstance(r, Heartbeat) for r in records):
                assert decode_gaussdb_payload(encode_gaussdb(records, batch=True)) == records, f"case {case}"
            try:
                transcoder.transcode(records)
                outcomes["transcoded"] += 1
            except CdcApplyError:
                pass
    except _Hang:  # pragma: no cover
        raise AssertionError(f"seed {SEED}: the fuzz run hung (over {BUDGET_S * 3} s)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    elapsed = time.perf_counter() - started
    assert elapsed < BUDGET_S, f"{CASES} cases took {elapsed:.1f} s"
    print(outcomes, f"{elapsed:.1f} s")
    assert outcomes["ok"] > 1000 and outcomes["error"] > 10_000, outcomes  # the mutations exercise both paths
