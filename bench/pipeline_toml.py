"""The pipeline file the benchmarks that run the real lander and apply commands write: one source, its
slot created with an initial snapshot, bronze / silver / state under one folder."""

from __future__ import annotations


def pipeline_toml(pipeline: str, root, dsn: str, **source: object) -> str:
    """The TOML of pipeline ``pipeline`` with its lake under ``root`` and source ``dsn``; ``source`` adds
    settings to ``[source]`` (``snapshot_workers=4``)."""
    extra = "".join(f"{key} = {value}\n" for key, value in source.items())
    return (f'pipeline = "{pipeline}"\n[bronze]\npath = "{root}/bronze"\n[silver]\npath = "{root}/silver"\n'
            f'[state]\npath = "{root}/state"\n[source]\nname = "bench"\ndsn = "{dsn}"\nslot = "bench_slot"\n'
            f'publication = "bench_pub"\ncreate_slot = true\nsnapshot = "initial"\n{extra}'
            '[land]\nidle_exit_seconds = 1.0\n')
