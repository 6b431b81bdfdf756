-- Last-wins across nodes: every session has a turn epoch, bumped atomically when a turn starts
-- (`UPDATE ... SET turn_epoch = turn_epoch + 1 ... RETURNING turn_epoch`), and the turn holding
-- it (`active_turn`, NULL once cancelled). Every write of a turn names its epoch and goes
-- through `agentos_turn_fence`, so a superseded turn on any node cannot write after its
-- successor started: a fencing token, checked by the database itself.
ALTER TABLE sessions ADD COLUMN turn_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN active_turn TEXT;

-- True if `mine` is the session's current epoch; otherwise raises SQLSTATE 'AOS01' (the
-- session moved on, or was deleted). It takes a share lock on the session row, so a write
-- either commits before a bump of the epoch or sees the bumped epoch and fails: there is no
-- window in which a stale write lands after its successor's UPDATE committed. Raising (rather
-- than inserting nothing) lets the writer tell the stale row apart and the turn end cancelled.
CREATE FUNCTION agentos_turn_fence(tenant TEXT, session TEXT, mine BIGINT) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
DECLARE
    current_epoch BIGINT;
BEGIN
    SELECT turn_epoch INTO current_epoch FROM sessions
    WHERE tenant_id = tenant AND session_id = session FOR SHARE;
    IF current_epoch IS DISTINCT FROM mine THEN
        RAISE EXCEPTION 'stale turn epoch % of session % (now %)', mine, session, current_epoch
            USING ERRCODE = 'AOS01';
    END IF;
    RETURN TRUE;
END
$$;
