"""A tenant's activity code and how one attempt of it runs: its bundle, its versions, the
attempt in a sandbox, the sandboxes kept for batched and warm versions. Below the engine,
which reads versions when a run calls an activity as a tool (see ``tenantry.activities``)."""
