"""The layers keep to their public interfaces: no module imports another package's private names.

A package of riverbed (``riverbed.windows``, ``riverbed.core``, ``riverbed.runtime``...) offers
what its ``__init__`` exports; its underscore modules and names are its own business. A module
may import private modules and names of its own package only. Top-level modules
(``riverbed/run.py``, ``riverbed/cli.py``...) belong to no package: they use public names only.
Imports inside functions (lazy ones) count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "riverbed"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(module: str) -> str:
    """``riverbed.runtime._job`` -> ``riverbed.runtime``; top-level modules -> their own name."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split(".")[1:])


def violations() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        own = None if path.parent == ROOT else _package_of(module)  # top-level: no package
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            targets: list[tuple[str, str]] = []
            if isinstance(node, ast.ImportFrom):
                target = _resolve(module, path.name == "__init__.py", node)
                targets = [(target, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [(alias.name, "") for alias in node.names]
            for target, name in targets:
                if not target.startswith("riverbed"):
                    continue
                if _package_of(target) == own:
                    continue  # inside its own package
                full = f"{target}.{name}" if name else target
                if _private(full if name != "*" else target):
                    found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: "
                                 f"{module} imports {full}")
    return found


def test_no_module_imports_another_packages_private_names() -> None:
    found = violations()
    assert not found, "private names used across packages:\n  " + "\n  ".join(found)
