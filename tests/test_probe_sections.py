"""probe.json's typed sections (kit.artifacts.probe_sections): the builders that spell a section's
keys out one by one write every field of what they describe, in the order the files always had,
and a probe.json reads back to the same JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from conftest import REPO

from kit.arch import arch_from_config
from kit.artifacts import ProbeReport
from kit.artifacts.probe_memory import FIGURES, MemoryPlan, MemorySection
from kit.artifacts.probe_sections import DatasheetEntry, GpuDevice, InputsSection
from kit.memoryplan import memory_plan
from kit.probe.checks import ProbeInputs
from kit.probe.gpu import GpuFacts, lookup_datasheet

CONFIGS = Path(__file__).parent / "configs"


def declared(typed_dict: Any) -> set[str]:
    return set(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


def test_inputs_section_is_every_field_of_probe_inputs_in_order() -> None:
    inp = ProbeInputs(model_path=Path("/m"), output_dir=Path("/o"), cache_dir=Path("/o/logs"), run="r")
    written = inp.to_json()
    assert list(written) == [f.name for f in fields(ProbeInputs)] and set(written) == declared(InputsSection)
    assert written["model_path"] == "/m" and written["cache_dir"] == "/o/logs"
    assert ProbeInputs(model_path=Path("/m"), output_dir=Path("/o")).to_json()["cache_dir"] is None


def test_gpu_device_is_every_field_of_gpu_facts_in_order() -> None:
    g = GpuFacts(name="NVIDIA H200", arch="sm_90", memory_total_bytes=1, sm_count=132)
    assert g.to_dict() == asdict(g) and list(g.to_dict()) == [f.name for f in fields(GpuFacts)]
    assert set(g.to_dict()) == declared(GpuDevice) and GpuFacts.from_dict(g.to_dict()) == g


def test_memory_section_is_the_plan_fields_then_its_figures_then_the_weight_source() -> None:
    """probe.json's `memory` is the plan itself (kit.artifacts.probe_memory, declared once): its
    inputs, its derived figures, `weight_source`, in the order the files always had; the same JSON
    the kit wrote when the section re-declared the plan's fields (docs/lab/h200/probe.json)."""
    arch = arch_from_config(json.loads((CONFIGS / "qwen3_6_27b.json").read_text()))
    plan = memory_plan(arch, 143771 * 2**20, 0.85, 4096, weight_bytes=55_600_000_000)
    inputs = [f.name for f in fields(MemoryPlan) if f.init and f.name != "extra"]
    written = MemorySection.of(plan, "safetensors headers").to_json()
    assert list(written) == [*inputs, *FIGURES, "weight_source"]
    assert written["max_seqs_plain"] == plan.max_seqs_plain == 171
    assert written["budget_bytes"] == plan.budget_bytes
    assert plan.to_dict() == {k: v for k, v in written.items() if k != "weight_source"}
    lab = json.loads((REPO / "docs/lab/h200/probe.json").read_text())["memory"]
    section = MemorySection.from_json(lab)
    rebuilt = MemorySection.of(MemoryPlan(**{k: lab[k] for k in inputs}), lab["weight_source"])
    assert json.dumps(rebuilt.to_json()) == json.dumps(section.to_json()) == json.dumps(lab)
    assert section["max_seqs_spec"] == lab["max_seqs_spec"] and section.max_seqs_spec == lab["max_seqs_spec"]


def test_datasheet_entry_keys() -> None:
    entry = lookup_datasheet("NVIDIA H200")
    assert entry is not None and set(entry) <= declared(DatasheetEntry)
    assert entry["bandwidth_bytes_s"] == entry["bandwidth_tbs"] * 1e12


def test_a_probe_json_reads_back_as_it_was_written() -> None:
    data = {
        "version": 1,
        "model": {"path": "/m", "exists": False, "a later kit's key": 1},
        "engine_env": {"flavor": "external"},
        "gpus": {"devices": [{"name": "NVIDIA H200", "memory_total_bytes": 7}], "torch": None},
        "host": {"ram_total_bytes": 5},
        "backends": [{"backend": "fa3", "status": "ok", "reason": "Hopper"}],
        "memory": json.loads((REPO / "docs/lab/h200/probe.json").read_text())["memory"],
    }
    report = ProbeReport.from_json(json.loads(json.dumps(data)))
    assert json.dumps(report.to_json()) == json.dumps(data)
    assert report.ram_total_bytes == 5 and report.mtp_status is None and report.launcher_help is None
    assert report.gpus.devices[0].get("memory_total_bytes") == 7
    assert isinstance(report.memory, MemorySection)
    assert report.memory.max_seqs_plain == data["memory"]["max_seqs_plain"]
