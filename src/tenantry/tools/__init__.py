"""Tool gateway: policy, approvals, the MCP client, output fencing, audit, built-ins."""
