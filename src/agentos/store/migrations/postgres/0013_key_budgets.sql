-- Spending budgets of a key of its own (agentos.tenancy.budgets), in the operator's currency per
-- UTC day and calendar month; 0: none (the tenant's budgets still apply).
ALTER TABLE api_keys
    ADD COLUMN budget_per_day DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN budget_per_month DOUBLE PRECISION NOT NULL DEFAULT 0;
