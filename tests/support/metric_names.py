"""Metric names on both sides of deploy/monitoring/: the ones the platform's code exports,
read from its source, and the ones PromQL expressions (rules, dashboard panels) read.

What the code exports is read from the source by the three ways it names a metric:

- a registry call, ``registry.counter/histogram/gauge(NAME, ...)``;
- a literal exposition line, ``"# TYPE tenantry_shed_level gauge"``;
- an f-string exposition line, ``f"# TYPE {name} gauge"``.

``NAME``/``name`` may be a literal, a module constant, the loop variable of a ``for`` over a
literal table (or a constant one), or a parameter of a function the module calls with such a
table. Anything else is not resolved and so not counted as exported: a metric emitted some
new way fails the check that uses this (the safe direction) until this learns the way. A
mention of a name in a docstring, a comment or SQL counts for nothing."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_TYPE_LINE = re.compile(r"# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)")
_REGISTRY_CALLS = {"counter": "counter", "histogram": "histogram", "gauge": "gauge"}


@dataclass
class Exported:
    #: Metric name -> its type as the code declares it (counter, gauge, histogram).
    types: dict[str, str] = field(default_factory=dict)
    #: Where each name was found (file:line), for messages.
    where: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, kind: str, where: str) -> None:
        self.types.setdefault(name, kind)
        self.where.setdefault(name, where)

    def series_names(self) -> set[str]:
        """Every name a scrape shows: a histogram's as its _bucket, _sum and _count."""
        names = set(self.types)
        for name, kind in self.types.items():
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        return names


def exported_metrics(src: Path) -> Exported:
    exported = Exported()
    for path in sorted(src.rglob("*.py")):
        _Module(path, exported).scan()
    return exported


class _Module:
    def __init__(self, path: Path, exported: Exported) -> None:
        self.path = path
        self.tree = ast.parse(path.read_text(), str(path))
        self.exported = exported
        self.constants: dict[str, ast.expr] = {}
        for node in self.tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)):
                self.constants[node.targets[0].id] = node.value
        self.parents: dict[ast.AST, ast.AST] = {
            child: parent for parent in ast.walk(self.tree)
            for child in ast.iter_child_nodes(parent)}

    def scan(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                self._registry_call(node)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                for match in _TYPE_LINE.finditer(node.value):
                    self._add(match[1], match[2], node)
            elif isinstance(node, ast.JoinedStr):
                self._type_line(node)

    def _add(self, name: str, kind: str, node: ast.AST) -> None:
        self.exported.add(name, kind, f"{self.path}:{getattr(node, 'lineno', 0)}")

    def _registry_call(self, call: ast.Call) -> None:
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr in _REGISTRY_CALLS
                and call.args):
            return
        kind = _REGISTRY_CALLS[func.attr]
        if func.attr == "gauge" and len(call.args) >= 3:
            # registry.gauge(name, help, "counter"): a counter someone else keeps.
            declared = self._strings(call.args[2], call)
            kind = next(iter(declared), kind)
        for name in self._strings(call.args[0], call):
            self._add(name, kind, call)

    def _type_line(self, node: ast.JoinedStr) -> None:
        """``f"# TYPE {name} gauge"``: the value after a piece ending in ``# TYPE ``."""
        values = node.values
        for before, value, after in zip(values, values[1:], [*values[2:], None], strict=False):
            if (isinstance(before, ast.Constant) and isinstance(before.value, str)
                    and before.value.endswith("# TYPE ")
                    and isinstance(value, ast.FormattedValue)):
                kind = "untyped"
                if isinstance(after, ast.Constant) and isinstance(after.value, str):
                    kind = after.value.strip().split(" ")[0] or kind
                for name in self._strings(value.value, node):
                    self._add(name, kind, node)

    # -- resolution ------------------------------------------------------------------

    def _strings(self, node: ast.expr, at: ast.AST) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.Name):
            return self._name(node.id, at)
        return set()

    def _name(self, name: str, at: ast.AST) -> set[str]:
        for scope in self._enclosing(at):
            if isinstance(scope, ast.For | ast.comprehension):
                index = _position(scope.target, name)
                if index is not None:
                    return {s for item in self._items(scope.iter, scope)
                            for s in self._strings(_element(item, index), scope)}
            if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
                return {s for argument, call in self._arguments(scope, name)
                        for s in self._strings(argument, call)}
        return self._constant(name, at)

    def _constant(self, name: str, at: ast.AST) -> set[str]:
        value = self.constants.get(name)
        return self._strings(value, at) if value is not None else set()

    def _arguments(self, function: ast.FunctionDef | ast.AsyncFunctionDef,
                   name: str) -> list[tuple[ast.expr, ast.AST]]:
        """What the module's calls of ``function`` pass as its parameter ``name`` (with
        the call), or, if ``name`` is no parameter of it, the module constant."""
        params = [a.arg for a in function.args.args]
        if name not in params:
            value = self.constants.get(name)
            return [(value, function)] if value is not None else []
        index = params.index(name)
        return [(call.args[index], call) for call in ast.walk(self.tree)
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == function.name and len(call.args) > index]

    def _items(self, node: ast.expr, at: ast.AST) -> list[ast.expr]:
        """The rows of a table: a literal tuple or list, a module constant, or a function
        parameter the module's calls pass one of those."""
        if isinstance(node, ast.Tuple | ast.List):
            return list(node.elts)
        if isinstance(node, ast.Name):
            for scope in self._enclosing(at):
                if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
                    return [item for argument, call in self._arguments(scope, node.id)
                            for item in self._items(argument, call)]
            if node.id in self.constants:
                return self._items(self.constants[node.id], at)
        return []

    def _enclosing(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp):
                yield from node.generators
            yield node


def _position(target: ast.expr, name: str) -> int | None:
    if isinstance(target, ast.Name):
        return -1 if target.id == name else None
    if isinstance(target, ast.Tuple):
        for i, element in enumerate(target.elts):
            if isinstance(element, ast.Name) and element.id == name:
                return i
    return None


def _element(item: ast.expr, index: int) -> ast.expr:
    if index == -1:
        return item
    if isinstance(item, ast.Tuple) and index < len(item.elts):
        return item.elts[index]
    return ast.Constant(None)


# -- PromQL ------------------------------------------------------------------------------

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(\s*\()?")
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
             "group_right", "bool", "offset", "inf", "nan", "atan2"}
#: What Grafana puts in an expression before sending it (the dashboard's only variables).
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


def grafana_to_promql(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: every identifier outside strings, label
    matchers, ranges and grouping lists that is neither a function, a keyword nor a
    number (durations sit in ranges, which are gone by then)."""
    text = _STRING.sub('""', grafana_to_promql(expr))
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match[1], match[2]
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names
