-- Resumable turn streams: each stored turn event keeps its place in the turn's stream
-- (`<turn_id>:<seq>`), and a resumed stream reads a turn's events by it. Rows stored before
-- read seq 0.
ALTER TABLE events ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;
CREATE INDEX events_by_turn ON events (tenant_id, turn_id, seq);
