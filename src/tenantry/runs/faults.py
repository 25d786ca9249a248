"""Our own faults as a tenant sees them: a stable message and an error id, never
exception text, provider bodies, URLs or host names. The detail goes to our log under the
same id (``error_id``, a structured field), where an operator finds it with one grep."""

from __future__ import annotations

import logging
import secrets

logger = logging.getLogger(__name__)

# What the tenant reads (stable: docs/reference/api.md lists them).
PLATFORM_FAULT = ("platform error: the run failed on our side, not because of the agent; "
                  "quote {error_id} to the operator")
MODEL_UNAVAILABLE = "model unavailable: no account could serve {models} now ({error_id})"
MODEL_REFUSED = "the model provider refused the request ({how}{error_id})"
OTHER_ACCOUNT = "the previous account did not answer"
OTHER_MODEL = "the previous model did not answer"
BACK_TO_MODEL = "{model} is available again"


def new_error_id() -> str:
    return f"err_{secrets.token_hex(8)}"


def record(what: str, detail: str, *, run_id: str, tenant_id: str,
           exc: BaseException | None = None, level: int = logging.ERROR) -> str:
    """Log ``detail`` under a new error id (with the traceback of ``exc``, if given) and
    return the id, for the tenant's side of the story."""
    error_id = new_error_id()
    logger.log(level, "%s [%s]: %s", what, error_id, detail, exc_info=exc,
                 extra={"error_id": error_id, "run_id": run_id, "tenant_id": tenant_id,
                        "detail": detail})
    return error_id
