-- 0010: the per-record replay count (GET /v1/records/{id} "replays") and
-- the partial index behind idemd_records_stuck.
-- Replays write nothing on their path: each instance counts them in memory
-- (src/replaycount.c) and adds its counts every few seconds with one
-- statement. A constant default is stored in the catalogue, so ADD COLUMN
-- does not rewrite the table; the column is in no index, so the periodic
-- UPDATE stays a HOT update.
ALTER TABLE records ADD COLUMN replays bigint NOT NULL DEFAULT 0;

-- A HOT update needs room on the row's page: pages written from now on
-- keep a fifth free for the replay counts' updates (the setting takes no
-- lock that blocks reads or writes, and rewrites nothing).
ALTER TABLE records SET (fillfactor = 80);

-- In-progress records are few next to completed ones: the stuck-records
-- gauge (records in progress past their lease, counted every 15 s by each
-- instance) reads only this small index, never the table's 10 M rows.
CREATE INDEX records_in_progress_lease_idx ON records (lease_expires_at)
    WHERE state = 'in_progress';
