-- pgbench_setup.sql: creates bench_records, the table baseline B writes to:
-- a copy of idemd's records table with its columns, CHECK constraints,
-- defaults, primary key and expires_at index. Run after idemd migrate.
SET client_min_messages = warning;
DROP TABLE IF EXISTS bench_records;
CREATE TABLE bench_records (LIKE records INCLUDING ALL);
