"""The engine's own environment, examined through child processes of its interpreter.

Nothing here imports an engine or initialises CUDA in the caller: versions come from package
metadata read by the engine's interpreter, and accepted flags from the launcher's `--help`
(cached in the run folder because importing SGLang takes seconds).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from kit.artifacts import Finding
from kit.artifacts.probe_sections import (
    EngineEnvFacts,
    InterpreterFacts,
    LauncherFacts,
    MissingFlag,
    PipCheck,
)
from kit.engines.flavors import FLAVORS, flavor, server_command
from kit.engines.launcher import RENAMED_FLAGS, Launcher, discover, read_help
from kit.probe.findings import finding

PACKAGES = (
    *(d for fl in FLAVORS.values() for d in fl.distributions),
    "torch",
    "flashinfer-python",
    "flashinfer",
    "sgl-kernel",
)
"""Packages whose versions the probe reads: every flavor's distributions, then what they run on."""
MODULES = tuple(sorted({m for fl in FLAVORS.values() for m in fl.speculative_modules}))
"""Modules the probe looks for (`Flavor.speculative_modules`), without importing them."""
FILES = tuple(sorted({(pkg, glob) for fl in FLAVORS.values() for pkg, glob, _ in fl.backend_files.values()}))
"""(package, file glob) pairs the probe looks for (`Flavor.backend_files`), without importing them."""
RENAMES = {a: b for a, b in RENAMED_FLAGS} | {b: a for a, b in RENAMED_FLAGS}
"""Flags renamed between engine versions, both ways: the old name suggests the new and back."""

_FACTS = r"""
import json, sys, importlib.metadata as md, importlib.util
def v(n):
    try:
        return md.version(n)
    except md.PackageNotFoundError:
        return None
def found(m):
    try:
        return importlib.util.find_spec(m) is not None
    except (ImportError, ValueError):
        return False
def has_file(pkg, pattern):
    import glob, os
    try:
        spec = importlib.util.find_spec(pkg)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return any(glob.glob(os.path.join(d, pattern)) for d in spec.submodule_search_locations)
def pins(dist):
    # exact pins without a marker (`name==x`), with what this environment has of each
    out = {}
    for req in md.requires(dist) or []:
        if ";" in req or "==" not in req:
            continue
        name, _, want = req.partition("==")
        name = name.split("[")[0].strip()
        have, want = v(name), want.strip()
        if have is None:
            continue
        bare = have.split("+")[0]  # PEP 440: a pin without a local label matches 2.13.0+cpu
        if not (bare.startswith(want[:-1]) if want.endswith(".*") else bare == want):
            out[name] = [want, have]
    return out
print(json.dumps({"version": sys.version.split()[0], "executable": sys.executable, "prefix": sys.prefix,
                  "base_prefix": sys.base_prefix, "packages": {n: v(n) for n in %r},
                  "modules": {m: found(m) for m in %r},
                  "files": {p + "/" + g: has_file(p, g) for p, g in %r},
                  "pins": {d: pins(d) for d in %r if v(d)}}))
"""
ENGINES = tuple(d for fl in FLAVORS.values() if fl.launcher for d in fl.distributions)
"""The engines whose exact pins the probe compares with what their environment holds."""


def run_quiet(
    cmd: list[str], timeout_s: float, env: dict[str, str] | None = None
) -> tuple[int | None, str, str]:
    """(return code, stdout, stderr); return code None when it could not start or timed out.
    `env`: the whole environment of the child (None: this process's)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {timeout_s:.0f} s: {' '.join(cmd)}"
    except OSError as e:
        return None, "", f"cannot run {cmd[0]}: {e}"


def interpreter_facts(
    python: Path, timeout_s: float = 60, env: dict[str, str] | None = None
) -> InterpreterFacts:
    """Python version, prefix and package versions of `python`, or an `error`."""
    if not Path(python).exists():
        return InterpreterFacts(error=f"{python} does not exist")
    rc, out, err = run_quiet(
        [str(python), "-c", _FACTS % (PACKAGES, MODULES, FILES, ENGINES)], timeout_s, env
    )
    if rc != 0:
        return InterpreterFacts(error=f"{python} does not run: {(err or out).strip()[-300:]}")
    return json.loads(out.strip().splitlines()[-1])


def pip_check(python: Path, timeout_s: float = 60, env: dict[str, str] | None = None) -> PipCheck:
    """Whether `python -m pip --version` works, with its output or the error."""
    rc, out, err = run_quiet([str(python), "-m", "pip", "--version"], timeout_s, env)
    return PipCheck(ok=rc == 0, output=(out if rc == 0 else err or out).strip()[-300:])


def launcher_help(
    python: Path,
    name: str,
    version: str,
    cache_dir: Path | None,
    timeout_s: float = 180,
    env: dict[str, str] | None = None,
) -> LauncherFacts:
    """The launcher's `--help`, read once per interpreter and install, with a copy in `cache_dir`."""
    fl = flavor(name)
    launcher = discover(python, fl, copy_to=cache_dir, env=env)
    if launcher is None:
        _, err = read_help(python, fl, env=env, timeout_s=timeout_s)
        return LauncherFacts(error=err or f"`-m {fl.launcher} --help` could not be read")
    return _launcher_facts(launcher)


def _launcher_facts(launcher: Launcher) -> LauncherFacts:
    """The launcher's flags, and the choices of its parser and backend flags."""
    choices = {k: list(v) for k, v in sorted(launcher.choices.items()) if "parser" in k or "backend" in k}
    return LauncherFacts(
        cached=launcher.help_path,
        flags=sorted(launcher.flags),
        choices=choices,
        from_cache=launcher.from_cache,
    )


def command_flags(command: list[str]) -> list[str]:
    """The `--flags` of a command line, `--flag=value` reduced to `--flag`, in order, without repeats."""
    flags = [tok.split("=", 1)[0] for tok in command if tok.startswith("--")]
    return list(dict.fromkeys(flags))


def missing_flags(flags: list[str], accepted: set[str]) -> list[MissingFlag]:
    """Flags the launcher does not accept, each with the renamed flag it does accept, if known."""
    out = []
    for flag in flags:
        if flag not in accepted:
            alt = RENAMES.get(flag)
            out.append(MissingFlag(flag=flag, use=alt if alt in accepted else None))
    return out


def planned_command(params: Any) -> list[str] | None:
    """The server command of the sweep's longest speculative arm (every flag the kit may pass), or
    None while the builder is not available."""
    try:
        from kit.engines.settings import Arm, arm_engine  # needs pydantic, as `params` does
    except ImportError:
        return None
    try:
        algo = params.engine.speculative.algorithm
        arm = Arm(max(params.decide.spec_steps), algo) if algo else Arm(0)
        planned = params.model_copy(update={"engine": arm_engine(params, arm, hybrid=False)})
        with warnings.catch_warnings():  # the builder's advice is for launch time, not for the probe
            warnings.simplefilter("ignore")
            return server_command(planned, 30000)
    except Exception:  # the builder validates params; its errors surface when the engine starts
        return None


def inspect_engine_env(
    python: Path,
    name: str,
    cache_dir: Path | None,
    planned: list[str] | None = None,
    extra_env: dict[str, str] | None = None,
) -> EngineEnvFacts:
    """Facts about the engine interpreter: version, pip, uv, packages, launcher flags vs the planned ones.

    `extra_env`: the variables the server is started with (the flavor's and `engine.env`, such as a
    PYTHONPATH that holds the engine's packages): the interpreter is read as the server will run."""
    facts = EngineEnvFacts(python=str(python), flavor=name, uv=shutil.which("uv"))
    env = {**os.environ, **extra_env} if extra_env else None
    if extra_env:
        facts["env"] = sorted(extra_env)
    interp = facts["interpreter"] = interpreter_facts(python, env=env)
    if "error" in interp:
        return facts
    facts["pip"] = pip_check(python, env=env)
    version = engine_version(interp["packages"], name)
    if flavor(name).launcher and version:
        launcher = facts["launcher"] = launcher_help(python, name, version, cache_dir, env=env)
        if planned is not None and "--speculative-algorithm" in planned:
            facts["planned_algorithm"] = planned[planned.index("--speculative-algorithm") + 1]
        if planned is not None and "flags" in launcher:
            planned_flags = facts["planned_flags"] = command_flags(planned)
            facts["missing_flags"] = missing_flags(planned_flags, set(launcher["flags"]))
    return facts


def missing_backends(facts: EngineEnvFacts) -> dict[str, str]:
    """Attention backends whose own library the engine's environment lacks: backend -> why. A
    backend whose package is absent altogether is not listed (the engine's install says the rest)."""
    files = (facts.get("interpreter") or {}).get("files") or {}
    out = {}
    for backend, (pkg, glob, dist) in flavor(facts["flavor"]).backend_files.items():
        if files.get(f"{pkg}/{glob}") is False:
            out[backend] = (
                f"{pkg} in {facts['python']}'s environment has no {glob} (a trimmed {dist}): "
                f"{backend} cannot load its kernels"
            )
    return out


def _floor_findings(f: Any, facts: EngineEnvFacts, pkgs: dict[str, str]) -> list[Finding]:
    """A fail when the engine is older than the oldest version the kit works with (`Flavor.min_version`)."""
    fl, version = flavor(facts["flavor"]), engine_version(pkgs, facts["flavor"])
    if fl.min_version is None or version is None:
        return []
    floor, why = fl.min_version
    try:
        old = Version(version) < Version(floor)
    except InvalidVersion:
        return []
    if not old:
        return []
    dist = fl.distributions[0]
    return [
        f(
            "version",
            "fail",
            version,
            f"{fl.title} {version} is older than {floor}, the oldest the kit works with: {why}",
            f"{facts['python']} -m pip install '{dist}>={floor}'",
        )
    ]


def engine_version(packages: dict[str, str | None], name: str) -> str | None:
    """The installed version of the engine of flavor `name`, under any of its distribution names."""
    return next((packages[d] for d in flavor(name).distributions if packages.get(d)), None)


# ---- findings ----------------------------------------------------------------
def engine_findings(facts: EngineEnvFacts) -> list[Finding]:
    """Findings of section `engine_env`."""

    def f(name: str, status: str, value: Any, reason: str, action: str = "") -> Finding:
        return finding("engine_env", name, status, value, reason, action)  # type: ignore[arg-type]

    py, name, interp = facts["python"], facts["flavor"], facts["interpreter"]
    if "error" in interp:
        return [
            f(
                "python",
                "fail",
                py,
                interp["error"],
                "set engine.python to the interpreter of the engine's environment (/opt/sglang/bin/python)",
            )
        ]
    ver = interp["version"]
    old = tuple(int(x) for x in ver.split(".")[:2]) < (3, 10)
    out = [
        f(
            "python",
            "warn" if old else "ok",
            ver,
            f"{py} runs Python {ver}",
            "use Python 3.10 or newer for the engine" if old else "",
        )
    ]
    out.append(_pip_finding(f, facts))
    out.append(
        f("uv", "ok", facts["uv"], f"uv at {facts['uv']}" if facts["uv"] else "uv not on PATH (optional)")
    )
    pkgs = {k: v for k, v in interp["packages"].items() if v}
    engine_pkg = next(iter(flavor(name).distributions), None)
    if engine_pkg and not engine_version(pkgs, name):
        out.append(
            f(
                "packages",
                "fail",
                pkgs,
                f"{engine_pkg} is not installed in {py}",
                f"{py} -m pip install '{engine_pkg}' (or uv pip install --python {py} {engine_pkg})",
            )
        )
    else:
        out.append(f("packages", "ok", pkgs, ", ".join(f"{k} {v}" for k, v in pkgs.items()) or "none"))
        out.extend(_floor_findings(f, facts, pkgs))
    out.extend(_launcher_findings(f, facts))
    out.extend(_speculative_module_findings(f, facts))
    out.extend(_pin_findings(f, facts))
    return out


def _pin_findings(f: Any, facts: EngineEnvFacts) -> list[Finding]:
    """An engine's exact pins that its environment does not hold (another version installed): it may
    start and still fail later in what imports the pinned package. Seen on the H200: SGLang 0.5.16
    (transformers==5.12.1) on transformers 5.17 could not serve any Qwen-VL-family model, Qwen3.5 /
    3.6 included, because a processor module's import of a class 5.17 dropped failed."""
    out = []
    for dist, off in (facts["interpreter"].get("pins") or {}).items():
        if not off:
            continue
        listed = ", ".join(f"{n}=={want} (has {have})" for n, (want, have) in sorted(off.items()))
        out.append(
            f(
                f"pins of {dist}",
                "warn",
                off,
                f"{dist} pins {listed}: a module of the engine that imports one of these may fail at start "
                "or at first use (SGLang 0.5.16 on transformers 5.17 lost every Qwen-VL-family model)",
                f"install the pinned versions in the engine's environment ({facts['python']} -m pip install "
                + " ".join(f"'{n}=={want}'" for n, (want, _) in sorted(off.items()))
                + "), or an engine release pinned to what is there",
            )
        )
    return out


def _speculative_module_findings(f: Any, facts: EngineEnvFacts) -> list[Finding]:
    """A module the planned speculative algorithm imports at start, absent from the engine's
    environment: every speculative arm would fail to start (plain decoding is unaffected)."""
    algo = facts.get("planned_algorithm")
    found = facts["interpreter"].get("modules") or {}
    out = []
    for module, (dist, algorithms) in flavor(facts["flavor"]).speculative_modules.items():
        if algo in algorithms and found.get(module) is False:
            out.append(
                f(
                    f"module {module}",
                    "warn",
                    None,
                    f"{flavor(facts['flavor']).title} imports {module} when {algo} starts, and "
                    f"{facts['python']} cannot import it: every {algo} arm would fail to start",
                    f"install {dist} in the engine's environment at its pin ({facts['python']} -m pip "
                    f"install {dist}, or add its wheel to the engine's PYTHONPATH)",
                )
            )
    return out


def _pip_finding(f: Any, facts: EngineEnvFacts) -> Finding:
    pip, py = facts["pip"], facts["python"]
    if pip["ok"]:
        return f("pip", "ok", pip["output"], pip["output"])
    fix = f"run `{py} -m ensurepip --upgrade`, or install with `uv pip install --python {py} ...`"
    return f(
        "pip",
        "warn",
        pip["output"],
        "`python -m pip` fails in the engine environment (a venv made with "
        "--without-pip or by `uv venv`): installing into it with pip will not work",
        fix,
    )


def _launcher_findings(f: Any, facts: EngineEnvFacts) -> list[Finding]:
    launcher = facts.get("launcher")
    if launcher is None:
        return []
    if "error" in launcher:
        return [
            f(
                "launcher",
                "warn",
                None,
                launcher["error"],
                "run the launcher's --help by hand in the engine environment and fix its import error",
            )
        ]
    src = "cached" if launcher["from_cache"] else "read"
    out = [f("launcher", "ok", launcher["cached"], f"{len(launcher['flags'])} flags {src} from --help")]
    if "missing_flags" not in facts:
        out.append(
            f(
                "planned_flags",
                "warn",
                None,
                "the kit's server command could not be built to compare flags",
                "check engine params (kit.engines.flavors.server_command) before launching",
            )
        )
    for m in facts.get("missing_flags", []):
        hint = f"; this version accepts {m['use']}" if m["use"] else ""
        out.append(
            f(
                f"flag {m['flag']}",
                "warn",
                m,
                f"the launcher does not accept {m['flag']}{hint}",
                f"use {m['use']} instead" if m["use"] else "drop the flag or upgrade the engine",
            )
        )
    return out
