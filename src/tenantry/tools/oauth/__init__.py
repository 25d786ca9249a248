"""OAuth 2.1 for tool servers, as the MCP authorization spec (2025-11-25) has a client do it:
discovery from a 401's ``WWW-Authenticate`` (``discovery``), a client id and the token
endpoint (``endpoints``), and the tokens of a tenant's server kept sealed in its vault and
refreshed before they expire (``tokens``). docs/decisions/0040-oauth-for-tool-servers.md."""
