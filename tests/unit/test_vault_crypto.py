from __future__ import annotations

import pytest

from tenantry.errors import ConfigurationError
from tenantry.vault import MasterKey, VaultError, crypto


def test_secrets_round_trip_and_are_bound_to_tenant_and_name() -> None:
    master = MasterKey.generate()
    data_key = crypto.new_data_key()
    wrapped, nonce = crypto.wrap(master, "acme", data_key)
    assert crypto.unwrap(master, "acme", wrapped, nonce) == data_key
    with pytest.raises(VaultError):  # another tenant's row
        crypto.unwrap(master, "globex", wrapped, nonce)
    with pytest.raises(VaultError):  # another master key
        crypto.unwrap(MasterKey.generate(), "acme", wrapped, nonce)
    ciphertext, n2 = crypto.encrypt_secret(data_key, "acme", "token", "hunter2")
    assert b"hunter2" not in ciphertext
    assert crypto.decrypt_secret(data_key, "acme", "token", ciphertext, n2) == "hunter2"
    with pytest.raises(VaultError):  # copied under another name
        crypto.decrypt_secret(data_key, "acme", "other", ciphertext, n2)


def test_master_key_parsing_and_no_key_in_repr() -> None:
    key = MasterKey.generate()
    assert MasterKey.parse(key.encoded()) == key
    assert key.encoded() not in repr(key)
    for bad in ("not base64!", "c2hvcnQ="):
        with pytest.raises(ConfigurationError, match="TENANTRY_MASTER_KEY"):
            MasterKey.parse(bad)
