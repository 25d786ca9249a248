"""Reading a Prometheus text exposition (/metrics) as a test does: samples by name and
label set."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match is not None, line
        name, labels, value = match.groups()
        found[(name, frozenset(_LABEL.findall(labels or "")))] = float(value)
    return found


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)
