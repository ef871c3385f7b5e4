"""Imports run one way: outbound (plain Python, settings only), then accounts, then tasks_app,
then push, then the protocol edge, then the project package. Read from the source (every
import statement, function-level ones too) and followed to any depth, so a late import cannot
hide a cycle."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = [
    "outbound",
    "accounts",
    "tasks_app",
    "push",
    "protocols",
    "groups",
    "registry",
    "tenant_api",
    "ops",
    "agentserver",
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for layer in LAYERS for p in (ROOT / layer).rglob("*.py")}


def _resolve(name: str) -> str | None:
    """The project module an imported name lives in (`a.b.c` may be module `a.b`'s attribute c)."""
    while name:
        if name in _modules():
            return name
        name = name.rpartition(".")[0]
    return None


@cache
def _direct_imports(module: str) -> frozenset[str]:
    path = _modules()[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from . import codec` imports the module codec, not its package again: a name that
            # is no module resolves to the module it is an attribute of (`_resolve`).
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(m for m in map(_resolve, names) if m and m != module)
    return frozenset(found)


def _reachable(module: str) -> dict[str, str]:
    """Every project module `module` imports at any depth, each with the chain that gets there."""
    chains, todo = {module: module}, [module]
    while todo:
        current = todo.pop()
        for imported in _direct_imports(current):
            if imported not in chains:
                chains[imported] = f"{chains[current]} -> {imported}"
                todo.append(imported)
    return chains


@pytest.mark.parametrize("layer", LAYERS[:-1])
def test_no_module_imports_a_layer_above_its_own(layer):
    above = tuple(LAYERS[LAYERS.index(layer) + 1 :])
    upward = [
        chain
        for module in sorted(_modules())
        if module.split(".")[0] == layer
        for reached, chain in _reachable(module).items()
        if reached.split(".")[0] in above
    ]
    assert not upward, "imports that run upward:\n" + "\n".join(upward[:20])


def test_the_check_sees_function_level_and_relative_imports():
    # The reading itself: a late relative import inside a function is an import like any other.
    assert "tasks_app.tasks" in _direct_imports("tasks_app.apps")
    assert "protocols.dialects" in _direct_imports("protocols.apps")
    assert "protocols.exchange" in _direct_imports("protocols.dialects.base")


def test_no_two_modules_of_one_package_import_each_other():
    # Two modules that need each other are one concern split badly (or two concerns tangled):
    # one of them imports late to dodge the circle, and a newcomer cannot tell which one leads.
    both_ways = sorted(
        f"{module} <-> {other}"
        for module in _modules()
        for other in _direct_imports(module)
        if module < other and module in _direct_imports(other)
    )
    assert not both_ways, "modules that import each other:\n" + "\n".join(both_ways)


def test_the_two_way_check_reads_a_late_import_of_a_sibling():
    assert "protocols.cards" in _direct_imports("protocols.views")
    # `from . import codec` in a dialect's methods is the module codec, not the dialect's package.
    assert "protocols.dialects.a2a_v1" not in _direct_imports("protocols.dialects.a2a_v1.methods")
    assert "protocols.dialects.a2a_v1.codec" in _direct_imports("protocols.dialects.a2a_v1.methods")
