-- 0012: the W3C trace id of the request behind each audit event, so that an
-- event can be found from a trace (and a trace from an event). idemd sends
-- it with the event's "by" (src/store_int.h EVENT_BY); events written by
-- a previous release, by the sweeper or by the CLI have none.
ALTER TABLE record_events
    ADD COLUMN trace_id text NULL CHECK (trace_id ~ '^[0-9a-f]{32}$');
