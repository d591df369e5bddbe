"""Net a batch's schema operations: each ALTER is a Delta commit, and a batch can carry a long chain.

A table altered in many transactions gets, per batch, one relation version per ALTER and from
:func:`cdc_apply.planning.tables.evolve` one operation per step (the differential soak: ~57 schema
commits per batch for one table, each costing more as the table grows). Only where the chain ends
matters: columns of the start that are gone are dropped, columns of the start under a new name are
renamed once, columns added and still there are added — a column added and dropped in the same
batch, or renamed three times, costs nothing or one rename.

The netted operations keep the guards of the step-by-step ones (drop what is there, rename when the
source is there and the target free, add what is missing), so a batch re-run after a crash in the
middle of them completes them. Chains with a retype, or renames that can only be done through a
temporary name (a swap), are left as they are.
"""

from __future__ import annotations

from typing import Sequence

from cdc_apply.planning.tables import SchemaOp


def net_schema_ops(ops: Sequence[SchemaOp]) -> list[SchemaOp]:
    """Drops, then renames, then adds that take a table from the chain's start to its end."""
    if len(ops) < 2 or any(o.kind not in ("add", "drop", "rename") for o in ops):
        return list(ops)
    names: dict[str, int] = {}      # name now -> column token
    start: dict[int, str] = {}      # token -> its name before the ops (columns the table had)
    added: dict[int, str] = {}      # token -> Spark type (columns the ops add), in order
    for o in ops:
        if o.kind == "add":
            if o.column in names:
                return list(ops)
            names[o.column] = len(start) + len(added)
            added[names[o.column]] = o.ddl
            continue
        if o.column not in names:   # a column the table had before the ops
            token = len(start) + len(added)
            names[o.column] = token
            start[token] = o.column
        token = names.pop(o.column)
        if o.kind == "rename":
            if o.target in names:
                return list(ops)
            names[o.target] = token
    final = {token: name for name, token in names.items()}
    drops = [SchemaOp("drop", name) for token, name in start.items() if token not in final]
    pending = {name: final[token] for token, name in start.items() if token in final and final[token] != name}
    renames = []
    while pending:
        # A rename can run once no column still under its start name holds the target.
        ready = [a for a, b in pending.items() if b not in pending]
        if not ready:
            return list(ops)        # a cycle: only temporary names resolve it
        for a in ready:
            renames.append(SchemaOp("rename", a, new_name=pending.pop(a)))
    adds = [SchemaOp("add", final[token], spark_ddl=ddl) for token, ddl in added.items() if token in final]
    return drops + renames + adds


__all__ = ["net_schema_ops"]
