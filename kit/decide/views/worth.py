"""What the model's own MTP heads would be worth for a workload, as a band over accept lengths.

The seed's question: the checkpoint came without its MTP weights; is fetching them worth it, and
up to which concurrency? The cost model (kit.decide.costmodel: step, drafts, predict) prices the MTP head
exactly as if it were loaded; only the accept length is unknown until it runs, so the answer is a
band over three accept-length assumptions per draft length k:

- low:     Qwen3.x-27B native MTP with thinking on, SemiAnalysis InferenceX on H200 at
           concurrency 64: 1.73 / 2.21 / 2.52 / 2.72 for k = 1..4 (docs/costmodel.md, the MTP band);
- high:    the same with thinking off: 1.90 / 2.68 / 3.28 / 3.79;
- typical: the acceptance half-way between them (a = 0.775), through E = (1 - a^(k+1)) / (1 - a).

For each band and concurrency the best k is kept. Each arm runs at most the sequences its memory
holds per replica (the rest queue), so the ladder is extended past the params' one, doubling up
to twice what plain decoding holds (at most 64 times the ladder's top), to find where MTP "stops
paying": the smallest concurrency
where it is no faster than plain decoding. It is "a clear win" only where its margin exceeds the
model's known error (`costmodel.MODEL_ERROR`).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from kit.arch import ModelArch, load_arch
from kit.artifacts import Decision
from kit.decide import costmodel as cm
from kit.decide.costmodel import (
    MTP,
    Scenario,
    Workload,
    accept_length,
    acceptance_rate,
    default_capacity,
    predict_ladder,
    with_ratio,
)
from kit.display import Table, number
from kit.errors import KitError
from kit.params import RunParams, load_params
from kit.runfolder import RunFolder

INFERENCEX_THINKING_ON = {1: 1.73, 2: 2.21, 3: 2.52, 4: 2.72}
INFERENCEX_THINKING_OFF = {1: 1.90, 2: 2.68, 3: 3.28, 4: 3.79}


def default_band(ks: Sequence[int]) -> dict[str, dict[int, float]]:
    """Accept lengths per k for the low / typical / high bands (module docstring)."""
    a_low = acceptance_rate(INFERENCEX_THINKING_ON[3], 3)
    a_high = acceptance_rate(INFERENCEX_THINKING_OFF[3], 3)
    a_mid = (a_low + a_high) / 2

    def pick(table: Mapping[int, float], a: float) -> dict[int, float]:
        return {k: table.get(k, accept_length(a, k)) for k in ks}

    return {
        "low": pick(INFERENCEX_THINKING_ON, a_low),
        "typical": {k: accept_length(a_mid, k) for k in ks},
        "high": pick(INFERENCEX_THINKING_OFF, a_high),
    }


@dataclass(frozen=True)
class WorthBand:
    """A tidy table (band, concurrency, best k, tok/s, ratio) and the one-sentence answer."""

    table: pd.DataFrame
    sentence: str

    def _repr_html_(self) -> str:
        head = f"<h3>What MTP would be worth</h3><p>{html.escape(self.sentence)}</p>"
        return head + self.display_table()._repr_html_()

    def display_table(self) -> Any:
        """Per concurrency: plain tok/s, and MTP / plain (best k) in each band, for reading."""
        if self.table.empty:
            return Table("", pd.DataFrame())
        rows = []
        for c, g in self.table.groupby("concurrency"):
            by = g.set_index("band")
            row = {"concurrency": f"{int(c):,}", "plain tok/s": number(float(g.plain_tok_s.iloc[0]), 1)}
            for band in ("low", "typical", "high"):
                if band in by.index:
                    row[f"MTP / plain, {band}"] = f"{by.ratio[band]:.2f}x (k={int(by.best_k[band])})"
            row["in the params' ladder"] = "yes" if bool(g.in_params_ladder.iloc[0]) else "no"
            rows.append(row)
        note = "Bands: accept lengths measured for Qwen3.x MTP with thinking on (low) and off (high)."
        return Table("", pd.DataFrame(rows), note=note, summary=f"{len(rows)} concurrencies")

    def headline(self) -> str:
        """One sentence for the index: the band at the lowest concurrency and where MTP is a clear win."""
        if self.table.empty:
            return ""
        by = {b: t.sort_values("concurrency") for b, t in self.table.groupby("band")}
        first = {b: t.iloc[0] for b, t in by.items()}
        c0 = int(first["typical"].concurrency)
        clear = by["typical"][by["typical"].ratio > 1 + cm.MODEL_ERROR]
        where = (
            f"a clear win up to concurrency {int(clear.concurrency.max()):,}"
            if len(clear)
            else "nowhere a clear win beyond the model's error"
        )
        lo, mid, hi = (float(first[b].ratio) for b in ("low", "typical", "high"))
        return (
            f"If MTP could run here, the cost model predicts {lo:.2f}x-{hi:.2f}x plain decoding's tok/s "
            f"at concurrency {c0} (typical {mid:.2f}x), {where}."
        )


def mtp_worth(
    s: Scenario,
    concurrencies: Sequence[int],
    ks: Sequence[int],
    band: Mapping[str, Mapping[int, float]] | None = None,
) -> WorthBand:
    """Predicted MTP / plain tokens/s per band and concurrency (best k), and where MTP stops paying:
    the scenario with the model's own MTP heads as its draft, whatever draft it names."""
    s = replace(s, draft=MTP)
    work = s.work
    band = band or default_band(ks)
    cap = default_capacity(s, ks)
    caps = {0: cap.plain, **cap.spec}
    top = min(2 * work.dp_size * max(cap.plain, 1), 64 * max(concurrencies))
    ladder_c = sorted(set(concurrencies) | _doubling(work.dp_size, top))
    rows = []
    for name, accepts in band.items():
        ladder = predict_ladder(s, ladder_c, ks, accepts, engine_caps=caps, strict=False)
        ladder = with_ratio(ladder)
        plain = ladder[ladder.spec_k == 0].set_index("concurrency")
        spec = ladder[(ladder.spec_k > 0) & ladder.ratio_vs_plain.notna()]
        for C, group in spec.groupby("concurrency"):
            best = group.loc[group.ratio_vs_plain.idxmax()]
            rows.append(
                {
                    "band": name,
                    "concurrency": int(C),
                    "best_k": int(best.spec_k),
                    "accept_length": float(best.accept_length),
                    "plain_tok_s": float(plain.output_tok_s[C]),
                    "mtp_tok_s": float(best.output_tok_s),
                    "ratio": float(best.ratio_vs_plain),
                    "in_params_ladder": int(C) in set(concurrencies),
                }
            )
    table = pd.DataFrame(rows)
    return WorthBand(table, _sentence(table, s.hw, work))


def _doubling(start: int, stop: int) -> set[int]:
    out, c = set(), max(start, 1)
    while c <= stop:
        out.add(c)
        c *= 2
    return out


def _stops_paying(t: pd.DataFrame) -> int | None:
    below = t[t.ratio <= 1.0]
    return int(below.concurrency.min()) if len(below) else None


def _sentence(table: pd.DataFrame, hw: cm.Hardware, work: Workload) -> str:
    if table.empty:
        return "No concurrency of the ladder fits in memory with MTP; nothing to predict."
    by = {name: t.sort_values("concurrency") for name, t in table.groupby("band")}
    first = {name: t.iloc[0] for name, t in by.items()}
    c0 = int(first["typical"].concurrency)
    lo, mid, hi = (float(first[b].ratio) for b in ("low", "typical", "high"))
    stops = {name: _stops_paying(t) for name, t in by.items()}
    clear = by["typical"][by["typical"].ratio > 1 + cm.MODEL_ERROR]
    top = int(table.concurrency.max())
    stop_text = ", ".join(
        f"{name}: {f'from concurrency {c}' if c else f'not up to {top}'}" for name, c in stops.items()
    )
    layout = f"{work.dp_size} replica(s) of {work.tp_size} device(s), {hw.name}"
    return (
        f"On {layout}, {work.input_len} prompt / {work.output_len} output tokens: MTP would give "
        f"{lo:.2f}x-{hi:.2f}x plain decoding's tokens/s at concurrency {c0} (typical {mid:.2f}x). "
        f"It stops paying ({stop_text}); it is a clear win, beyond the model's ±{cm.MODEL_ERROR:.0%} error, "
        + (
            f"up to concurrency {int(clear.concurrency.max())} (typical)."
            if len(clear)
            else "nowhere (typical)."
        )
    )


HARDWARE_KEYS = ("bandwidth_Bps", "flops_bf16", "memory_bytes", "name", "gemm_efficiency")
"""The `cm.Hardware` fields decision.json's `hardware` holds."""


def decision_hardware(decision: Decision) -> cm.Hardware:
    """The hardware a decision was predicted on (decision.json's `hardware`)."""
    return cm.Hardware(**{k: decision.hardware[k] for k in HARDWARE_KEYS if k in decision.hardware})


def decision_efficiency(efficiency: Mapping[str, Any]) -> cm.Efficiency:
    """The cost model's efficiency from decision.json's `efficiency` (fields it does not know ignored)."""
    fields = set(cm.Efficiency.__dataclass_fields__)
    return cm.Efficiency(**{k: v for k, v in efficiency.items() if k in fields})


def decision_scenario(arch: ModelArch, decision: Decision) -> Scenario:
    """The scenario a decision was predicted in (decision.json's hardware, efficiency and workload)
    for the model `arch`, MTP drafting."""
    hw, eff = decision_hardware(decision), decision_efficiency(decision.efficiency)
    return Scenario(arch, hw, eff, Workload(**decision.workload))


def mtp_worth_band(params: RunParams, decision: Decision) -> WorthBand:
    """Notebook 02's answer for a run: its model, and the hardware, efficiency and workload the
    decision used (decision.json)."""
    s = decision_scenario(load_arch(params.model.path), decision)
    return mtp_worth(s, params.decide.concurrencies, params.decide.spec_steps)


def worth_for_run(folder: RunFolder) -> WorthBand | None:
    """The band for a run folder (its params.yaml and decision.json), or None when the model or
    either file cannot be read (a run folder copied away from its model, a stage not run)."""
    try:
        params, decision = load_params(folder.params, check_paths=False), folder.read_decision()
        return None if decision is None else mtp_worth_band(params, decision)
    except (KitError, OSError, ValueError, KeyError, TypeError):
        return None
