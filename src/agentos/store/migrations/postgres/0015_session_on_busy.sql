-- A session's default `on_busy` (docs/conversations.md): NULL = its agent's, else "replace".
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS on_busy TEXT;
