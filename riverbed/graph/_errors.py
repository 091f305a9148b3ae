"""Errors of graph construction and validation."""

from __future__ import annotations

__all__ = ["GraphError", "GraphValidationError", "SchemaError"]


class SchemaError(ValueError):
    """A schema declaration is invalid (unknown type, bad attribute name)."""


class GraphError(ValueError):
    """One rule a graph breaks, naming the operator (and port) it concerns.

    ``operator`` is the operator's name, ``rule`` a short identifier of the
    rule (``partition-key``, ``unknown-attribute``, ``cycle``...) so tools and
    tests can tell errors apart without parsing the message.
    """

    def __init__(self, operator: str | None, rule: str, message: str) -> None:
        self.operator = operator
        self.rule = rule
        self.message = message
        where = f"operator {operator!r}: " if operator else ""
        super().__init__(f"{where}{message} [{rule}]")


class GraphValidationError(ValueError):
    """A graph breaks one or more rules; ``errors`` lists every one found."""

    def __init__(self, graph: str, errors: list[GraphError]) -> None:
        self.graph = graph
        self.errors = errors
        lines = "\n".join(f"  - {e}" for e in errors)
        super().__init__(f"graph {graph!r} is invalid ({len(errors)} "
                         f"error{'s' if len(errors) != 1 else ''}):\n{lines}")
