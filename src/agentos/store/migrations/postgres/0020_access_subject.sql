-- The access log names the end user of each request (issue 30): a user token's `sub`, or the user
-- a browser token was minted for; '' for a tenant key and for a request with no principal.
ALTER TABLE access_log ADD COLUMN IF NOT EXISTS subject TEXT NOT NULL DEFAULT '';
