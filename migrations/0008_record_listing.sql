-- 0008: listing records newest claim first (GET /v1/records), with keyset
-- pagination: the index walks one tenant's records by (created_at, record
-- id) from the cursor on, so a page costs the same on the first and on the
-- ten-thousandth page, and rows inserted meanwhile never shift a page.
-- created_at never changes after the insert, so completing a record stays
-- as cheap an update as before (it already changes the indexed expires_at).
CREATE INDEX records_tenant_created_idx ON records (tenant_id, created_at DESC, token_id DESC);
