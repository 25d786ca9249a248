-- Moves of tenants between cells, in the directory (migration 0002, ADR 0029).

-- name: insert_move
INSERT INTO moves (move_id, tenant_id, source, target, phase)
VALUES ($1, $2, $3, $4, 'draining')
RETURNING *

-- name: open_move_of
SELECT move_id FROM moves
WHERE tenant_id = $1 AND phase NOT IN ('done', 'rolled_back')

-- name: move_by_id
SELECT * FROM moves WHERE move_id = $1

-- name: set_phase
UPDATE moves SET phase = $2, detail = NULL, updated_at = now() WHERE move_id = $1
RETURNING *

-- name: set_detail
UPDATE moves SET detail = $2, updated_at = now() WHERE move_id = $1

-- name: set_counts
UPDATE moves SET rows_copied = $2, blobs_copied = $3, updated_at = now() WHERE move_id = $1

-- name: moves_page
SELECT * FROM moves ORDER BY started_at DESC LIMIT $1

-- name: cell_access
SELECT name, region, database_url, blob_dir FROM cells WHERE name = $1

-- name: set_cell_access
UPDATE cells SET database_url = $2, blob_dir = $3 WHERE name = $1
