from tenantry.vault.crypto import MasterKey, VaultError
from tenantry.vault.store import (
    Vault,
    reseal_legacy_accounts,
    rewrap_tenant,
    rotate_master_key,
)

__all__ = ["MasterKey", "Vault", "VaultError", "reseal_legacy_accounts", "rewrap_tenant",
           "rotate_master_key"]
