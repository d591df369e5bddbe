"""Key moves of rows with unchanged TOAST values: where each gap's value comes from, in one pass.

An Update that changes a row's key is a delete of the old key and a *move-in* to
the new one. A column the move-in does not carry (unchanged TOAST) takes the
value the old key's row had just before the move: the last value an earlier
event of that key carried in this batch, or, when none did, the value silver
holds for it. The old key's row may itself have moved in from another key
earlier in the batch, so the answer follows the chain — done here in one pass
over the table's key events in commit order, keeping per key and column where
its current value comes from: a batch row, or silver's row of some key.

Runs inside Spark's ``mapInArrow`` on one partition but imports no Spark. Input
columns: ``_commit_lsn, _seq, _sub, _kind`` (I/U/D/M), the key ``k_<p>``, the
old key of a move-in ``_src_k_<p>``, and per column ``n_<i>`` (value),
``x_<i>`` (carried), ``p_<i>`` (in the change's relation version) for the columns ``i`` some
move-in leaves a gap in (the others cannot need a value from anywhere).
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from cdc_apply.decode.zip_imports import keep_zip_directories
from cdc_apply.planning import columns as cc


def resolve_move_sources(table: pa.Table, nk: int, columns: Sequence[int]) -> pa.Table:
    """One row per move-in with a gap: ``_m_seq``; ``_mixed`` (its gaps come from silver rows of
    different keys: the caller must resolve those otherwise); ``_sk_<p>`` the silver key its
    silver-filled gaps read; per column ``r_<i>`` the value from the batch, ``f_<i>`` filled from
    the batch, ``s_<i>`` filled from silver."""
    order = pc.sort_indices(table, [(cc.COMMIT_LSN, "ascending"), (cc.SEQ, "ascending"), ("_sub", "ascending")])
    table = table.take(order)
    kinds = table[cc.KIND].to_pylist()
    keys = list(zip(*[table[cc.key(p)].to_pylist() for p in range(nk)]))
    movers = [r for r, k in enumerate(kinds) if k == "M"]
    old_keys = [table[f"_src_k_{p}"].to_pylist() for p in range(nk)]
    src = {r: tuple(column[r] for column in old_keys) for r in movers}
    carried = {i: table[cc.carried(i)].to_pylist() for i in columns}
    present = {i: table[cc.present(i)].to_pylist() for i in columns}
    # key -> column -> (True, batch row) | (False, move-in row whose old key's silver row holds it)
    state: dict[tuple, dict[int, tuple[bool, int]]] = {}
    found: list[tuple[int, dict[int, tuple[bool, int]]]] = []
    for r, kind in enumerate(kinds):
        if kind == "D":
            continue  # a delete leaves the last carried value where it was (as silver would)
        here = state.setdefault(keys[r], {})
        if kind == "M":
            before = state.get(src[r], {})
            refs = {}
            for i in columns:
                if carried[i][r]:
                    here[i] = (True, r)
                elif present[i][r]:
                    refs[i] = here[i] = before.get(i, (False, r))
            if refs:
                found.append((r, refs))
        else:
            for i in columns:
                if carried[i][r]:
                    here[i] = (True, r)
    rows = [r for r, _ in found]
    silver_of = []
    mixed = []
    for r, refs in found:
        origins = {src[s] for from_batch, s in refs.values() if not from_batch}
        mixed.append(len(origins) > 1)
        silver_of.append(next((s for from_batch, s in refs.values() if not from_batch), None))
    out = {"_m_seq": table[cc.SEQ].take(pa.array(rows, pa.int64())), "_mixed": pa.array(mixed, pa.bool_())}
    silver_rows = pa.array(silver_of, pa.int64())
    for p in range(nk):
        out[f"_sk_{p}"] = table[f"_src_k_{p}"].take(silver_rows)
    for i in columns:
        picks = [refs.get(i) for _, refs in found]
        out[f"r_{i}"] = table[cc.value(i)].take(pa.array([ref[1] if ref and ref[0] else None for ref in picks],
                                                      pa.int64()))
        out[f"f_{i}"] = pa.array([bool(ref and ref[0]) for ref in picks], pa.bool_())
        out[f"s_{i}"] = pa.array([bool(ref and not ref[0]) for ref in picks], pa.bool_())
    return pa.table({k: (v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v) for k, v in out.items()})


def resolve_move_batches(batches: Iterable[pa.RecordBatch], nk: int, columns: Sequence[int]
                         ) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: every key event of the table in (one partition), sources out."""
    keep_zip_directories()
    collected = list(batches)
    if not collected:
        return
    yield from resolve_move_sources(pa.Table.from_batches(collected), nk, columns).to_batches()
