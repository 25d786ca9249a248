"""``tenantry router``'s HTTP app (ADR 0028): the one base URL tenants and operators call
in front of several cells. Routing itself lives in :mod:`tenantry.cells`."""

from tenantry.api.router.app import create_router_app

__all__ = ["create_router_app"]
