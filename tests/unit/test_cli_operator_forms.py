"""``--tenant``: the tenant API's request moved to the operator API's form of its route, for
the tenant named (its id quoted as one path segment), and nothing sent for a route the
operator API has no form of."""

from __future__ import annotations

import pytest

from tenantry.cli.operator_forms import operator_path


@pytest.mark.parametrize(("method", "path", "moved"), [
    ("GET", "/v1/runs/run_1/trace", "/admin/v1/tenants/acme/runs/run_1/trace"),
    ("GET", "/v1/runs/run_1/events", "/admin/v1/tenants/acme/runs/run_1/events"),
    ("PUT", "/v1/secrets/crm-token", "/admin/v1/tenants/acme/secrets/crm-token"),
    ("POST", "/v1/tool-servers/crm/pin", "/admin/v1/tenants/acme/tool-servers/crm/pin"),
    ("DELETE", "/v1/api-keys/key_1", "/admin/v1/tenants/acme/api-keys/key_1"),
    ("POST", "/v1/approvals/apr_1", "/admin/v1/tenants/acme/approvals/apr_1/decision"),
])
def test_a_route_with_an_operator_form_moves_there(method: str, path: str, moved: str) -> None:
    assert operator_path(method, path, "acme") == moved


@pytest.mark.parametrize(("method", "path"), [
    ("DELETE", "/v1/secrets/crm-token"), ("POST", "/v1/runs"), ("GET", "/v1/runs"),
    ("POST", "/v1/api-keys/key_1/rotate"), ("PUT", "/v1/model-accounts/acc/api-key"),
    ("POST", "/v1/runs/run_1/cancel"),
])
def test_a_route_without_one_is_not_sent(method: str, path: str) -> None:
    assert operator_path(method, path, "acme") is None


def test_the_tenant_is_one_path_segment() -> None:
    assert operator_path("GET", "/v1/secrets", "a/../b") == "/admin/v1/tenants/a%2F..%2Fb/secrets"
