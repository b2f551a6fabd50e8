"""Assemble the probe report from its parts: every check runs, none stops the others."""

from __future__ import annotations

import datetime as dt
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kit.arch import arch_from_config
from kit.artifacts import Finding, GpuSection, ProbeReport
from kit.artifacts.probe_memory import MemorySection
from kit.artifacts.probe_sections import EngineEnvFacts, GpuDevice, InputsSection, ModelFacts
from kit.engines.flavors import flavor
from kit.memoryplan import MemoryPlan, memory_plan
from kit.probe import backends, engine_env, gpu, gpu_findings, host, model_dir, model_findings
from kit.probe.findings import finding, summarize
from kit.probe.recommend import recommend

REPORT_VERSION = 1


@dataclass(frozen=True)
class ProbeInputs:
    """What the probe needs to know of a run; built from RunParams or by hand (benchmarks/probe_gpu.py)."""

    model_path: Path
    output_dir: Path
    engine_python: Path = field(default_factory=lambda: Path(sys.executable))
    flavor: str = "sglang"
    cache_dir: Path | None = None
    """Where the launcher's --help is cached (the run folder's logs/)."""
    engine_env: dict[str, str] = field(default_factory=dict)
    """Variables the server is started with beside this environment (the flavor's and engine.env)."""
    context_len: int = 4096
    mem_fraction: float = 0.85
    measure_gpu: bool = False
    tp_size: int = 1
    dp_size: int = 1
    spec_algorithm: str | None = None
    spec_topk: int | None = None
    spec_draft_tokens: int | None = None
    requested_backend: str | None = None
    device: str = "cpu"
    """transformers flavor only: the torch device its server runs on."""
    planned_command: list[str] | None = None
    run: str | None = None

    def to_json(self) -> InputsSection:
        """probe.json's `inputs`: the fields in order, paths as text."""
        return InputsSection(
            model_path=str(self.model_path),
            output_dir=str(self.output_dir),
            engine_python=str(self.engine_python),
            flavor=self.flavor,
            cache_dir=str(self.cache_dir) if self.cache_dir is not None else None,
            engine_env=self.engine_env,
            context_len=self.context_len,
            mem_fraction=self.mem_fraction,
            measure_gpu=self.measure_gpu,
            tp_size=self.tp_size,
            dp_size=self.dp_size,
            spec_algorithm=self.spec_algorithm,
            spec_topk=self.spec_topk,
            spec_draft_tokens=self.spec_draft_tokens,
            requested_backend=self.requested_backend,
            device=self.device,
            planned_command=self.planned_command,
            run=self.run,
        )


def _model_section(inp: ProbeInputs) -> tuple[ModelFacts, list[Finding]]:
    try:
        info = model_dir.inspect_model_dir(inp.model_path)
        return info, model_findings.model_findings(info)
    except Exception as e:  # the probe reports, it does not stop: an unforeseen layout is a finding
        return ModelFacts(path=str(inp.model_path), error=repr(e)), [
            finding(
                "model",
                "inspect",
                "fail",
                None,
                f"could not inspect the model directory: {e!r}",
                "check the directory by hand and report this as a kit bug",
            )
        ]


def _engine_section(inp: ProbeInputs) -> tuple[EngineEnvFacts, list[Finding]]:
    if not flavor(inp.flavor).started:
        return EngineEnvFacts(flavor=inp.flavor), [
            finding(
                "engine_env",
                inp.flavor,
                "ok",
                None,
                f"an {inp.flavor} server: its environment is not checked here",
            )
        ]
    facts = engine_env.inspect_engine_env(
        inp.engine_python, inp.flavor, inp.cache_dir, inp.planned_command, inp.engine_env
    )
    return facts, engine_env.engine_findings(facts)


def needs_gpu(inp: ProbeInputs, engine: EngineEnvFacts) -> bool:
    """Whether the planned server runs on GPUs (`Flavor.needs_gpu`: SGLang always, vLLM unless its
    environment is a CPU build, transformers when its device is CUDA, an external server never)."""
    packages = (engine.get("interpreter") or {}).get("packages") or {}
    return flavor(inp.flavor).needs_gpu(inp.device, packages)


def _gpu_section(
    inp: ProbeInputs, gpus: list[gpu.GpuFacts] | None, needs: bool
) -> tuple[GpuSection, list[Finding]]:
    """NVML, then torch in a child process, unless the caller gives the GPU facts (`gpus`)."""
    if gpus is None:
        gpus, info = gpu.collect_gpus(measure=inp.measure_gpu)
    else:
        info = None  # facts given by the caller: torch is not asked
    wanted = inp.tp_size * inp.dp_size
    found = gpu_findings.gpu_findings(gpus, info, needs_gpu=needs, wanted=wanted)
    if needs and 0 < len(gpus) < wanted:
        found.append(
            finding(
                "gpus",
                "parallel",
                "fail",
                len(gpus),
                f"tp_size x dp_size = {wanted} GPUs wanted, {len(gpus)} found",
                "lower engine.tp_size / engine.dp_size",
            )
        )
    section = GpuSection(
        devices=[g.to_dict() for g in gpus],
        torch=info,
        topology=gpu.topology() if gpus else None,
        datasheet=gpu.lookup_datasheet(gpus[0].name) if gpus else None,
    )
    return section, found


def _memory_section(
    inp: ProbeInputs, model: ModelFacts, gpus: list[GpuDevice]
) -> tuple[MemoryPlan | None, MemorySection | None, list[Finding]]:
    """The memory plan, probe.json's `memory` (the plan's figures and where the weight bytes came
    from), and the findings; no plan without a readable config or a GPU."""
    cfg_path = Path(inp.model_path) / "config.json"
    if not model.get("config"):
        return None, None, []
    memory_total = gpus[0].get("memory_total_bytes") if gpus else None
    if not memory_total:
        return None, None, [finding("memory", "plan", "ok", None, "no GPU: no memory plan")]
    arch = arch_from_config(json.loads(cfg_path.read_text()))
    main, mtp, source = model_findings.weight_bytes(model)
    if not mtp and arch.mtp_layers:
        mtp = arch.mtp_layers * arch.layer_params * arch.dtype_bytes
    k = inp.spec_draft_tokens or 4
    plan = memory_plan(
        arch,
        memory_total,
        inp.mem_fraction,
        inp.context_len,
        weight_bytes=main,
        spec_draft_tokens=k,
        draft_weight_bytes=mtp,
        tp_size=inp.tp_size,
    )
    section = MemorySection.of(plan, source)
    return plan, section, _memory_findings(plan, arch.max_positions, inp.context_len)


def _memory_findings(plan: MemoryPlan, max_positions: int | None, context_len: int) -> list[Finding]:
    gib = 1024**3
    out = []
    if plan.max_seqs_plain < 1:
        out.append(
            finding(
                "memory",
                "plan",
                "fail",
                0,
                f"weights {plan.weight_bytes / gib:.1f} GiB leave no room for "
                f"one sequence in {plan.budget_bytes / gib:.1f} GiB",
                "raise engine.tp_size or "
                "probe.mem_fraction, shorten the context, or use a smaller / quantized model",
            )
        )
    else:
        out.append(
            finding(
                "memory",
                "plan",
                "ok",
                plan.max_seqs_plain,
                f"{plan.max_seqs_plain} sequences of "
                f"{context_len} tokens fit; {plan.max_seqs_spec} with {plan.spec_draft_tokens} draft tokens",
            )
        )
    if plan.max_seqs_plain >= 1 and plan.max_seqs_spec < 1:
        out.append(
            finding(
                "memory",
                "speculative",
                "warn",
                0,
                "no room for one sequence once draft weights and buffers are paid",
                "run without speculation or give it more memory",
            )
        )
    if max_positions and context_len > max_positions:
        out.append(
            finding(
                "memory",
                "context",
                "warn",
                context_len,
                f"context {context_len} > the model's max_position_embeddings {max_positions}",
                "lower probe.context_length",
            )
        )
    return out


def build_report(inp: ProbeInputs, gpus: list[gpu.GpuFacts] | None = None) -> ProbeReport:
    """Run every check for `inp` and return the probe report (the content of probe.json)."""
    engine, ef = _engine_section(inp)
    on_gpu = needs_gpu(inp, engine)
    gpu_sec, findings = _gpu_section(inp, gpus, on_gpu)
    model, mf = _model_section(inp)
    plan, memory, memf = _memory_section(inp, model, gpu_sec.devices)
    first = gpu.GpuFacts.from_dict(gpu_sec.devices[0]) if gpu_sec.devices else None
    traits = _traits(model, inp)
    sheet = gpu_sec.datasheet or {}
    smem = (first.smem_per_block_optin or sheet.get("smem_per_block_bytes")) if first else None
    verdicts = backends.backend_verdicts(first.sm if first else None, smem, traits)
    lacking = engine_env.missing_backends(engine) if engine.get("flavor") else {}
    verdicts = [
        {**v, "status": "fail", "reason": lacking[v["backend"]]}
        if v["backend"] in lacking and v["status"] != "fail"
        else v
        for v in verdicts
    ]
    rec_backend = backends.recommend_backend(first.sm if first else None, verdicts, traits)
    findings += mf + ef + memf
    if flavor(inp.flavor).attention_backends and on_gpu:  # a GPU engine's attention backend
        findings += backends.backend_findings(verdicts, rec_backend, inp.requested_backend)
    weight = plan.weight_bytes * inp.tp_size if plan else None  # the whole checkpoint is read
    host_sec = host.host_facts(inp.output_dir)
    findings += host.host_findings(host_sec, weight, inp.tp_size * inp.dp_size > 1)
    return ProbeReport(
        version=REPORT_VERSION,
        run=inp.run,
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(),
        inputs=inp.to_json(),
        summary=summarize(findings),
        recommended=recommend(inp, model, engine, plan, rec_backend, first),
        findings=findings,
        gpus=gpu_sec,
        model=model,
        engine_env=engine,
        memory=memory,
        backends=verdicts,
        host=host_sec,
    )


def _traits(model: ModelFacts, inp: ProbeInputs) -> backends.ModelTraits:
    c = model.get("config")
    return backends.ModelTraits(
        is_mla=bool(c and c["is_mla"]),
        is_hybrid=bool(c and c["is_hybrid"]),
        head_dim=int((c and c["head_dim"]) or 128),
        spec_topk=inp.spec_topk if inp.spec_algorithm else None,
    )
