-- statement.sql: one statement that writes nothing (no transaction id, no
-- WAL flush): a round trip, parse-free (prepared) execution, its snapshot.
SELECT 1;
