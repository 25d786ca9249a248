"""Accessibility basics: every text colour of the console's stylesheet
against the background it is drawn on reaches WCAG 2.x AA contrast for normal text (4.5:1),
computed from the stylesheet itself — a colour changed there is checked here."""

from __future__ import annotations

import re
from importlib import resources

AA_NORMAL_TEXT = 4.5
WHITE = "#fff"


def _stylesheet() -> str:
    return (resources.files("tenantry.api.console") / "static" / "console.css").read_text()


def _variables(css: str) -> dict[str, str]:
    root = re.search(r":root\s*\{(.*?)\}", css, flags=re.S)
    assert root is not None, "console.css has no :root variables"
    return dict(re.findall(r"--([a-z-]+):\s*(#[0-9a-fA-F]{3,6})", root[1]))


def _luminance(colour: str) -> float:
    hexes = colour.lstrip("#")
    if len(hexes) == 3:
        hexes = "".join(c * 2 for c in hexes)
    channels = [int(hexes[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_the_contrast_formula_matches_wcags_own_examples() -> None:
    assert round(contrast("#000", "#fff"), 1) == 21.0
    assert round(contrast("#777", "#fff"), 2) == 4.48  # the classic just-below-AA grey


def test_every_text_colour_reaches_aa_on_the_background_it_is_drawn_on() -> None:
    v = _variables(_stylesheet())
    # (text, background, where): the pairs the stylesheet draws.
    pairs = [
        (v["fg"], WHITE, "body text"), (v["fg"], v["bg"], "pre blocks, table headers"),
        (v["muted"], WHITE, "muted text"), (v["muted"], v["bg"], "muted in table headers"),
        (v["info"], WHITE, "links, running"), (v["ok"], WHITE, "finished, closed"),
        (v["warn"], WHITE, "waiting, pending"), (v["bad"], WHITE, "errors, at cap"),
        (WHITE, v["accent"], "the header bar"), (WHITE, v["ok"], "Approve buttons"),
        (WHITE, v["bad"], "Deny buttons"), (v["fg"], "#fff8c5", "notices"),
        (v["fg"], "#ddf4ff", "fresh event rows"), (v["fg"], "#ffebe9", "flagged rows"),
        (v["info"], v["bg"], "links in table headers"),
    ]
    low = [(where, round(contrast(fg, bg), 2)) for fg, bg, where in pairs
           if contrast(fg, bg) < AA_NORMAL_TEXT]
    assert low == [], f"below {AA_NORMAL_TEXT}:1 — {low}"
