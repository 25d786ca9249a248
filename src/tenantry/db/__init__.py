from tenantry.db.pool import Database

__all__ = ["Database"]
