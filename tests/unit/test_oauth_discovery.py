"""The pure parts of OAuth for tool servers (tools/oauth/): reading a Bearer challenge, the
order of the well-known URLs, which resource a token may go to, the client authentication
chosen, and the authorization URL."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from tenantry.tools.oauth.discovery import (
    AuthorizationFailed,
    AuthorizationServer,
    Challenge,
    _covers,
    _resource_metadata_urls,
    authorization_server_metadata_urls,
    parse_challenge,
)
from tenantry.tools.oauth.endpoints import OAuthClient, auth_method, authorization_url, pkce


def test_a_bearer_challenge_is_read_with_quoted_and_bare_values() -> None:
    header = ('Bearer realm="mcp", error="insufficient_scope", scope="mcp:basic mcp:write", '
              'resource_metadata="https://x.example/.well-known/oauth-protected-resource/mcp",'
              ' error_description="say \\"please\\""')
    assert parse_challenge(header) == Challenge(
        "https://x.example/.well-known/oauth-protected-resource/mcp", "mcp:basic mcp:write",
        "insufficient_scope")
    assert parse_challenge("bearer scope=read") == Challenge(None, "read", None)
    assert parse_challenge('Basic realm="x"') == Challenge()
    assert parse_challenge("") == Challenge()


def test_metadata_urls_follow_the_spec_order() -> None:
    assert _resource_metadata_urls("https://h.example/mcp") == [
        "https://h.example/.well-known/oauth-protected-resource/mcp",
        "https://h.example/.well-known/oauth-protected-resource"]
    assert _resource_metadata_urls("https://h.example") == [
        "https://h.example/.well-known/oauth-protected-resource"]
    assert authorization_server_metadata_urls("https://a.example/tenant1") == [
        "https://a.example/.well-known/oauth-authorization-server/tenant1",
        "https://a.example/.well-known/openid-configuration/tenant1",
        "https://a.example/tenant1/.well-known/openid-configuration"]
    assert authorization_server_metadata_urls("https://a.example/") == [
        "https://a.example/.well-known/oauth-authorization-server",
        "https://a.example/.well-known/openid-configuration"]


@pytest.mark.parametrize(("resource", "server", "covered"), [
    ("https://h.example/mcp", "https://h.example/mcp", True),
    ("https://H.example", "https://h.example/mcp", True),  # the origin covers its paths
    ("https://h.example/mcp", "https://h.example/mcp/v2", True),
    ("https://h.example/mc", "https://h.example/mcp", False),  # a prefix of a segment is not
    ("https://h.example/other", "https://h.example/mcp", False),
    ("https://evil.example/mcp", "https://h.example/mcp", False),
    ("http://h.example/mcp", "https://h.example/mcp", False),
])
def test_a_token_goes_only_to_the_resource_it_is_for(resource: str, server: str,
                                                      covered: bool) -> None:
    assert _covers(resource, server) is covered


def _server(methods: tuple[str, ...], challenges: tuple[str, ...] = ("S256",)
            ) -> AuthorizationServer:
    return AuthorizationServer("https://a.example", "https://a.example/authorize?x=1",
                               "https://a.example/token", None, methods, challenges, False)


def test_the_client_authentication_is_one_the_server_takes() -> None:
    assert auth_method(_server(("client_secret_post", "client_secret_basic")), "s") == \
        "client_secret_basic"
    assert auth_method(_server(("client_secret_post",)), "s") == "client_secret_post"
    assert auth_method(_server(("none",)), "s") == "none"  # a public client after all
    assert auth_method(_server(("client_secret_basic",)), None) == "none"
    assert auth_method(_server(("none",)), "s", registered="client_secret_post") == \
        "client_secret_post"  # what registration said wins
    with pytest.raises(AuthorizationFailed):
        auth_method(_server(("private_key_jwt",)), "s")


def test_the_authorization_url_carries_pkce_state_resource_and_scope() -> None:
    verifier, challenge = pkce()
    assert 43 <= len(verifier) <= 128 and "=" not in challenge
    url = authorization_url(_server(("none",)), OAuthClient("c1", None, "none"),
                            redirect_uri="https://p.example/oauth/callback", state="ten_a.xyz",
                            challenge=challenge, scope="mcp:basic",
                            resource="https://h.example/mcp")
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    assert parts.path == "/authorize" and query["x"] == ["1"]  # its own query kept
    assert {k: v[0] for k, v in query.items() if k != "x"} == {
        "response_type": "code", "client_id": "c1",
        "redirect_uri": "https://p.example/oauth/callback", "state": "ten_a.xyz",
        "code_challenge": challenge, "code_challenge_method": "S256",
        "resource": "https://h.example/mcp", "scope": "mcp:basic"}
    no_scope = authorization_url(_server(("none",)), OAuthClient("c1", None, "none"),
                                 redirect_uri="https://p/cb", state="s", challenge=challenge,
                                 scope=None, resource="https://h/mcp")
    assert "scope" not in parse_qs(urlsplit(no_scope).query)
    with pytest.raises(AuthorizationFailed, match="S256"):
        authorization_url(_server(("none",), ("plain",)), OAuthClient("c1", None, "none"),
                          redirect_uri="https://p/cb", state="s", challenge=challenge,
                          scope=None, resource="https://h/mcp")


def test_no_token_is_in_a_repr() -> None:
    from tenantry.tools.oauth.endpoints import Tokens

    tokens = Tokens("at-secret", 60.0, "rt-secret", "s")
    client = OAuthClient("c1", "client-secret", "client_secret_basic")
    assert "secret" not in repr(tokens) and "client-secret" not in repr(client)
