-- An approval whose run was cancelled is closed as 'cancelled' rather than left pending in
-- the inbox (and later expiring into a run that had already ended).
ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_status_check
    CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'cancelled'));
