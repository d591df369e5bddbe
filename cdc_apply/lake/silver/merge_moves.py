"""Key moves with unchanged TOAST: a move-in's gaps take the old key's value just before the move.

An update that changes the key is a delete of the old key and a *move-in* to
the new one (:func:`cdc_apply.lake.silver.merge.key_events`). Columns the move-in
does not carry (unchanged TOAST) must come from the old key's row as it was
just before the move: an earlier event of this batch, or silver's row.
"""

from __future__ import annotations

from functools import reduce

from cdc_apply.delta.names import quote_ident
from cdc_apply.errors import ApplyError
from cdc_apply.lake.silver.collapse import key_window
from cdc_apply.lake.silver.merge import null_safe_equal
from cdc_apply.planning import columns as cc
from cdc_apply.planning.table_plan import TableWork

# Up to this many move-ins, their keys and the pass's output are broadcast (a hash join each) instead
# of shuffling every event of the batch, wide rows included.
BROADCAST_MOVES = 200_000


def resolve_moves(events, work: TableWork, target):
    """Fill a move-in's unchanged TOAST columns from the old key's row just before the move.

    One sequential pass over the table's key events (:mod:`cdc_apply.decode.moves`) says where each
    gap's value comes from — a row of the batch, or silver's row of the key the chain of moves
    started from — and one join with silver fetches the latter. A move whose gaps read silver rows
    of different keys (possible only across relation versions) is resolved round by round instead.
    """
    from functools import partial

    from pyspark.sql import functions as F

    from cdc_apply.decode.moves import resolve_move_batches

    n, nk = len(work.columns), len(work.key_index)
    # Read several times below (which columns have gaps, the chains of moves, the fill): from a
    # materialised copy, not each time from the batch's decoded rows.
    events = events.localCheckpoint()
    # Which columns some move-in leaves a gap in: only those travel to the pass and back (a table
    # with many columns usually has one or two that can be TOASTed).
    flags = events.where(F.col(cc.KIND) == "M").agg(
        F.count(F.lit(1)).alias("_moves"),
        *[F.max((F.col(cc.present(i)) & ~F.col(cc.carried(i))).cast("int")).alias(f"g_{i}") for i in range(n)]).first()
    columns = [i for i in range(n) if flags is not None and flags[f"g_{i}"]]
    if not columns:
        return events
    small = flags["_moves"] <= BROADCAST_MOVES
    key_ddl = [work.columns[i].spark_ddl for i in work.key_index]
    ddl = ", ".join(["_m_seq BIGINT", "_mixed BOOLEAN"] + [f"_sk_{p} {t}" for p, t in enumerate(key_ddl)]
                    + [f"{c}_{i} {t}" for i in columns
                       for c, t in (("r", work.columns[i].spark_ddl), ("f", "BOOLEAN"), ("s", "BOOLEAN"))])
    inputs = ([cc.COMMIT_LSN, cc.SEQ, "_sub", cc.KIND] + [cc.key(p) for p in range(nk)]
              + [f"_src_k_{p}" for p in range(nk)] + [f"{c}_{i}" for i in columns for c in ("n", "x", "p")])
    # Only the events of keys some move leaves or enters can be on a chain of moves: a batch of
    # 90,000 events with a few hundred moves hands the one-partition pass a few thousand.
    related = events.select(*inputs)
    if small:
        moved = (events.where(F.col("_move")).select(*[F.col(cc.key(p)).alias(f"_mk_{p}") for p in range(nk)])
                 .distinct())
        related = related.join(F.broadcast(moved), null_safe_equal(
            [F.col(cc.key(p)) for p in range(nk)], [F.col(f"_mk_{p}") for p in range(nk)]), "left_semi")
    sources = (related.repartition(1)
               .mapInArrow(partial(resolve_move_batches, nk=nk, columns=columns), ddl).localCheckpoint())
    if sources.where("_mixed").limit(1).count():
        return resolve_moves_by_rounds(events, work, target)
    sources = _with_silver(sources, target, work, "_sk_", columns, small)
    return _fill_move_ins(
        events, F.broadcast(sources) if small else sources, work, columns,
        filled=lambda i: F.coalesce(F.col(f"s.f_{i}"), F.lit(False)) | F.coalesce(F.col(f"s.s_{i}"), F.lit(False)),
        value=lambda i: F.when(F.col(f"s.f_{i}"), F.col(f"s.r_{i}")).otherwise(F.col(f"s.t_{i}")),
        checkpoint=False)


def _with_silver(found, target, work: TableWork, key_prefix: str, columns, small: bool = False):
    """``found`` with silver's values ``t_<i>`` (``i`` in ``columns``) of the row whose key is in its
    ``<key_prefix><p>`` columns (null when silver has none, or was emptied by a truncate of this batch:
    ``target`` None). ``small``: ``found`` has few rows; silver is filtered by their keys (a hash
    lookup while scanning) before the join, instead of shuffling the whole table into it."""
    from pyspark.sql import functions as F

    nk = len(work.key_index)
    if target is None:
        return found.select("*", *[F.lit(None).alias(f"t_{i}") for i in columns])
    key_names = [work.columns[i].name for i in work.key_index]
    tgt = target.select(*[F.col(quote_ident(k)).alias(f"{key_prefix}{p}") for p, k in enumerate(key_names)],
                        *[F.col(quote_ident(work.columns[i].name)).alias(f"t_{i}") for i in columns])
    keys = [f"{key_prefix}{p}" for p in range(nk)]
    if small:
        tgt = tgt.join(F.broadcast(found.select(*keys).distinct()), keys, "left_semi")
    return found.join(tgt, keys, "left")


def _fill_move_ins(events, found, work: TableWork, columns, filled, value, checkpoint: bool = True):
    """The events with each move-in's gaps (``p_i and not x_i``, ``i`` in ``columns``) filled where
    ``filled(i)`` holds for its row of ``found`` (joined on ``_m_seq``, aliased ``s``): ``n_i`` takes
    ``value(i)``, ``x_i`` is set. ``checkpoint``: materialise the result (rounds build on it); the
    one-pass path leaves that to the collapse, which materialises its own output."""
    from pyspark.sql import functions as F

    joined = events.alias("e").join(found.alias("s"), (F.col("e._seq") == F.col("s._m_seq"))
                                    & (F.col("e._kind") == "M"), "left")
    cols = []
    wanted = set(columns)
    for c in events.columns:
        if c[:2] in ("n_", "x_") and c[2:].isdigit() and int(c[2:]) in wanted:
            i = int(c[2:])
            gap = (F.col("e._kind") == "M") & F.col(f"e.p_{i}") & ~F.col(f"e.x_{i}") & filled(i)
            if c[0] == "n":
                cols.append(F.when(gap, value(i)).otherwise(F.col(f"e.{c}")).alias(c))
            else:
                cols.append((F.col(f"e.{c}") | gap).alias(c))
        else:
            cols.append(F.col(f"e.{c}").alias(c))
    filled_events = joined.select(*cols)
    return filled_events.localCheckpoint() if checkpoint else filled_events


def resolve_moves_by_rounds(events, work: TableWork, target, max_rounds: int = 16):
    """Fill a move-in's unchanged TOAST columns from the old key's row just before the move.

    The move-out event sits in the old key's partition at the move's position;
    the last value carried before it is the one to take, or silver's when the
    batch carried none (updates that left it unchanged in between do not count).
    When that last event is itself an unfilled move-in, the move waits for the
    next round (chains of key changes).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    n, nk = len(work.columns), len(work.key_index)
    gaps = [F.col(cc.present(i)) & ~F.col(cc.carried(i)) for i in range(n)]
    any_gap = reduce(lambda a, b: a | b, gaps, F.lit(False))
    # Only an unfilled move-in hides the value: a plain update's unchanged TOAST changes nothing, so
    # the value before it (earlier in the batch, or silver's) is still the one to take.
    waits = [gaps[i] & (F.col(cc.KIND) == "M") for i in range(n)]
    before = key_window(nk, frame_to_current=False).rowsBetween(Window.unboundedPreceding, -1)
    for _ in range(max_rounds):
        if events.where((F.col(cc.KIND) == "M") & any_gap).limit(1).count() == 0:
            return events
        looked = events.select(
            cc.SEQ, cc.KIND, "_move", *[cc.key(p) for p in range(nk)],
            *[F.last(F.when(F.col(cc.carried(i)), F.struct(F.col(cc.value(i)).alias("v"))), ignorenulls=True)
              .over(before).alias(f"r_{i}") for i in range(n)],
            *[F.last(F.when(F.col(cc.carried(i)) | waits[i], waits[i]), ignorenulls=True).over(before).alias(f"b_{i}")
              for i in range(n)])
        outs = looked.where((F.col(cc.KIND) == "D") & F.col("_move")).select(
            F.col(cc.SEQ).alias("_m_seq"), *[F.col(cc.key(p)).alias(f"_mk_{p}") for p in range(nk)],
            *[F.col(f"r_{i}") for i in range(n)], *[F.col(f"b_{i}") for i in range(n)])
        outs = _with_silver(outs, target, work, "_mk_", range(n))
        events = _fill_move_ins(
            events, outs, work, range(n),
            filled=lambda i: F.col("s._m_seq").isNotNull() & ~F.coalesce(F.col(f"s.b_{i}"), F.lit(False)),
            value=lambda i: F.when(F.col(f"s.r_{i}").isNotNull(), F.col(f"s.r_{i}.v")).otherwise(F.col(f"s.t_{i}")))
    raise ApplyError("key changes of rows with unchanged TOAST values chain deeper than supported in one batch",
                     table=work.qualified_name, rounds=max_rounds)
