"""Delta primitives shared by the lander and the lake: table references, SQL quoting and hostile-name paths,
DDL, reads of a table's Delta log, Spark failures as named errors, kill-safe table creation, and the bronze
schema. It knows no pipeline, no batch and no source: the lander and the lake are its siblings above it."""
