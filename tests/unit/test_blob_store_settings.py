"""Choosing the blob store by configuration: the directory unless told otherwise, and an S3
configuration that cannot work refused at start-up with one line naming the variable —
before anything is sent anywhere, and never echoing a secret."""

from __future__ import annotations

import pytest

from tenantry.config import Settings
from tenantry.errors import ConfigurationError

S3 = {"TENANTRY_BLOB_STORE": "s3", "TENANTRY_S3_BUCKET": "tenantry-blobs"}
KEYS = {"TENANTRY_S3_ACCESS_KEY_ID": "AKIAEXAMPLE", "TENANTRY_S3_SECRET_ACCESS_KEY": "hush-1"}


def refused(env: dict[str, str]) -> str:
    with pytest.raises(ConfigurationError) as error:
        Settings.from_env(env)
    return str(error.value)


def test_the_directory_is_the_default_and_ignores_the_s3_variables() -> None:
    settings = Settings.from_env({"TENANTRY_S3_ENDPOINT": "not a url"})
    assert settings.blob_store == "directory"
    assert Settings.from_env({"TENANTRY_BLOB_STORE": "Directory"}).blob_store == "directory"


def test_an_s3_store_with_an_endpoint_is_path_style_by_default_and_aws_is_not() -> None:
    local = Settings.from_env({**S3, **KEYS, "TENANTRY_S3_ENDPOINT": "http://seaweedfs:8333"})
    assert (local.s3_endpoint, local.s3_region, local.s3_uses_path_style) == (
        "http://seaweedfs:8333", "us-east-1", True)
    aws = Settings.from_env({**S3, "TENANTRY_S3_REGION": "eu-west-1"})
    assert (aws.s3_endpoint, aws.s3_region, aws.s3_uses_path_style) == (
        None, "eu-west-1", False)
    hosted = Settings.from_env({**S3, "TENANTRY_S3_ENDPOINT": "https://s3.example.com",
                                "TENANTRY_S3_PATH_STYLE": "false"})
    assert not hosted.s3_uses_path_style


def test_the_secret_is_not_in_the_settings_repr() -> None:
    settings = Settings.from_env({**S3, **KEYS})
    assert settings.s3_secret_access_key == "hush-1"
    assert "hush-1" not in repr(settings)


def test_an_unknown_store_is_refused() -> None:
    assert refused({"TENANTRY_BLOB_STORE": "gcs"}) == (
        "TENANTRY_BLOB_STORE must be directory or s3, got 'gcs'")


def test_s3_without_a_bucket_is_refused() -> None:
    assert refused({"TENANTRY_BLOB_STORE": "s3"}) == (
        "TENANTRY_BLOB_STORE=s3 needs TENANTRY_S3_BUCKET (the bucket's name)")
    assert refused({**S3, "TENANTRY_S3_BUCKET": "My_Bucket"}).startswith(
        "TENANTRY_S3_BUCKET must be 3-63 characters of a-z, 0-9, '.', '-'")


@pytest.mark.parametrize("endpoint", [
    "seaweedfs:8333", "localhost", "ftp://files.example.com", "http://", "http://host:99999",
    "http://host:8333/some/path", "https://host?x=1", "http:/host",
])
def test_a_malformed_endpoint_is_refused(endpoint: str) -> None:
    assert refused({**S3, "TENANTRY_S3_ENDPOINT": endpoint}).startswith(
        "TENANTRY_S3_ENDPOINT must be an http:// or https:// URL of the object store "
        "(scheme, host and an optional port, e.g. http://seaweedfs:8333)")


def test_credentials_in_the_endpoint_are_refused_without_echoing_them() -> None:
    line = refused({**S3, "TENANTRY_S3_ENDPOINT": "http://admin:s3cr3t@seaweedfs:8333"})
    assert line == ("TENANTRY_S3_ENDPOINT must not carry credentials: set "
                    "TENANTRY_S3_ACCESS_KEY_ID and TENANTRY_S3_SECRET_ACCESS_KEY")
    assert "s3cr3t" not in line


def test_a_key_id_without_its_secret_is_refused_and_the_reverse() -> None:
    expected = ("set both TENANTRY_S3_ACCESS_KEY_ID and TENANTRY_S3_SECRET_ACCESS_KEY, or "
                "neither (then the AWS credential chain applies)")
    assert refused({**S3, "TENANTRY_S3_ACCESS_KEY_ID": "AKIAEXAMPLE"}) == expected
    line = refused({**S3, "TENANTRY_S3_SECRET_ACCESS_KEY": "hush-2"})
    assert line == expected and "hush-2" not in line


def test_virtual_hosted_requests_need_a_host_name() -> None:
    assert refused({**S3, "TENANTRY_S3_ENDPOINT": "http://10.0.0.5:9000",
                    "TENANTRY_S3_PATH_STYLE": "false"}) == (
        "TENANTRY_S3_PATH_STYLE=false puts the bucket in the host name, which needs a host "
        "name in TENANTRY_S3_ENDPOINT, not the address 10.0.0.5")
    assert refused({**S3, "TENANTRY_S3_PATH_STYLE": "true"}) == (
        "TENANTRY_S3_PATH_STYLE=true needs TENANTRY_S3_ENDPOINT (AWS S3 is reached "
        "virtual-hosted)")
    assert refused({**S3, "TENANTRY_S3_PATH_STYLE": "maybe"}) == (
        "TENANTRY_S3_PATH_STYLE must be true or false")
