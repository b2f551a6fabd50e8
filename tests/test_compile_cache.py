"""The engine's compile caches in one folder per engine install: where it is, and the server's
environment that points there, a variable the user set winning (a real server's:
tests/test_vllm_engine.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.engines import ServerProcess
from kit.engines.compile_cache import compile_cache_folder
from kit.engines.flavors import FLAVORS
from kit.params import RunParams


def vllm_params(model: Path, **env: str) -> RunParams:
    engine = {"flavor": "vllm", "python": "/opt/engine/bin/python", "env": env}
    return RunParams.model_validate({"run": "t", "model": {"path": str(model)}, "engine": engine})


def test_one_folder_per_engine_install_under_the_kits_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "kit"))
    old = compile_cache_folder("sglang", "/v/bin/python", "0.5.16@/v/lib/sglang-0.5.16.dist-info")
    new = compile_cache_folder("sglang", "/v/bin/python", "0.5.23@/v/lib/sglang-0.5.23.dist-info")
    other_venv = compile_cache_folder("sglang", "/w/bin/python", "0.5.16@/w/lib/sglang-0.5.16.dist-info")
    assert old.parent == new.parent == tmp_path / "kit" / "compile"
    assert old.name.startswith("sglang-0.5.16-") and new.name.startswith("sglang-0.5.23-")
    assert len({old, new, other_venv}) == 3
    assert old == compile_cache_folder("sglang", "/v/bin/python", "0.5.16@/v/lib/sglang-0.5.16.dist-info")
    monkeypatch.delenv("KIT_CACHE_DIR")
    assert (
        compile_cache_folder("vllm", "/v/bin/python", None).parent
        == Path.home() / ".cache" / "kit" / "compile"
    )


def test_the_servers_environment_points_every_cache_at_the_folder_and_the_user_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in FLAVORS["vllm"].compile_cache_vars:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", "/users/own/triton")
    srv = ServerProcess(vllm_params(tmp_path, VLLM_CACHE_ROOT="/params/vllm"), tmp_path / "logs")
    srv.compile_cache = tmp_path / "compile" / "vllm-0.32.0-abc"
    env = srv.server_environment()
    assert env["TRITON_CACHE_DIR"] == "/users/own/triton"  # the environment's
    assert env["VLLM_CACHE_ROOT"] == "/params/vllm"  # engine.env's
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(srv.compile_cache / "inductor")
    assert env["FLASHINFER_WORKSPACE_BASE"] == str(srv.compile_cache / "flashinfer")
    assert env["CUDA_CACHE_PATH"] == str(srv.compile_cache / "nv")
    note = srv._compile_cache_note()
    assert str(srv.compile_cache) in note and "kept as set: TRITON_CACHE_DIR, VLLM_CACHE_ROOT" in note


def test_sglang_servers_get_its_own_caches_of_both_versions_too() -> None:
    """0.5.16 reads SGLANG_DG_CACHE_DIR and TVM_FFI_CACHE_DIR, 0.5.23 SGLANG_JIT_CACHE_DIR, both
    SGLANG_CACHE_DIR; each in a subfolder of its own."""
    names = FLAVORS["sglang"].compile_cache_vars
    assert {"SGLANG_CACHE_DIR", "SGLANG_DG_CACHE_DIR", "TVM_FFI_CACHE_DIR", "SGLANG_JIT_CACHE_DIR"} <= set(
        names
    )
    assert len(set(names.values())) == len(names)


def test_torchs_own_default_is_not_taken_for_the_users_choice() -> None:
    """torch writes its default Inductor folder into TORCHINDUCTOR_CACHE_DIR of any process that used
    Inductor (a notebook kernel that profiled; CI's test session, 2026-12-07): that value is not the
    user's, and the kit's folder wins over it; a folder the user named is kept."""
    from kit.engines.compile_cache import torch_default_inductor_dir, users_environ

    torch_set = {"TORCHINDUCTOR_CACHE_DIR": torch_default_inductor_dir(), "PATH": "/bin"}
    assert users_environ(torch_set) == {"PATH": "/bin"}
    mine = {"TORCHINDUCTOR_CACHE_DIR": "/data/inductor"}
    assert users_environ(mine) == mine
    import torch._inductor.runtime.cache_dir_utils as torch_cache

    assert torch_default_inductor_dir() == torch_cache.default_cache_dir()
