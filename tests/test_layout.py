"""The package's shape, read from its source with `ast`: stages import only earlier stages, shared
modules import no stage, no two modules import each other (directly or round a circle), stage 2's
subpackages import only the floors below them and stay small, and no module outside kit/engines/
compares an engine flavor's name (it asks the flavor object)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent / "kit"
STAGES = ("probe", "decide", "generate", "analyse", "export")
"""Stage packages in pipeline order (export: after the run, kit export): each may import the ones
before it, never one after it."""
WIRING = {"kit.cli", "kit.stages", "kit.notebooks", "kit.report", "kit.index_page"}
"""Modules above every stage: they call the stages (or read what all of them wrote)."""


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    typing_only: bool = False
    """Under `if TYPE_CHECKING:`: names types for annotations, never runs."""

    def __str__(self) -> str:
        return f"{self.source} (line {self.line}) imports {self.target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(KIT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def kit_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(KIT.rglob("*.py"))}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import of a kit module in `path`, at module level or inside a function."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("kit"):
            # `from kit.decide import costmodel`: the submodule; `from kit.decide import decide`: the package
            targets = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                for a in node.names
            ]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.split(".")[0] == "kit"]
        found += [Import(name, t, node.lineno, id(node) in typing_only) for t in targets if t != name]
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


def test_runtime_imports_no_demo_module() -> None:
    """kit/demo/ (the demo model, fixture data, the test tokenizer) is reached only from the wiring that
    builds the demo assets (kit.cli, kit.stages); the stages and shared modules run without it."""
    wrong = [
        str(i)
        for i in all_imports()
        if i.target.startswith("kit.demo") and not i.source.startswith("kit.demo") and i.source not in WIRING
    ]
    assert not wrong, "runtime code imports kit.demo:\n" + "\n".join(wrong)


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
    """A type-only import (under `if TYPE_CHECKING:`) counts too: it never runs, so a circle through
    one would load, but a reader (and a type checker) still meets the two modules needing each other.
    (kit.params reads the flavors' names from kit/engines/flavor_names.py, not the flavor registry,
    whose modules name kit.params' types in their annotations.)"""
    edges: dict[str, set[str]] = {}
    for i in all_imports():
        edges.setdefault(i.source, set()).add(i.target)
    assert not cycles(edges), f"modules that import each other: {cycles(edges)}"


def test_the_checks_see_a_violation() -> None:
    """The walker finds what it looks for: a later stage, and a circle of two."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    modules = kit_modules()
    assert "kit.generate.run" in modules and "kit.decide.views.notebook" in modules
    probe_imports = {i.target for i in imports_of("kit.stages", modules["kit.stages"], modules)}
    assert {"kit.probe", "kit.generate.run"} <= probe_imports


# ---- stage 2's floors -------------------------------------------------------------------------
DECIDE = KIT / "decide"
DECIDE_FLOORS: dict[str, set[str]] = {
    "costmodel": set(),
    "machine": set(),
    "profile": {"costmodel"},
    "measure": {"machine"},
    "choose": {"measure", "costmodel", "profile"},
    "checks": {"choose", "measure", "sweep"},
    "forecast": {"choose", "measure"},
    "sweep": {"measure", "forecast", "choose", "costmodel"},
    "views": {"choose", "costmodel"},
}
"""What each subpackage of kit/decide/ imports of the others (its __init__ says the same): all on
floors below it. The stage's entry, kit/decide/run.py, stands above them all and may import any."""
MOST_DECIDE_IMPORTS = 6
"""The most modules of kit.decide one of its modules imports (a package counts as one)."""
OVER_THE_LIMIT: dict[str, int] = {}
"""Modules allowed above MOST_DECIDE_IMPORTS, each with the ceiling it may only fall below (none
since the stage's set-up became one typed record handed down, issue 59 item 2)."""
MOST_FLAT = 3
MOST_IN_A_FOLDER = 9


def decide_part(module: str) -> str | None:
    """The subpackage of kit.decide a module lies in (kit.decide.sweep.sweep: measure); None for the
    stage's entry and its package (kit.decide.run, kit.decide) and for modules outside the stage."""
    parts = module.split(".")
    if parts[:2] != ["kit", "decide"] or len(parts) < 3:
        return None
    return parts[2] if (DECIDE / parts[2]).is_dir() else None


def test_decide_subpackages_import_downward() -> None:
    """measure/ never imports choose/, choose/ never views/, ...: each subpackage imports only the
    floors DECIDE_FLOORS lists for it, none imports the stage's entry, and the floors form no circle."""
    folders = {p.parent.name for p in DECIDE.glob("*/__init__.py")}
    assert folders == set(DECIDE_FLOORS), f"subpackages without a floor: {folders ^ set(DECIDE_FLOORS)}"
    assert not cycles(DECIDE_FLOORS)
    wrong = []
    for i in all_imports():
        mine, theirs = decide_part(i.source), decide_part(i.target)
        if mine and i.target in ("kit.decide", "kit.decide.run"):
            wrong.append(str(i))
        elif mine and theirs and mine != theirs and theirs not in DECIDE_FLOORS[mine]:
            wrong.append(f"{i} ({mine}/ may import {sorted(DECIDE_FLOORS[mine]) or 'nothing of kit.decide'})")
    assert not wrong, "a subpackage of kit/decide/ imports upward or sideways:\n" + "\n".join(wrong)


def decide_imports() -> dict[str, set[str]]:
    """Each module of kit.decide -> the modules of kit.decide it imports (a package's face, an
    __init__ that hands on its own modules' names, as costmodel/'s does, is left out)."""
    modules = kit_modules()
    found: dict[str, set[str]] = {}
    for i in all_imports():
        if i.source.startswith("kit.decide") and i.target.startswith("kit.decide"):
            found.setdefault(i.source, set()).add(i.target)
    faces = {m for m, p in modules.items() if p.name == "__init__.py"}
    return {
        m: targets
        for m, targets in found.items()
        if not (m in faces and all(t.startswith(m + ".") for t in targets))
    }


def test_no_decide_module_imports_more_than_six_of_its_own() -> None:
    counts = {m: len(t) for m, t in decide_imports().items()}
    over = {m: n for m, n in counts.items() if n > OVER_THE_LIMIT.get(m, MOST_DECIDE_IMPORTS)}
    assert not over, f"modules of kit.decide importing more than {MOST_DECIDE_IMPORTS} of its modules: {over}"
    within = [m for m in OVER_THE_LIMIT if counts.get(m, 0) <= MOST_DECIDE_IMPORTS]
    assert not within, f"strike from OVER_THE_LIMIT, now within the limit: {within}"


def test_decide_folders_stay_small() -> None:
    """At most three modules lie flat in kit/decide/ (the stage's entry and little else), at most nine
    in any of its folders (each folder one concept a reader takes in at once)."""
    flat = sorted(p.name for p in DECIDE.glob("*.py") if p.name != "__init__.py")
    assert len(flat) <= MOST_FLAT, f"flat in kit/decide/: {flat}"
    crowded = {
        str(folder.relative_to(KIT)): n
        for folder in sorted({p.parent for p in DECIDE.rglob("__init__.py")} - {DECIDE})
        if (n := sum(1 for p in folder.glob("*.py") if p.name != "__init__.py")) > MOST_IN_A_FOLDER
    }
    assert not crowded, f"folders of kit/decide/ holding more than {MOST_IN_A_FOLDER} modules: {crowded}"


def test_the_floor_check_sees_an_upward_import() -> None:
    assert (
        decide_part("kit.decide.sweep.sweep") == "sweep"
        and decide_part("kit.decide.measure.level") == "measure"
    )
    assert decide_part("kit.decide.run") is None and decide_part("kit.decide") is None
    assert decide_part("kit.generate.run") is None
    assert "choose" not in DECIDE_FLOORS["measure"] and "kit.decide.costmodel" not in decide_imports()


# ---- one home per engine flavor ----------------------------------------------------------------
def flavor_compares(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines of comparisons (==, !=, in, not in) with a flavor's name as a literal on either side,
    alone or in a tuple, list or set (as benchmarks/house_metrics.py counts them)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        literals = []
        for side in (node.left, *node.comparators):
            if isinstance(side, ast.Constant):
                literals.append(side.value)
            elif isinstance(side, (ast.Tuple, ast.List, ast.Set)):
                literals += [e.value for e in side.elts if isinstance(e, ast.Constant)]
        if any(isinstance(v, str) and v in names for v in literals):
            lines.append(node.lineno)
    return lines


def test_no_flavor_name_is_compared_outside_the_engines() -> None:
    """What is true of an engine lives in its module under kit/engines/flavors/; elsewhere the kit
    asks the flavor (`flavor(name).started`, `.can_speculate`, ...), never `flavor == "vllm"`."""
    from kit.engines.flavors import FLAVORS

    wrong = [
        f"{name} line {line}"
        for name, path in kit_modules().items()
        if not name.startswith("kit.engines")
        for line in flavor_compares(ast.parse(path.read_text(), str(path)), set(FLAVORS))
    ]
    assert not wrong, "flavor names compared outside kit/engines/:\n" + "\n".join(wrong)


def test_the_flavor_check_sees_a_comparison() -> None:
    names = {"vllm", "sglang"}
    code = 'a = x == "vllm"\nb = f in ("sglang", "other")\nc = x == "tgi"\nd = {"vllm": 1}\ne = "vllm" != y\n'
    assert flavor_compares(ast.parse(code), names) == [1, 2, 5]


# ---- one owner for the run folder's paths ----------------------------------------------------
PATH_CALLS = {"glob", "rglob", "with_name", "joinpath", "with_suffix"}
NAME_PARTS = (
    "part-",
    "manifest-",
    "metrics-",
    ".generate",
    "params.",
    ".crc32",
    ".unreadable",
    ".ipynb",
    ".html",
)
"""Pieces of the names RunFolder makes from a tag, a number or a stem (part-s0of2-00001.parquet, ...)."""
NOT_RUN_FOLDER = {
    ("kit.notebooks", "notebooks"): "the repository's stage notebooks, which papermill executes",
    ("kit.notebooks", "*.ipynb"): "the same",
    ("kit.analyse.health", "metrics.parquet"): "a label in summary.json: where the timeline came from",
}
"""Literals that look like run-folder names but are not paths into a run folder."""


def artifact_names() -> tuple[set[str], set[str]]:
    """(file names, folder names) that RunFolder gives a run's artifacts, read off an instance."""
    from kit.runfolder import RunFolder

    folder = RunFolder(Path("run"))
    paths = [getattr(folder, a) for a in dir(RunFolder) if isinstance(getattr(RunFolder, a), property)]
    paths += [folder.shards.corrupt, folder.shards.duplicate, folder.shard(0, 2).manifest]
    paths = [p for p in paths if isinstance(p, Path)]
    return {p.name for p in paths if "." in p.name}, {p.name for p in paths if "." not in p.name}


def literal_text(node: ast.AST) -> str | None:
    """The literal characters of a string or f-string node (an f-string's fields as '*')."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values)
    return None


def docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            found.add(id(body[0].value))
    return found


def path_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """String literals used as a path: after `/`, or passed to glob / with_name / joinpath."""
    found = []
    for node in ast.walk(tree):
        parts: list[ast.AST] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [node.right]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in PATH_CALLS
        ):
            parts = list(node.args)
        found += [(node.lineno, t) for t in map(literal_text, parts) if t is not None]
    return found


def test_run_folder_paths_come_from_runfolder() -> None:
    """No module but kit/runfolder.py names an artifact of the run folder: each is a RunFolder property."""
    files, folders = artifact_names()
    wrong = []
    for name, path in kit_modules().items():
        if name == "kit.runfolder":
            continue
        tree = ast.parse(path.read_text(), str(path))
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in files and id(node) not in skip:
                if (name, node.value) not in NOT_RUN_FOLDER:
                    wrong.append(f"{name} line {node.lineno}: {node.value!r}")
        for line, text in path_literals(tree):
            if (name, text) in NOT_RUN_FOLDER:
                continue
            if text in files | folders or any(piece in text for piece in NAME_PARTS):
                wrong.append(f"{name} line {line}: path {text!r}")
    assert not wrong, "run-folder paths named outside kit/runfolder.py:\n" + "\n".join(wrong)
    assert {"probe.json", "prompts.hash", "_run.json", "step_profile.parquet", "manifest-s0of2.json"} <= files
    assert {"archive", "corrupt", "report", "generations"} <= folders
