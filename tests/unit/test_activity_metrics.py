"""The dispatcher's attempts by outcome, and its attempts' refused egress by tenant class
and reason, on /metrics: every outcome is shown (zero included) as a counter, the figures
are read at scrape time, and a stopped dispatcher's collector is removed."""

from __future__ import annotations

from collections import Counter

from tenantry.activities.tasks.metrics import ATTEMPTS, EGRESS_REFUSED, OUTCOMES, watch_dispatcher
from tenantry.telemetry.registry import Registry


def test_every_outcome_is_a_counter_read_at_scrape_time() -> None:
    registry = Registry()
    outcomes: Counter[str] = Counter()
    remove = watch_dispatcher(registry, lambda: outcomes)
    text = registry.render()
    assert f"# TYPE {ATTEMPTS} counter" in text
    assert all(f'{ATTEMPTS}{{outcome="{o}"}} 0' in text for o in OUTCOMES)
    outcomes.update(completed=3, dead_lettered=1, cancelled=2)
    text = registry.render()
    assert f'{ATTEMPTS}{{outcome="completed"}} 3' in text
    assert f'{ATTEMPTS}{{outcome="dead_lettered"}} 1' in text
    assert f'{ATTEMPTS}{{outcome="cancelled"}} 2' in text
    remove()
    assert f'{ATTEMPTS}{{outcome="completed"}}' not in registry.render()


def test_refused_egress_is_a_counter_by_tenant_class_and_reason() -> None:
    registry = Registry()
    refused: Counter[tuple[str, str]] = Counter()
    remove = watch_dispatcher(registry, Counter, lambda: refused)
    assert f"# TYPE {EGRESS_REFUSED} counter" in registry.render()
    refused.update({("standard", "metadata_address"): 3, ("whale", "not_allowed"): 1})
    text = registry.render()
    assert f'{EGRESS_REFUSED}{{tenant_class="standard",reason="metadata_address"}} 3' in text
    assert f'{EGRESS_REFUSED}{{tenant_class="whale",reason="not_allowed"}} 1' in text
    remove()
    assert f"{EGRESS_REFUSED}{{" not in registry.render()
