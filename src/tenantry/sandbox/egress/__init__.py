"""Sandbox egress (ADR 0005): the allow-list (``policy``), the host-side proxy behind a
sandbox's relay (``proxy``, whose docstring tells the whole path), the request it reads
(``request``), the refusals it keeps until they are recorded (``refusals``), the frames of
the one byte stream (``frames``) and a backend's end of that stream (``port``)."""

from tenantry.sandbox.egress.policy import EgressPolicy
from tenantry.sandbox.egress.proxy import EgressLimits, EgressProxy
from tenantry.sandbox.egress.refusals import EgressRefusal, HeldRefusals, TakenRefusals

__all__ = ["EgressLimits", "EgressPolicy", "EgressProxy", "EgressRefusal", "HeldRefusals",
           "TakenRefusals"]
