from tenantry.db.pool import DATABASE_DOWN, Connection, Database

__all__ = ["DATABASE_DOWN", "Connection", "Database"]
