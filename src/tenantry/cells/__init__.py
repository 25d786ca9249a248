"""Cells (docs/how-to/cells.md): the global directory of home cells (:mod:`.directory`), the
router's routing — authenticating a key to its tenant's home cell (:mod:`.routes`) and
forwarding a request there (:mod:`.forward`). The HTTP app is ``tenantry.api.router``."""
