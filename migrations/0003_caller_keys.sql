-- 0003: records made by caller keys.
--
-- A record is addressed by (tenant, record id); a token's random id is one
-- way to make the record id, a caller key another: BLAKE2b-128 of the
-- operation and the key (src/h_keys.c), so the same key under another
-- operation is another record. A caller key may come without a subject,
-- so the subject becomes optional; when present it is still 1..128 bytes
-- (the CHECK passes NULL).
ALTER TABLE records ALTER COLUMN subject DROP NOT NULL;
