"""The decode stage, pure Python run inside ``mapInArrow``: bronze payloads (Arrow batches) to typed
change rows per a decode plan (``changes``), and a table's key events to where each move-in's
unchanged TOAST value comes from (``moves``). No Spark."""
