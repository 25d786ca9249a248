from tenantry.db.pool import DATABASE_DOWN, TRANSIENT, Connection, Database

__all__ = ["DATABASE_DOWN", "TRANSIENT", "Connection", "Database"]
