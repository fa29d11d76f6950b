-- Budgets (issue 44): when the usage sampler first found a space's budget spent this month.
-- Running workspaces in the space and below it (but for exempt admins') are stopped a grace
-- period later, with the stop warning before; raising the budget or a new month clears it.
ALTER TABLE space_budgets ADD COLUMN spent_at BIGINT;
