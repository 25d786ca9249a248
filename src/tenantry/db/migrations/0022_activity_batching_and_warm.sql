-- Batching short steps and warm sandboxes (issue 16 items 7, 8; ADR 0014). Both opt-in per
-- activity version; NULL (the default) keeps ADR 0012's fresh sandbox per attempt.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): claim_activity_next.
ALTER TABLE activity_versions
    ADD COLUMN batch_max_tasks integer CHECK (batch_max_tasks BETWEEN 1 AND 1000),
    ADD COLUMN batch_max_seconds double precision
        CHECK (batch_max_seconds > 0 AND batch_max_seconds <= 86400),
    ADD COLUMN warm_idle_seconds double precision
        CHECK (warm_idle_seconds > 0 AND warm_idle_seconds <= 3600),
    ADD CONSTRAINT activity_versions_batch_whole
        CHECK ((batch_max_tasks IS NULL) = (batch_max_seconds IS NULL));
