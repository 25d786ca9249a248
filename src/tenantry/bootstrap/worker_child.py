"""One worker process of ``tenantry worker --processes N`` (:mod:`.supervisor` starts it as
``python -m tenantry.bootstrap.worker_child``): its settings, resolved by the supervisor,
arrive as JSON on stdin; from there it is exactly a ``tenantry worker --processes 1``.

No CLI parsing here (typer builds a pydantic validator per flag): a child the supervisor
restarts reaches its first claim on as little CPU as possible."""

from __future__ import annotations

import sys


def main() -> int:
    from tenantry.bootstrap import process
    from tenantry.bootstrap.supervisor import decode_settings
    from tenantry.errors import TenantryError

    try:
        settings = decode_settings(sys.stdin.buffer.read())
        process.serve(settings, migrate=False, demo=False, api=False, workers=1,
                      production=True)
    except TenantryError as exc:  # as the CLI shows a refusal: one line, exit 2
        print(f"error: {exc.detail}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
