"""What ``tenantry up``/``api`` print once started: where the platform is, the operator
token (only if we generated it) and ready-to-paste commands."""

from __future__ import annotations

import shlex

from tenantry import __version__
from tenantry.bootstrap.demo import Demo

KEY_NOTES = {"new": "", "kept": "  (the same as the last start: kept in the data dir)",
             "rotated": "  (NEW: the kept key no longer worked and was replaced)"}


def banner(base: str, token: str | None, demo: Demo | None, db_kind: str,
           warnings: list[str] | None = None, *, running: list[str] | None = None) -> str:
    """``warnings``: lines to read before anything else (a weaker sandbox boundary);
    ``running``: what else this process runs (the activity dispatcher, or why not)."""
    lines = [f"Tenantry {__version__} on {base} (Postgres: {db_kind})", *(warnings or []),
             *(running or []),
             f"operator token: {token or '(as configured in TENANTRY_OPERATOR_TOKEN)'}",
             f"console: {base}/console (log in with the operator token)"]
    if demo is not None:
        body = shlex.quote(f'{{"agent_id": "{demo.agent_id}", "input": "Hello from the demo"}}')
        auth = f"-H 'Authorization: Bearer {demo.api_key}'"
        lines += [
            f"demo tenant: {demo.tenant}  api key: {demo.api_key}{KEY_NOTES[demo.key_is]}",
            "start a demo run:",
            f"  curl -s -X POST {base}/v1/runs {auth} -H 'Content-Type: application/json' "
            f"-d {body}",
            "watch it:",
            f"  curl -sN {base}/v1/runs/<run_id>/events {auth}",
        ]
    else:
        bearer = token or "$TENANTRY_OPERATOR_TOKEN"
        auth = f"-H \"Authorization: Bearer {bearer}\" -H 'Content-Type: application/json'"
        lines += [
            "create a tenant and an API key (or start with --demo):",
            f"  curl -s -X POST {base}/admin/v1/tenants {auth} -d '{{\"name\": \"Acme\"}}'",
            f"  curl -s -X POST {base}/admin/v1/tenants/<tenant_id>/api-keys {auth}",
        ]
    return "\n".join(lines)
