"""The README is a map and docs/ has an index: the README stays short, docs/README.md names every
page under docs/, and every `docs/...` path the README and the reference pages name exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README_LINES, LINE_CHARS = 200, 300
PATH = re.compile(r"docs/[A-Za-z0-9_./*-]+")
ELSEWHERE = {"docs/references/deepseek.md"}
"""Paths of other projects' docs the pages cite (sgl-project/sglang's)."""


def test_the_readme_is_a_map_not_a_log() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines: move detail to docs/"
    long = [i + 1 for i, line in enumerate(lines) if len(line) > LINE_CHARS]
    assert not long, f"README.md lines over {LINE_CHARS} characters: {long}"
    assert not re.search(r"\b[0-9a-f]{7,40}\b.*UTC|load average", "\n".join(lines)), (
        "commit hashes, UTC times and load figures go to docs/lab/"
    )


def unindexed(index: str, pages: list[Path]) -> list[str]:
    """The pages under docs/ that the index names neither by path nor by a `*` pattern."""
    named = [
        re.compile(re.escape(p).replace(r"\*", "[^/]*") + "$") for p in re.findall(r"`([^`]+\.md)`", index)
    ]
    rel = [str(p.relative_to(DOCS)) for p in pages if p.name != "README.md" or p.parent != DOCS]
    return [r for r in rel if not any(n.match(r) for n in named)]


def test_docs_readme_indexes_every_page() -> None:
    pages = sorted(DOCS.rglob("*.md"))
    missing = unindexed((DOCS / "README.md").read_text(), pages)
    assert not missing, f"docs/README.md does not name: {missing}"
    assert unindexed("- `a.md`: a page", [DOCS / "a.md", DOCS / "lab" / "b.md"]) == ["lab/b.md"]


def test_the_paths_the_readme_and_reference_pages_name_exist() -> None:
    gone = []
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for path in PATH.findall(page.read_text()):
            path = path.rstrip(".")
            if "*" in path or path.endswith("-") or path in ELSEWHERE or (ROOT / path).exists():
                continue
            gone.append(f"{page.relative_to(ROOT)}: {path}")
    assert not gone, "paths that are not in the repository:\n" + "\n".join(gone)
