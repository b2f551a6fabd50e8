"""The package's shape in numbers, read from its source with `ast` (issue 24's before/after).

    .venv/bin/python benchmarks/house_metrics.py [--root kit]

Files and lines, the largest file and function, `dict[str, Any]` annotations, `(x.get(..) or
{}).get(..)` chains, imports inside functions, and engine flavor names compared outside
`kit/engines/`.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

FLAVORS = ("sglang", "vllm", "transformers", "external")
CHAIN = re.compile(r"\.get\([^()]*\)\s+or\s+\{\}\)\.get\(")


def _flavor_compares(tree: ast.AST) -> int:
    """Comparisons (==, !=, in) with a flavor's name as a string literal on either side."""
    n = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        literals = []
        for side in sides:
            if isinstance(side, ast.Constant):
                literals.append(side.value)
            elif isinstance(side, (ast.Tuple, ast.List, ast.Set)):
                literals += [e.value for e in side.elts if isinstance(e, ast.Constant)]
        n += any(v in FLAVORS for v in literals)
    return n


def measure(root: Path) -> dict[str, object]:
    files = sorted(root.rglob("*.py"))
    lines = {p: len(p.read_text().splitlines()) for p in files}
    biggest_fn, inner_imports, dict_any, chains, flavor = ("", 0), 0, 0, 0, 0
    for p in files:
        text = p.read_text()
        tree = ast.parse(text)
        dict_any += text.count("dict[str, Any]")
        chains += len(CHAIN.findall(text))
        if "engines" not in p.relative_to(root).parts:
            flavor += _flavor_compares(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > biggest_fn[1]:
                    biggest_fn = (f"{p.relative_to(root.parent)}:{node.name}", size)
                inner_imports += sum(
                    isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(node) if n is not node
                )
    largest = max(lines, key=lines.get)
    return {
        "files": len(files),
        "lines": sum(lines.values()),
        "largest_file": f"{largest.relative_to(root.parent)} ({lines[largest]} lines)",
        "largest_function": f"{biggest_fn[0]} ({biggest_fn[1]} lines)",
        "files_over_300_lines": sum(n > 300 for n in lines.values()),
        "dict_str_any": dict_any,
        "get_or_empty_chains": chains,
        "imports_in_functions": inner_imports,
        "flavor_names_compared_outside_engines": flavor,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent / "kit"))
    for key, value in measure(Path(ap.parse_args().root)).items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
