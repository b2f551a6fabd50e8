"""The engine's compile caches in one folder: every server the kit starts (stage 2's sweep servers,
stage 3's) gets its first-use compiles (FlashInfer JIT, torch.compile / Inductor, Triton, the
engine's own) written to, and read back from, one folder per engine install, so only the first
start on a machine pays them and the folder can be named, kept, carried or removed as one.

    folder = compile_cache_folder("sglang", python, "0.5.16@/.../sglang-0.5.16.dist-info")
    env = compile_cache_env(flavor, folder)   # {"TRITON_CACHE_DIR": ".../triton", ...}

The folder is `$KIT_CACHE_DIR/compile/<flavor>-<version>-<key>` (KIT_CACHE_DIR defaults to
~/.cache/kit), the key a hash of the interpreter and the install, so two engine versions never share
one. Which variables each flavor points there is its `Flavor.compile_cache_vars`, with the file of each
library that reads them. A variable already set, in the kit's environment or in `engine.env`, is left
as the user set it (`kit.engines.process.ServerProcess` adds these under both).
"""

from __future__ import annotations

import getpass
import hashlib
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

CACHE_ROOT_ENV = "KIT_CACHE_DIR"
"""Where the kit keeps what it caches per machine (launcher help, compile caches)."""

TORCH_CACHE_VARS: dict[str, str] = {
    # torch 2.13, torch/_inductor/runtime/cache_dir_utils.py:15 `cache_dir()` (else
    # $TMPDIR/torchinductor_<user>); Inductor's own Triton kernels go under it unless TRITON_CACHE_DIR
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    # triton 3.9, triton/knobs.py:349 `cache_knobs.dir` (else $TRITON_HOME/.triton/cache, TRITON_HOME ~)
    "TRITON_CACHE_DIR": "triton",
}
"""Compile caches of any server that runs torch: variable -> subfolder of the compile-cache folder."""

CUDA_CACHE_VARS: dict[str, str] = {
    # the CUDA driver's cache of PTX compiled for this GPU (CUDA programming guide, "CUDA Environment
    # Variables"; else ~/.nv/ComputeCache); SGLang 0.5.23 moves it itself, sglang/srt/environ.py:2313
    "CUDA_CACHE_PATH": "nv",
    # flashinfer 0.6.14, flashinfer/jit/env.py:52: the JIT workspace is this base + /.cache/flashinfer
    # (kernels built, cubins downloaded); else ~. Read when flashinfer is imported.
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
}
"""Compile caches of a server on NVIDIA GPUs with FlashInfer kernels (SGLang, vLLM)."""


def kit_cache_root() -> Path:
    """The kit's cache folder on this machine: $KIT_CACHE_DIR, else ~/.cache/kit."""
    return Path(os.environ.get(CACHE_ROOT_ENV) or Path.home() / ".cache" / "kit")


def install_key(python: str | Path, installed: str) -> str:
    """A short key of one engine install: its interpreter and `version@dist-info path`."""
    return hashlib.sha256(f"{Path(python).absolute()}|{installed}".encode()).hexdigest()[:12]


def compile_cache_folder(flavor_name: str, python: str | Path, installed: str | None) -> Path:
    """The compile-cache folder of one engine install (`installed`: `version@dist-info path` as
    kit.engines.launcher reads it; None when unknown, then keyed by the interpreter alone)."""
    version = (installed or "unknown").split("@")[0]
    return kit_cache_root() / "compile" / f"{flavor_name}-{version}-{install_key(python, installed or '')}"


def compile_cache_env(variables: Mapping[str, str], folder: Path) -> dict[str, str]:
    """Each compile-cache variable (variable -> subfolder) pointed at its subfolder of `folder`."""
    return {name: str(folder / sub) for name, sub in variables.items()}


def torch_default_inductor_dir() -> str:
    """Where torch's Inductor caches when TORCHINDUCTOR_CACHE_DIR is unset (torch 2.13,
    torch/_inductor/runtime/cache_dir_utils.py `default_cache_dir`: $TMPDIR/torchinductor_<user>)."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def users_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` as the user set it: torch writes its own default into TORCHINDUCTOR_CACHE_DIR of any
    process that used Inductor (`cache_dir()` sets os.environ: a notebook kernel that profiled, a
    test session), which would otherwise pass for the user's choice and keep every server the kit
    starts from there out of the kit's folder (CI, 2026-12-07)."""
    env = dict(environ)
    if env.get("TORCHINDUCTOR_CACHE_DIR") == torch_default_inductor_dir():
        del env["TORCHINDUCTOR_CACHE_DIR"]
    return env


def kept_by_user(variables: Mapping[str, str], *given: Mapping[str, str]) -> list[str]:
    """The compile-cache variables that one of `given` (the environment, engine.env) already sets:
    the server keeps the user's value for these."""
    return [name for name in variables if any(name in g for g in given)]
