"""The global directory's own migration series (``tenantry.cells.directory.DIRECTORY``):
never applied to a cell's database, nor the cell's to it."""
