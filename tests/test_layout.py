"""The package's shape, read from its source with `ast`: stages import only earlier stages, shared
modules import no stage, and no two modules import each other (directly or round a circle)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent / "kit"
STAGES = ("probe", "decide", "generate", "analyse")
"""Stage packages in pipeline order: each may import the ones before it, never one after it."""
WIRING = {"kit.cli", "kit.stages", "kit.notebooks", "kit.report", "kit.index_page"}
"""Modules above every stage: they call the stages (or read what all of them wrote)."""


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} (line {self.line}) imports {self.target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(KIT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def kit_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(KIT.rglob("*.py"))}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import of a kit module in `path`, at module level or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("kit"):
            # `from kit.decide import costmodel`: the submodule; `from kit.decide import decide`: the package
            targets = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                for a in node.names
            ]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.split(".")[0] == "kit"]
        found += [Import(name, t, node.lineno) for t in targets if t != name]
    return found


def all_imports() -> list[Import]:
    modules = kit_modules()
    return [imp for name, path in modules.items() for imp in imports_of(name, path, modules)]


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def test_no_stage_imports_a_later_stage() -> None:
    wrong = [
        str(i)
        for i in all_imports()
        if stage_of(i.source)
        and stage_of(i.target)
        and STAGES.index(stage_of(i.target)) > STAGES.index(stage_of(i.source))
    ]
    assert not wrong, "a stage imports a later stage:\n" + "\n".join(wrong)


def test_shared_modules_import_no_stage() -> None:
    wrong = [
        str(i)
        for i in all_imports()
        if stage_of(i.source) is None and i.source not in WIRING and stage_of(i.target)
    ]
    assert not wrong, "a module shared by the stages imports a stage:\n" + "\n".join(wrong)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle() -> None:
    edges: dict[str, set[str]] = {}
    for i in all_imports():
        edges.setdefault(i.source, set()).add(i.target)
    assert not cycles(edges), f"modules that import each other: {cycles(edges)}"


def test_the_checks_see_a_violation() -> None:
    """The walker finds what it looks for: a later stage, and a circle of two."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    modules = kit_modules()
    assert "kit.generate.run" in modules and "kit.decide.stage" in modules
    probe_imports = {i.target for i in imports_of("kit.stages", modules["kit.stages"], modules)}
    assert {"kit.probe", "kit.generate"} <= probe_imports
