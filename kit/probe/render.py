"""Tables and the go / no-go summary of a probe report; works on a probe.json from any machine."""

from __future__ import annotations

from typing import Any

import pandas as pd

GIB = 1024**3
ICON = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}
NO_GO_EXIT_CODE = 4
"""`kit probe` exits with this code on NO-GO (0 on GO, 2 on an error that stopped the probe)."""


def probe_tables(report: dict[str, Any]) -> dict[str, pd.DataFrame]:
    """Findings per section, plus `gpu_devices`, `backend_verdicts`, `memory_plan`, `recommended`."""
    findings = pd.DataFrame(report["findings"])
    tables = {
        sec: df.drop(columns="section").reset_index(drop=True)
        for sec, df in findings.groupby("section", sort=False)
    }
    tables["gpu_devices"] = pd.DataFrame((report.get("gpus") or {}).get("devices") or [])
    tables["backend_verdicts"] = pd.DataFrame(report.get("backends") or [])
    memory = report.get("memory") or {}
    tables["memory_plan"] = pd.DataFrame([{"item": k, "value": v} for k, v in memory.items()])
    rec = {k: v for k, v in (report.get("recommended") or {}).items() if k != "speculative"}
    tables["recommended"] = pd.DataFrame([{"setting": k, "value": v} for k, v in rec.items()])
    return tables


def _settings_lines(rec: dict[str, Any]) -> list[str]:
    lines = []
    flags = [
        ("--attention-backend", rec.get("attention_backend")),
        ("--mem-fraction-static", rec.get("mem_fraction_static")),
        ("--max-running-requests", rec.get("max_running_requests")),
        ("--cuda-graph-max-bs", rec.get("cuda_graph_max_bs")),
    ]
    if rec.get("mamba_strategy"):
        flags.append((rec.get("mamba_flag") or "--mamba-scheduler-strategy", rec["mamba_strategy"]))
    plain = " ".join(f"{f} {v}" for f, v in flags if v is not None)
    lines.append(f"- plain: `{plain}`" if plain else "- plain: no settings (no GPU or no readable model)")
    spec = rec.get("speculative") or {}
    if spec.get("available") and spec.get("algorithm") != "NGRAM" and "num_steps" in spec:
        s = (
            f"--speculative-algorithm {spec['algorithm']} --speculative-num-steps {spec['num_steps']} "
            f"--speculative-eagle-topk {spec['eagle_topk']} "
            f"--speculative-num-draft-tokens {spec['num_draft_tokens']}"
        )
        if rec.get("max_running_requests_speculative"):
            s += f" --max-running-requests {rec['max_running_requests_speculative']}"
        if rec.get("mamba_strategy_speculative"):
            flag = rec.get("mamba_flag") or "--mamba-scheduler-strategy"
            s += f" {flag} {rec['mamba_strategy_speculative']}"
        lines.append(f"- speculative: `{s}`")
    lines.append(f"- speculation available: {spec.get('available')} ({spec.get('why', 'unknown')})")
    return lines


def verdict_text(report: dict[str, Any]) -> str:
    """Go / no-go for a terminal: every failure and warning with its reason and a `Do:` line."""
    s = report["summary"]
    ok = sum(f["status"] == "ok" for f in report["findings"])
    head = "GO" if s["go"] else "NO-GO"
    lines = [f"{head}: {len(s['fails'])} fail, {len(s['warns'])} warn, {ok} ok"]
    for status in ("fail", "warn"):
        for f in report["findings"]:
            if f["status"] == status:
                lines += [f"{ICON[status]} {f['section']}/{f['name']}: {f['reason']}", f"  Do: {f['action']}"]
    return "\n".join(lines)


def verdict_markdown(report: dict[str, Any]) -> str:
    """Go / no-go, every failure and warning with what to do, and the recommended settings, as Markdown."""
    s = report["summary"]
    head = "## GO" if s["go"] else f"## NO-GO: {len(s['fails'])} failure(s)"
    lines = [
        head,
        "",
        f"{len(s['fails'])} fail, {len(s['warns'])} warn, "
        f"{sum(f['status'] == 'ok' for f in report['findings'])} ok.",
        "",
    ]
    for f in report["findings"]:
        if f["status"] != "ok":
            lines.append(
                f"- **{ICON[f['status']]}** `{f['section']}/{f['name']}`: {f['reason']}. *Do:* {f['action']}"
            )
    mem = report.get("memory")
    if mem:
        lines += [
            "",
            f"Memory per GPU: weights {mem['weight_bytes'] / GIB:.1f} GiB, "
            f"KV {mem['kv_bytes_per_token'] / 1024:.0f} KiB/token, "
            f"state {mem['state_bytes_per_seq'] / 2**20:.0f} MiB/seq: {mem['max_seqs_plain']} sequences"
            f" of {mem['context_len']} tokens plain, {mem['max_seqs_spec']} speculative.",
        ]
    lines += ["", "### Recommended settings", "", *_settings_lines(report.get("recommended") or {})]
    return "\n".join(lines) + "\n"
