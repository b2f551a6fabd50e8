"""The kit's version as people quote it: the package version, and the git commit of a checkout.

version_text()   # "kit 0.1.0 (git 2afc9e7)", "kit 0.1.0 (git 2afc9e7, with uncommitted changes)"
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

from kit import __version__

CHECKOUT = Path(__file__).resolve().parent.parent


@cache
def git_commit() -> str | None:
    """The short commit of the checkout the kit runs from (with a note of uncommitted changes to
    tracked files), or None outside a git checkout (an installed wheel) or without git."""
    if not (CHECKOUT / ".git").exists():
        return None
    try:
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no", "--", "kit")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}, with uncommitted changes" if dirty else head


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True, timeout=10, check=True
    )
    return done.stdout.strip()


def version_text() -> str:
    """`kit <version>`, with `(git <commit>)` when the kit runs from a checkout."""
    commit = git_commit()
    return f"kit {__version__}" + (f" (git {commit})" if commit else "")
