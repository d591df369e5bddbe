"""A Spark worker's zip importers re-read their archive at a task's start only when the archive changed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from cdc_apply.decode.zip_imports import keep_zip_directories, needs_keeping

_PROBE = textwrap.dedent("""
    import importlib, sys, zipfile, zipimport
    from cdc_apply.decode.zip_imports import keep_zip_directories

    def write(names):
        with zipfile.ZipFile(ARCHIVE, "w") as z:
            for name in names:
                z.writestr(name + ".py", f"VALUE = {name!r}")

    ARCHIVE = sys.argv[1]
    write(["first"])
    sys.path.insert(0, ARCHIVE)
    import first
    reads = []
    real = zipimport._read_directory
    zipimport._read_directory = lambda path: reads.append(path) or real(path)
    installed = keep_zip_directories(force=sys.argv[2] == "keep")
    for _ in range(3):
        importlib.invalidate_caches()
    unchanged = len(reads)
    write(["first", "second"])   # a new size: a new stamp
    importlib.invalidate_caches()
    import second
    print(installed, unchanged, len(reads) - unchanged, second.VALUE)
""")


def _probe(tmp_path, mode):
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path / "pkgs.zip"), mode],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_an_unchanged_archive_is_not_re_read_and_a_changed_one_is(tmp_path):
    installed, unchanged, changed, value = _probe(tmp_path, "keep")
    assert installed == "True"
    assert unchanged == "0"
    assert changed == "1"
    assert value == "second"


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12's zip importers read lazily (CPython gh-103200)")
def test_without_it_python_3_11_re_reads_every_archive_at_each_invalidation(tmp_path):
    installed, unchanged, _, value = _probe(tmp_path, "plain")
    assert installed == "False"     # not a Spark worker
    assert int(unchanged) >= 3
    assert value == "second"


@pytest.mark.spark
def test_a_decode_task_installs_it_in_spark_s_python_worker(spark):
    def report(batches):
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"needed": [needs_keeping()], "installed": [keep_zip_directories()]})

    rows = spark.range(0, 4, 1, 2).mapInArrow(report, "needed boolean, installed boolean").collect()
    assert {(r.needed, r.installed) for r in rows} == {(sys.version_info < (3, 12),) * 2}
