"""The root ``tenantry`` app: every command group registered, in the order help lists them.
Heavy libraries are imported inside commands so that ``tenantry --help`` stays fast."""

from __future__ import annotations

import typer

from tenantry import __version__
from tenantry.cli import (
    account,
    approvals,
    backup,
    billing,
    cells,
    evaluations,
    exports,
    migrate,
    model_accounts,
    prices,
    replay,
    retention,
    runs,
    sandbox,
    secrets,
    serve,
    tenants,
    tool_servers,
    usage,
    users,
    vault,
    webhooks,
)
from tenantry.cli.help import App

app = App(
    name="tenantry",
    help="Run AI agents for other companies: durable runs, fair scheduling, tenant isolation.",
    add_completion=False,
)


@app.command()
def version() -> None:
    """Print the Tenantry version."""
    typer.echo(__version__)


app.command("migrate")(migrate.migrate)
app.command()(serve.api)
app.command()(serve.worker)
app.command("activity-worker")(serve.activity_worker)
app.command()(serve.up)
app.command()(serve.router)
app.command()(replay.replay)
app.add_typer(vault.vault_app, name="vault")
app.add_typer(tenants.tenants_app, name="tenants")
app.add_typer(runs.runs_app, name="runs")
app.add_typer(approvals.approvals_app, name="approvals")
app.add_typer(evaluations.evaluations_app, name="evaluations")
app.add_typer(evaluations.agents_app, name="agents")
app.add_typer(tool_servers.tool_servers_app, name="tool-servers")
app.add_typer(secrets.secrets_app, name="secrets")
app.add_typer(account.api_keys_app, name="api-keys")
app.command("audit")(account.audit)
app.add_typer(users.users_app, name="users")
app.add_typer(exports.exports_app, name="exports")
app.add_typer(webhooks.webhooks_app, name="webhooks")
app.add_typer(model_accounts.model_accounts_app, name="model-accounts")
app.command("usage")(usage.usage)
app.add_typer(prices.prices_app, name="prices")
app.add_typer(billing.billing_app, name="billing")
app.add_typer(retention.retention_app, name="retention")
app.add_typer(cells.cells_app, name="cells")
app.add_typer(backup.backup_app, name="backup")
app.add_typer(sandbox.sandbox_app, name="sandbox")


def main() -> None:
    app()
