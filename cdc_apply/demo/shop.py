"""The demo's shop: a schema and a workload that touches every apply rule.

Tables: ``customers`` and ``orders`` (primary keys, a foreign key with ON
UPDATE CASCADE), ``order_lines`` (composite key), ``audit_log`` (REPLICA
IDENTITY FULL, no key, duplicate rows), ``products`` (REPLICA IDENTITY USING
INDEX on ``sku``) and ``documents`` (a TOASTed ``body`` kept unchanged by
updates).
"""

from __future__ import annotations

from typing import Callable

SCHEMA = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text, tier text DEFAULT 'basic');
CREATE TABLE orders (
    id int PRIMARY KEY,
    customer_id int REFERENCES customers(id) ON UPDATE CASCADE ON DELETE CASCADE,
    status text NOT NULL,
    total numeric(12,2),
    created_at timestamptz NOT NULL DEFAULT '2026-11-01 09:00:00+00');
CREATE TABLE order_lines (
    order_id int REFERENCES orders(id) ON DELETE CASCADE,
    line_no int,
    sku text NOT NULL,
    qty int NOT NULL,
    price numeric(10,2) NOT NULL,
    PRIMARY KEY (order_id, line_no));
CREATE TABLE audit_log (event text NOT NULL, detail jsonb, at timestamptz NOT NULL);
ALTER TABLE audit_log REPLICA IDENTITY FULL;
CREATE TABLE products (id int PRIMARY KEY, sku text NOT NULL, title text, price numeric(10,2), legacy_code text);
CREATE UNIQUE INDEX products_sku ON products (sku);
ALTER TABLE products REPLICA IDENTITY USING INDEX products_sku;
CREATE TABLE documents (id int PRIMARY KEY, title text NOT NULL, body text);
ALTER TABLE documents ALTER COLUMN body SET STORAGE EXTERNAL;
"""

# Each step: (what it shows, SQL run in one session; a list runs as separate statements).
Step = tuple[str, str | list[str]]
STEPS: tuple[Step, ...] = (
    ("initial load", """
INSERT INTO customers SELECT g, 'customer ' || g, 'c' || g || '@example.com' FROM generate_series(1, 200) g;
INSERT INTO orders (id, customer_id, status, total)
    SELECT g, 1 + g % 200, 'new', (g * 7 % 1000) + 0.99 FROM generate_series(1, 400) g;
INSERT INTO order_lines SELECT 1 + g / 3, g % 3, 'sku-' || (g % 50), 1 + g % 4, 9.99 + g % 10
    FROM generate_series(0, 1199) g;
INSERT INTO products SELECT g, 'sku-' || g, 'product ' || g, 9.99 + g, 'L' || g FROM generate_series(0, 49) g;
INSERT INTO documents SELECT g, 'doc ' || g,
    (SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 400) i) FROM generate_series(1, 20) g;
INSERT INTO audit_log SELECT 'login', jsonb_build_object('customer', g % 5), '2026-11-01 10:00:00+00'
    FROM generate_series(1, 30) g;"""),
    ("updates, key changes, unchanged TOAST", """
UPDATE orders SET status = 'paid', total = total + 1 WHERE id % 5 = 0;
UPDATE customers SET email = upper(email) WHERE id % 7 = 0;
UPDATE customers SET id = id + 1000 WHERE id IN (3, 4, 5);
UPDATE products SET sku = sku || '-v2', price = price * 2 WHERE id < 5;
UPDATE documents SET title = title || ' (revised)' WHERE id <= 10;
UPDATE documents SET id = id + 100 WHERE id = 20;"""),
    ("deletes and duplicates", """
DELETE FROM order_lines WHERE order_id % 10 = 1;
DELETE FROM orders WHERE id IN (2, 4, 6);
DELETE FROM audit_log WHERE ctid IN (SELECT ctid FROM audit_log WHERE detail = '{"customer": 1}' LIMIT 1);
UPDATE audit_log SET event = 'logout' WHERE ctid IN \
(SELECT ctid FROM audit_log WHERE detail = '{"customer": 2}' LIMIT 1);
SELECT pg_logical_emit_message(false, 'demo', 'non-transactional note');"""),
    ("a large transaction (streamed)", """
BEGIN;
INSERT INTO audit_log SELECT 'bulk', jsonb_build_object('n', g), '2026-11-02 00:00:00+00'
    FROM generate_series(1, 3000) g;
UPDATE orders SET status = 'shipped' WHERE status = 'paid';
SELECT pg_logical_emit_message(true, 'demo', 'bulk import done');
COMMIT;"""),
    ("two-phase commit", [
        "BEGIN; INSERT INTO orders (id, customer_id, status, total) VALUES (9001, 10, 'new', 42.00); "
        "PREPARE TRANSACTION 'demo-commit'",
        "COMMIT PREPARED 'demo-commit'",
        "BEGIN; INSERT INTO orders (id, customer_id, status, total) VALUES (9002, 11, 'new', 13.00); "
        "PREPARE TRANSACTION 'demo-rollback'",
        "ROLLBACK PREPARED 'demo-rollback'",
    ]),
    ("TRUNCATE ... CASCADE", """
BEGIN;
TRUNCATE orders CASCADE;
INSERT INTO orders (id, customer_id, status, total) VALUES (1, 1, 'new', 10.00), (2, 2, 'new', 20.00);
INSERT INTO order_lines VALUES (1, 0, 'sku-1', 1, 10.00), (2, 0, 'sku-2', 2, 10.00);
COMMIT;"""),
    ("ALTER TABLE", """
ALTER TABLE customers ADD COLUMN loyalty_points int DEFAULT 0;
ALTER TABLE customers RENAME COLUMN tier TO segment;
UPDATE customers SET loyalty_points = id * 10, segment = 'gold' WHERE id % 20 = 0;
ALTER TABLE products DROP COLUMN legacy_code;
UPDATE products SET title = 'renamed ' || title WHERE id = 10;
ALTER TABLE orders ALTER COLUMN total TYPE numeric(14,2);
INSERT INTO orders (id, customer_id, status, total) VALUES (3, 7, 'new', 123456789012.34);"""),
)


# The rows the shop holds before replication starts (a snapshot brings them into silver); the rest are
# changes the slot decodes.
EXISTING, CHANGES = STEPS[:1], STEPS[1:]


def run_workload(execute: Callable[[str], object], say: Callable[[str], None] = print,
                 steps: tuple[Step, ...] = STEPS) -> None:
    """Run ``steps`` (default: every step) through ``execute`` (one SQL string at a time, autocommit)."""
    for title, sql in steps:
        say(f"  workload: {title}")
        for statement in (sql if isinstance(sql, list) else [sql]):
            execute(statement)
