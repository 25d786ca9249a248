"""Envelope encryption: a data key per tenant (AES-256-GCM) wrapped by the master key.

Associated data binds every ciphertext to where it belongs (tenant, secret name, master
key id), so a ciphertext copied to another tenant's row does not decrypt."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tenantry.errors import ConfigurationError, TenantryError


class VaultError(TenantryError):
    type = "vault_error"
    status = 500
    title = "Vault error"


@dataclass(frozen=True, slots=True)
class MasterKey:
    key: bytes

    @classmethod
    def parse(cls, text: str, source: str = "TENANTRY_MASTER_KEY") -> MasterKey:
        try:
            raw = base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError(f"{source} must be base64") from None
        if len(raw) != 32:
            raise ConfigurationError(f"{source} must decode to 32 bytes")
        return cls(raw)

    @classmethod
    def generate(cls) -> MasterKey:
        return cls(os.urandom(32))

    def encoded(self) -> str:
        return base64.b64encode(self.key).decode()

    @property
    def key_id(self) -> str:
        """Names the key without revealing it (which master wrapped a data key)."""
        return hashlib.sha256(b"tenantry-master-key-id:" + self.key).hexdigest()[:16]

    def __repr__(self) -> str:  # never print key material
        return f"MasterKey(id={self.key_id})"


def _seal(key: bytes, plaintext: bytes, aad: bytes) -> tuple[bytes, bytes]:
    nonce = os.urandom(12)
    return AESGCM(key).encrypt(nonce, plaintext, aad), nonce


def _open(key: bytes, ciphertext: bytes, nonce: bytes, aad: bytes) -> bytes:
    try:
        return AESGCM(key).decrypt(nonce, ciphertext, aad)
    except InvalidTag:
        raise VaultError("a ciphertext did not authenticate (wrong key or tampered)") from None


def new_data_key() -> bytes:
    return AESGCM.generate_key(bit_length=256)


def wrap(master: MasterKey, tenant: str, data_key: bytes) -> tuple[bytes, bytes]:
    return _seal(master.key, data_key, f"tenant-key:{tenant}:{master.key_id}".encode())


def unwrap(master: MasterKey, tenant: str, wrapped: bytes, nonce: bytes) -> bytes:
    return _open(master.key, wrapped, nonce, f"tenant-key:{tenant}:{master.key_id}".encode())


def encrypt_secret(data_key: bytes, tenant: str, name: str, value: str) -> tuple[bytes, bytes]:
    return _seal(data_key, value.encode(), f"secret:{tenant}:{name}".encode())


def decrypt_secret(data_key: bytes, tenant: str, name: str, ciphertext: bytes,
                   nonce: bytes) -> str:
    return _open(data_key, ciphertext, nonce, f"secret:{tenant}:{name}".encode()).decode()


def seal_platform_secret(master: MasterKey, scope: str, value: str) -> tuple[bytes, bytes]:
    """A platform-owned credential (a model account's API key), sealed by the master key
    itself and bound to ``scope`` so a sealed value cannot be moved to another row."""
    return _seal(master.key, value.encode(), f"platform-secret:{scope}:{master.key_id}".encode())


def open_platform_secret(master: MasterKey, scope: str, sealed: bytes, nonce: bytes) -> str:
    aad = f"platform-secret:{scope}:{master.key_id}".encode()
    return _open(master.key, sealed, nonce, aad).decode()


#: How a model account's key is bound: 1, before migration 0015, to the account id only;
#: 2, also to where the key is sent (provider, base_url), so a row pointed elsewhere by any
#: means no longer opens its key.
LEGACY_BINDING = 1
ACCOUNT_BINDING = 2


def account_scope(account_id: str, provider: str, base_url: str, binding: int) -> str:
    """What a model account's sealed key is bound to. JSON, so no field's text can pass for
    another's (a ':' in a URL)."""
    if binding == LEGACY_BINDING:
        return f"model-account:{account_id}"
    return "model-account-v2:" + json.dumps([account_id, provider, base_url],
                                             separators=(",", ":"))
