"""A worker reaches its first claim without loading what its step path does not need at once
(target: first claim within 1 s of CPU; the figure itself is `process_cpu_ms` on its
"worker started" line, measured by benchmarks, never asserted here).

Real processes on a real database: `tenantry worker --processes 1` as an operator starts it,
and a supervised child (`python -m tenantry.bootstrap.worker_child`) as `--processes N`
starts it. Each runs under a small wrapper that, at the "worker started" line (logged just
before the first claim), writes the names in ``sys.modules`` to a file and exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tenantry.bootstrap.supervisor import encode_settings
from tenantry.config import Settings
from tests.support.db import login_dsn

pytestmark = pytest.mark.e2e

#: Never loaded by a worker before its first claim. The API's stack (FastAPI, Starlette,
#: uvicorn, the console's Jinja templates, multipart forms, SSE), the activity dispatcher,
#: the scripted model's HTTP server (only without a model URL), spans (only with
#: TENANTRY_OTEL_EXPORTER), provider and MCP SDKs (the gateways speak their wire formats
#: themselves over tenantry.http1, ADR 0022), rich (the CLI's progress bars and
#: tracebacks), the S3 client (only with TENANTRY_BLOB_STORE=s3). (httpx2 and anyio may
#: be there: webhooks still send with httpx2.)
HEAVY = ("fastapi", "starlette", "uvicorn", "jinja2", "python_multipart", "sse_starlette",
         "opentelemetry", "openai", "anthropic", "mcp", "mcp_types", "rich", "tenantry.api",
         "tenantry.store", "tenantry.bootstrap.activities", "tenantry.models.scripted_server",
         "tenantry.telemetry.http", "obstore", "tenantry.blobs.s3")
#: Besides, never loaded by a supervised child, which parses no flags: typer (and click)
#: build a pydantic validator for every flag given, which is why `tenantry worker
#: --processes 1` has them, and pydantic with them.
CLI = ("typer", "click", "pydantic")

WRAPPER = """
import json, logging, os, sys

class FirstClaim(logging.Handler):
    def emit(self, record):
        if record.getMessage() == "worker started":
            with open(os.environ["MODULES_OUT"], "w") as out:
                json.dump(sorted(sys.modules), out)
            os._exit(0)

logging.getLogger("tenantry.runs.worker").addHandler(FirstClaim())
if sys.argv[1] == "cli":
    sys.argv = ["tenantry", *sys.argv[2:]]
    from tenantry.cli import main
    main()
else:
    from tenantry.bootstrap.worker_child import main
    sys.exit(main())
"""


def loaded_at_first_claim(args: list[str], env: dict[str, str], out: Path,
                          stdin: bytes = b"") -> set[str]:
    result = subprocess.run([sys.executable, "-c", WRAPPER, *args], input=stdin,
                            env={**env, "MODULES_OUT": str(out)}, capture_output=True,
                            timeout=120, check=False)
    assert result.returncode == 0 and out.exists(), result.stderr.decode()[-3000:]
    return set(json.loads(out.read_text()))


def heavy_among(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.fixture
def worker_env(tmp_path: Path, database_dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")}
    env.update(TENANTRY_DATA_DIR=str(tmp_path / "data"),
               TENANTRY_DATABASE_URL=login_dsn(database_dsn),
               # A model URL, as in production: no scripted model server to serve.
               TENANTRY_MODEL_BASE_URL="http://127.0.0.1:9/v1",
               TENANTRY_SANDBOX_BACKEND="none", TENANTRY_LOG_FORMAT="json")
    return env


def test_tenantry_worker_claims_without_the_api_or_the_sdks(
    worker_env: dict[str, str], tmp_path: Path,
) -> None:
    modules = loaded_at_first_claim(["cli", "worker", "--processes", "1"], worker_env,
                                    tmp_path / "modules.json")
    assert "tenantry.runs.worker" in modules and "asyncpg" in modules  # it got that far
    assert heavy_among(modules, HEAVY) == []


def test_a_supervised_worker_process_claims_without_the_cli_either(
    worker_env: dict[str, str], tmp_path: Path,
) -> None:
    settings = Settings.from_env(worker_env, worker_processes=1)
    modules = loaded_at_first_claim(["child"], worker_env, tmp_path / "modules.json",
                                    stdin=encode_settings(settings))
    assert "tenantry.runs.worker" in modules
    assert heavy_among(modules, HEAVY + CLI) == []
