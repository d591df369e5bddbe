"""Delta primitives shared by the lander and the lake: table references, SQL quoting and hostile-name paths,
DDL, the bronze schema, kill-safe table creation and Spark failures as named errors. It knows no pipeline,
no batch and no source: the lander and the lake are siblings above it.

It is also the one seam to Delta's JVM classes: :mod:`~cdc_apply.delta.log` (log reads),
:mod:`~cdc_apply.delta.commit` (commits of files written by pyarrow) and
:mod:`~cdc_apply.delta.table_create` (listings of ``_delta_log/``) are the only modules of cdc_apply that
reach through py4j into Delta and Hadoop. A session without a JVM (Spark Connect: SQL only) differs here.
"""
