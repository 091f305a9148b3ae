"""Errors of the Spark bridge: each names what was refused or missing, and why."""

from __future__ import annotations

from ..graph import GraphError

__all__ = ["SparkSetupError", "TranslationError"]


class SparkSetupError(RuntimeError):
    """PySpark, Java or a Spark setting is missing or unusable."""


class TranslationError(GraphError):
    """A construct of the graph has no exact translation onto Spark; nothing was deployed."""

    def __init__(self, operator: str | None, reason: str) -> None:
        super().__init__(operator, "spark", reason)
