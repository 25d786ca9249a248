from tenantry.vault.crypto import MasterKey, VaultError
from tenantry.vault.store import Vault, rotate_master_key

__all__ = ["MasterKey", "Vault", "VaultError", "rotate_master_key"]
