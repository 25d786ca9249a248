"""The cell's contract steps (``NNNN_name.sql``): each removes what an older release uses
— a column, a table, a routine's old ``_vN`` — once no process of that release is
connected. Applied by ``tenantry migrate --contract`` (:mod:`tenantry.db.contraction`),
recorded in ``schema_contract_steps``; docs/reference/architecture.md, "Changing the
schema". 0001 (release 0.2.0) retires 0.1.0's worker registration."""
