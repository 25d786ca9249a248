from tenantry.vault.crypto import MasterKey, VaultError
from tenantry.vault.store import (
    SealedSecret,
    Vault,
    reseal_legacy_accounts,
    rewrap_tenant,
    rotate_master_key,
)

__all__ = ["MasterKey", "SealedSecret", "Vault", "VaultError", "reseal_legacy_accounts",
           "rewrap_tenant", "rotate_master_key"]
