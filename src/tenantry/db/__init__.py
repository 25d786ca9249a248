from tenantry.db.pool import Connection, Database

__all__ = ["Connection", "Database"]
