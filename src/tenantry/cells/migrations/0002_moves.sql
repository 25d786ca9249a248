-- Moves of tenants between cells (issue 20 item 4, ADR 0029): the directory keeps each
-- move's phase, so an interrupted `tenantry cells move` is resumed or rolled back from
-- where it stopped. The switch of a tenant's home cell and its move's 'switched' phase are
-- written in one transaction: that commit is the move's point of no return.

-- What a move needs to reach a cell besides its API: the cell's database on its owner
-- login (the copy reads and writes every table of the tenant) and its blob folder, as seen
-- from the machine where the move runs. Neither is needed for routing.
ALTER TABLE cells ADD COLUMN IF NOT EXISTS database_url text
    CHECK (database_url IS NULL OR length(database_url) BETWEEN 1 AND 2000);
ALTER TABLE cells ADD COLUMN IF NOT EXISTS blob_dir text
    CHECK (blob_dir IS NULL OR length(blob_dir) BETWEEN 1 AND 1000);

CREATE TABLE moves (
    move_id       uuid PRIMARY KEY,
    tenant_id     text NOT NULL REFERENCES tenants (tenant_id) ON DELETE CASCADE,
    source        text NOT NULL REFERENCES cells (name),
    target        text NOT NULL REFERENCES cells (name),
    phase         text NOT NULL
                  CHECK (phase IN ('draining', 'copying', 'switched', 'done', 'rolled_back')),
    rows_copied   bigint,
    blobs_copied  integer,
    detail        text CHECK (length(detail) <= 2000),  -- why it stopped, if it did
    started_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CHECK (source <> target)
);
-- One move of a tenant at a time.
CREATE UNIQUE INDEX moves_one_open_per_tenant ON moves (tenant_id)
    WHERE phase NOT IN ('done', 'rolled_back');
CREATE INDEX moves_by_start ON moves (started_at DESC);
