"""Tables and the go / no-go summary of a probe report; works on a probe.json from any machine."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kit.artifacts import ProbeReport, Recommended
from kit.display import Answer, Table, gib, human_name, table

GIB = 1024**3
ICON = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}
NO_GO_EXIT_CODE = 4
"""`kit probe` exits with this code on NO-GO (0 on GO, 2 on an error that stopped the probe)."""


def gpu_line(probe: ProbeReport) -> str:
    """`2 x NVIDIA H200`, or `no GPU (CPU)`."""
    names = [str(d.get("name")) for d in probe.gpus.devices if isinstance(d, dict) and d.get("name")]
    if not names:
        return "no GPU (CPU)"
    return " + ".join(f"{names.count(n)} x {n}" for n in dict.fromkeys(names))


def probe_answer(probe: ProbeReport | None) -> Answer:
    """GO / NO-GO with the first failure (or warning) and what to do about it."""
    if probe is None or "summary" not in probe:
        why = "probe.json is missing: stage 1 has not run (`kit probe PARAMS` writes it)."
        return Answer("Environment", "not probed", why, "missing")
    findings = probe.findings
    fails = [f for f in findings if f.status == "fail"]
    warns = [f for f in findings if f.status == "warn"]
    where = f"on {gpu_line(probe)}"
    if fails:
        f = fails[0]
        detail = (
            f"{len(fails)} of {len(findings)} checks failed {where}; the first: "
            f"{f.key}: {f.reason}. Do: {f.action}"
        )
        return Answer("Environment", "NO-GO", detail, "fail")
    if warns:
        w = warns[0]
        detail = (
            f"{len(findings) - len(warns)} checks passed {where}, {len(warns)} warned; the first: "
            f"{w.key}: {w.reason}."
        )
        return Answer("Environment", "GO", detail, "warn")
    return Answer("Environment", "GO", f"all {len(findings)} checks passed {where}.")


def _settings_lines(rec: Recommended) -> list[str]:
    lines = []
    for name, cmd in (rec.commands or {}).items():
        flags = " ".join(cmd[cmd.index(next(a for a in cmd if a.startswith("--"))) :])
        lines.append(f"- {name}: `{flags}`")
    if not rec.commands:
        keys = ("attention_backend", "mem_fraction_static", "max_running_requests", "cuda_graph_max_bs")
        values = {k: getattr(rec, k) for k in keys}
        shown = ", ".join(f"{human_name(k)} {v}" for k, v in values.items() if v is not None)
        lines.append(f"- plain: {shown}" if shown else "- plain: no settings (no GPU or no readable model)")
    spec = rec.speculative
    tool, reasoning = rec.tool_call_parser, rec.reasoning_parser
    lines.append(
        f"- parsers: tool-call parser {tool or 'none'}, reasoning parser {reasoning or 'none'} "
        f"({rec.parsers_reason})"
    )
    if rec.thinking_note:
        lines.append(f"- thinking: {rec.thinking_note}")
    available = {True: "yes", False: "no"}.get(spec.available, "unknown")
    lines.append(f"- speculation available: {available} ({spec.why})")
    return lines


def verdict_text(report: ProbeReport) -> str:
    """Go / no-go for a terminal: every failure and warning with its reason and a `Do:` line."""
    s = report.summary
    ok = sum(f.status == "ok" for f in report.findings)
    head = "GO" if s.go else "NO-GO"
    lines = [f"{head}: {len(s.fails)} fail, {len(s.warns)} warn, {ok} ok"]
    for status in ("fail", "warn"):
        for f in report.findings:
            if f.status == status:
                lines += [f"{ICON[status]} {f.key}: {f.reason}", f"  Do: {f.action}"]
    return "\n".join(lines)


def _counts_line(report: ProbeReport) -> str:
    s, findings = report.summary, report.findings
    if not s.fails and not s.warns:
        return f"All {len(findings)} checks passed on {gpu_line(report)}."
    ok = sum(f.status == "ok" for f in findings)
    return (
        f"{len(s.fails)} failed, {len(s.warns)} warned, {ok} passed, on {gpu_line(report)}. "
        "Each problem and what to do:"
    )


def probe_verdict(report: ProbeReport) -> str:
    """Go / no-go, every failure and warning with what to do, and the recommended settings, as Markdown."""
    s = report.summary
    head = "## GO" if s.go else f"## NO-GO: {len(s.fails)} failure(s)"
    lines = [
        head,
        "",
        _counts_line(report),
        "",
    ]
    for f in report.findings:
        if f.status != "ok":
            lines.append(f"- **{ICON[f.status]}** `{f.key}`: {f.reason}. *Do:* {f.action}")
    mem = report.memory
    if mem:
        lines += [
            "",
            f"Memory per GPU: weights {mem['weight_bytes'] / GIB:.1f} GiB, "
            f"KV {mem['kv_bytes_per_token'] / 1024:.0f} KiB/token, "
            f"state {mem['state_bytes_per_seq'] / 2**20:.0f} MiB/seq: {mem['max_seqs_plain']} sequences"
            f" of {mem['context_len']} tokens plain, {mem['max_seqs_spec']} speculative.",
        ]
    lines += ["", "### Recommended settings", "", *_settings_lines(report.recommended)]
    return "\n".join(lines) + "\n"


SECTIONS = {
    "gpus": "GPUs",
    "model": "Model directory",
    "engine_env": "Engine environment",
    "memory": "Memory",
    "host": "Host",
    "backends": "Attention backend choice",
}
FINDING_COLUMNS = {"name": "check", "status": "status", "reason": "finding", "action": "what to do"}
DEVICE_COLUMNS = {
    "index": "GPU",
    "name": "name",
    "arch": "arch",
    "memory_total_bytes": "memory",
    "memory_free_bytes": "free",
    "sm_count": "SMs",
    "driver_version": "driver",
    "cuda_driver_version": "CUDA",
}


def _findings_table(title: str, findings: pd.DataFrame) -> Table:
    cols = [c for c in FINDING_COLUMNS if c in findings and (c != "action" or findings[c].fillna("").any())]
    counts = findings["status"].value_counts()
    summary = ", ".join(f"{counts[s]} {s}" for s in ("fail", "warn", "ok") if s in counts)
    return table(findings[cols], title, FINDING_COLUMNS, summary=f"{len(findings)} checks: {summary}")


def _memory_value(key: str, value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return str(value)
    if key.endswith("_per_token"):
        return f"{value / 1024:,.0f} KiB per token"
    if key.endswith("_per_seq"):
        return f"{value / 2**20:,.0f} MiB per sequence"
    if key.endswith("_bytes"):
        return gib(value)
    return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"


def probe_tables(report: ProbeReport) -> list[Table]:
    """Notebook 01's tables for reading: findings per section, GPUs, backends, memory plan, settings."""
    findings = pd.DataFrame([f.to_json() for f in report.findings])
    out = [
        _findings_table(SECTIONS.get(sec, human_name(sec)), df)
        for sec, df in findings.groupby("section", sort=False)
    ]
    devices = pd.DataFrame(report.gpus.devices)
    if len(devices):
        keep = [c for c in DEVICE_COLUMNS if c in devices]
        gib_cols = {c: gib for c in ("memory_total_bytes", "memory_free_bytes")}
        out.append(table(devices[keep], "GPU devices", DEVICE_COLUMNS, formats=gib_cols))
    if report.backends:
        backends = pd.DataFrame(report.backends)
        out.append(table(backends, "Attention backends", {"reason": "why"}))
    if report.memory is not None:
        rows = [
            {"item": human_name(k.removesuffix("_bytes")), "value": _memory_value(k, v)}
            for k, v in report.memory.to_json().items()
        ]
        out.append(table(pd.DataFrame(rows), "Memory plan per GPU"))
    rec = {k: v for k, v in report.recommended.to_json().items() if k not in ("speculative", "commands")}
    rows = [{"setting": human_name(k), "value": v} for k, v in rec.items() if v is not None]
    note = "Every recommended setting with its reason; settings left unset are not shown."
    out.append(table(pd.DataFrame(rows), "Recommended settings in detail", note=note))
    return out
