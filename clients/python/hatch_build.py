"""The files of tenantry-client, taken from the server's tree: the SDK, and the package root,
errors, ids, the SSE parser and the backoff it imports (the server's wheel excludes the same files, ADR 0038)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.config import BuilderConfig
from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SRC = Path(__file__).resolve().parents[2] / "src"
SHIPPED = ("tenantry/__init__.py", "tenantry/errors.py", "tenantry/ids.py", "tenantry/py.typed",
           "tenantry/sse.py", "tenantry/backoff.py", "tenantry/client")


class ClientFiles(BuildHookInterface[BuilderConfig]):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        # An editable install reads them where they are (dev-mode-dirs): no copies.
        if self.target_name == "wheel" and version == "standard":
            build_data["force_include"].update({str(SRC / path): path for path in SHIPPED})
