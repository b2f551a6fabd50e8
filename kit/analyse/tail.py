"""The tail of a batch job: its last minutes, once fewer requests remain than the engine runs at once.

Every GPU then runs a shrinking batch; with thinking models the last long requests can hold GPUs
nearly idle for minutes. The tail is measured on the run's LAST session (the one that ran out of
work: an earlier session of a resumed run ended by an interruption, not by a drain), from the
timeline's samples of requests in flight (`metrics.parquet`), or, where that holds fewer than
`MIN_SAMPLES` samples of the session, from the rows' start and finish times (successful requests
only). It starts at the last sample at the engine's capacity (manifest `engine_capacity`; the peak
in flight where that is unknown) and ends at the session's end.

Beside it: what speculation would have saved there, predicted from decision.json's ladder (plain and
speculative tokens/s per concurrency, kit.decide.costmodel.predict) with the cost model's known error.
Its sentences are kit/analyse/tail_words.py's (`tail_sentence`, `speculation_clause`, imported here).
The tail in the other stages: stage 2 picks its arm (kit/decide/choose/tailarm.py), stage 3 switches to it
(kit/generate/tailswitch.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from kit.analyse.generated import phase_rates
from kit.analyse.plots import in_flight_tail
from kit.analyse.tail_words import speculation_clause as speculation_clause
from kit.analyse.tail_words import tail_sentence
from kit.artifacts import Decision, Manifest, ProbeReport, TailSpeculation, TailSummary
from kit.columns import SPEC_K
from kit.decide.choose.decision import speculation_label
from kit.decide.choose.tailarm import tail_arm
from kit.decide.costmodel import MODEL_ERROR
from kit.engines.flavors import FLAVORS
from kit.generate.timeline_sample import IN_FLIGHT, OUTPUT_TOKENS_DONE, ROWS_DONE, SESSION, T_S
from kit.params import EngineParams, saved_params
from kit.runfolder import RunFolder

MIN_SAMPLES = 5
"""A last session with fewer timeline samples than this is measured from its rows instead."""
FIGURE_POINTS = 20_000
"""At most this many points drawn (a run measured from millions of rows is thinned for the figure)."""


@dataclass(frozen=True)
class Devices:
    """What idles in the tail: GPUs (a GPU run) or engine replicas (a CPU run, or GPUs unknown)."""

    count: int
    unit: str
    source: str


@dataclass(frozen=True)
class TailInputs:
    """What the tail needs from the run folder beside the rows and timeline."""

    decision: Decision | None = None
    devices: Devices = Devices(1, "replica", "the run's params are unknown: counted as one replica")
    spec_name: str = "speculation"
    servers: int = 1
    """`engine.replicas`: separate servers the in-flight requests were spread over; the decision's
    concurrency is per server (its own data-parallel replicas included)."""

    @classmethod
    def of(cls, folder: RunFolder | None) -> TailInputs:
        """Read decision.json, params.yaml, probe.json and the manifest of `folder` (each may be absent)."""
        if folder is None:
            return cls()
        params = saved_params(folder.params)
        engine = params.engine if params is not None else None
        manifest = folder.read_manifest(lenient=True)
        applied = manifest.settings_from_decision if manifest is not None else None
        devices = run_devices(engine, folder.read_probe(lenient=True), applied)
        servers = engine.replicas if engine is not None else 1
        return cls(folder.read_decision(lenient=True), devices, speculation_label(params), servers)


def run_devices(
    engine: EngineParams | None, probe: ProbeReport | None, applied: dict[str, Any] | None
) -> Devices:
    """GPUs the run's servers held (replicas x GPUs per server, at most what the probe saw), or its
    engine replicas where no GPU was seen. `applied`: the settings stage 3 took from the decision,
    which win over params.yaml (it holds them only where the params left them unset)."""
    if engine is None:
        return Devices(1, "replica", "params.yaml is absent or unreadable: one replica assumed")
    applied = applied or {}
    tp = int(applied.get("tp_size") or engine.tp_size)
    dp = int(applied.get("dp_size") or engine.dp_size)
    replicas = engine.replicas
    per = int(engine.gpus_per_replica or tp * dp)
    seen = len(probe.gpus.devices) if probe is not None else None
    fl = FLAVORS.get(engine.flavor)
    on_gpu = fl is not None and fl.needs_gpu(engine.device, None)
    if seen or (seen is None and on_gpu):
        n = min(replicas * per, seen) if seen else replicas * per
        where = f", of {seen} the probe saw" if seen else " (no probe.json: GPUs assumed from the flavor)"
        return Devices(n, "GPU", f"{replicas} server(s) x {per} GPU(s) from params.yaml{where}")
    why = "the probe saw no GPU" if seen == 0 else "no GPU is known (no probe.json)"
    return Devices(replicas * dp, "replica", f"{why}: engine replicas from params.yaml")


# ---- requests in flight over the last session ----------------------------------------------------
@dataclass(frozen=True)
class Load:
    """Requests in flight over one session, linear between points.

    `frame`: t_s (seconds since the session's first point), in_flight, tokens_done and rows_done
    (since the session's start). Built from rows, each event's time appears twice (the count just
    before it, then just after), so the same integration is exact there.
    """

    frame: pd.DataFrame
    session: int | None
    sessions: int
    source: str
    t0: pd.Timestamp | None = None
    """The wall clock at t_s 0 (None: the samples carry no time), where the rows' lives are laid."""


def _last_session(metrics: pd.DataFrame | None) -> tuple[pd.DataFrame, int | None, int]:
    """The samples of the last session that carry `in_flight` (sorted), its number and the count."""
    if metrics is None or metrics.empty or IN_FLIGHT not in metrics.columns:
        return pd.DataFrame(), None, 0
    m = metrics.dropna(subset=[T_S, IN_FLIGHT])
    if SESSION not in m.columns or m[SESSION].isna().all():
        return m.sort_values(T_S), None, 1
    last = m[SESSION].max()
    return m[m[SESSION] == last].sort_values(T_S), int(last), int(m[SESSION].nunique())


def _from_samples(samples: pd.DataFrame, session: int | None, sessions: int) -> Load:
    t = samples[T_S].astype(float)

    def counter(col: str) -> pd.Series:
        if col not in samples.columns:
            return pd.Series(np.nan, index=samples.index)
        c = pd.to_numeric(samples[col], errors="coerce").astype(float)
        return c - c.iloc[0] if pd.notna(c.iloc[0]) else c

    frame = pd.DataFrame(
        {
            T_S: (t - t.iloc[0]).to_numpy(),
            IN_FLIGHT: samples[IN_FLIGHT].astype(float).to_numpy(),
            "tokens_done": counter(OUTPUT_TOKENS_DONE).to_numpy(),
            ROWS_DONE: counter(ROWS_DONE).to_numpy(),
        }
    )
    at = pd.to_datetime(samples["at"], utc=True, errors="coerce") if "at" in samples.columns else None
    t0 = at.iloc[0] if at is not None and pd.notna(at.iloc[0]) else None  # the clock at t_s 0
    return Load(frame, session, sessions, "timeline", t0)


def _from_rows(
    df: pd.DataFrame, since: pd.Timestamp | None, session: int | None, sessions: int
) -> Load | None:
    """In flight rebuilt from each row's start (finished_at - latency_s) and finish, counted exactly."""
    if not {"finished_at", "latency_s"} <= set(df.columns):
        return None
    rows = df.dropna(subset=["finished_at", "latency_s"])
    end = pd.to_datetime(rows["finished_at"], utc=True, errors="coerce")
    keep = end.notna() & (end >= since if since is not None else True)
    rows, end = rows[keep], end[keep]
    if rows.empty:
        return None
    start = end - pd.to_timedelta(pd.to_numeric(rows["latency_s"], errors="coerce").fillna(0), unit="s")
    t0 = start.min()
    n = len(rows)
    tokens = (
        pd.to_numeric(rows["completion_tokens"], errors="coerce").fillna(0).to_numpy(float)
        if "completion_tokens" in rows.columns
        else np.zeros(n)
    )
    events = pd.DataFrame(
        {
            "t": np.concatenate([(start - t0).dt.total_seconds(), (end - t0).dt.total_seconds()]),
            IN_FLIGHT: np.concatenate([np.ones(n), -np.ones(n)]),
            "tokens_done": np.concatenate([np.zeros(n), tokens]),
            "rows_done": np.concatenate([np.zeros(n), np.ones(n)]),
        }
    )
    step = events.groupby("t", sort=True).sum()
    after = step.cumsum()
    both = pd.concat([(after - step).assign(order=0), after.assign(order=1)]).reset_index()
    frame = both.sort_values(["t", "order"]).rename(columns={"t": "t_s"}).drop(columns="order")
    return Load(frame.reset_index(drop=True), session, sessions, "rows", t0)


def _session_start(manifest: Manifest | None, metrics: pd.DataFrame | None) -> pd.Timestamp | None:
    """When the last session began: the manifest's `session_started_at`, else its first sample."""
    stamp = manifest.session_started_at if manifest is not None else None
    if stamp:
        at = pd.to_datetime(stamp, errors="coerce", utc=True)
        if pd.notna(at):
            return at
    samples, _, _ = _last_session(metrics)
    if len(samples) and "at" in samples.columns:
        at = pd.to_datetime(samples["at"], errors="coerce", utc=True).min()
        return at if pd.notna(at) else None
    return None


def session_load(metrics: pd.DataFrame | None, df: pd.DataFrame, manifest: Manifest | None) -> Load | str:
    """Requests in flight over the last session: its timeline samples, else its rows; or why neither."""
    samples, session, sessions = _last_session(metrics)
    if len(samples) >= MIN_SAMPLES:
        return _from_samples(samples, session, sessions)
    load = _from_rows(df, _session_start(manifest, metrics), session, sessions)
    if load is not None and len(load.frame) >= 2:
        return load
    held = f"{len(samples)} sample(s) of requests in flight" if len(samples) else "no requests in flight"
    return (
        f"the timeline holds {held} (fewer than {MIN_SAMPLES}) and no row has both a finish time "
        "and a latency to rebuild them from"
    )


# ---- the tail --------------------------------------------------------------------------------------
def full_load(manifest: Manifest | None, peak: float) -> tuple[float, int | None, str]:
    """(requests in flight that count as full load, the engine's capacity or None, what it is)."""
    cap = manifest.engine_capacity if manifest is not None else None
    source = (manifest.capacity_source if manifest is not None else None) or "the run's manifest"
    if isinstance(cap, int | float) and cap > 0:
        if peak >= cap:
            return float(cap), int(cap), f"the engine's capacity ({source})"
        return peak, int(cap), f"the peak in flight: the run never filled the engine's capacity of {int(cap)}"
    return peak, None, "the peak in flight: the manifest does not say the engine's capacity"


def start_index(load: Load, level: float) -> int:
    """The tail's first point: the last one at full load (the count never comes back up after it)."""
    return int(np.flatnonzero(load.frame[IN_FLIGHT].to_numpy(float) >= level)[-1])


def _trapezoid(t: np.ndarray, y: np.ndarray) -> float:
    return float(np.sum(np.diff(t) * (y[1:] + y[:-1]) / 2)) if len(t) > 1 else 0.0


def measure(
    load: Load, manifest: Manifest | None, devices: Devices, rows: pd.DataFrame | None = None
) -> TailSummary:
    """Start, end, share, tokens/s in and before the tail (kit.analyse.generated.phase_rates: from
    `rows` where they say when they ran), rows finished in it and capacity left idle (its sentence not
    written yet)."""
    f = load.frame
    t, v = f["t_s"].to_numpy(float), f[IN_FLIGHT].to_numpy(float)
    level, capacity, level_source = full_load(manifest, float(v.max()))
    i = start_index(load, level)
    start, end = t[i], t[-1]
    done = f["rows_done"].to_numpy(float)
    full_tok_s, tail_tok_s, tok_s_from = phase_rates(f, load.t0, rows, i)
    idle_s = _trapezoid(t[i:], 1 - np.minimum(v[i:], level) / level) if level > 0 else 0.0
    share = (end - start) / end if end > 0 else 0.0
    return TailSummary(
        known=True,
        session=load.session,
        sessions=load.sessions,
        measured_from=load.source,
        full_load_in_flight=level,
        full_load_source=level_source,
        engine_capacity=capacity,
        start_s=round(start, 3),
        end_s=round(end, 3),
        duration_s=round(end - start, 3),
        session_s=round(end, 3),
        share=round(share, 4),
        in_flight_at_end=float(v[-1]),
        tok_s_tail=tail_tok_s,
        tok_s_full_load=full_tok_s,
        tok_s_from=tok_s_from,
        rows_in_tail=None if math.isnan(done[-1] - done[i]) else int(done[-1] - done[i]),
        idle_minutes=round(idle_s * devices.count / 60, 3),
        devices=devices.count,
        device_unit=devices.unit,
        devices_source=devices.source,
    )


# ---- what speculation would have saved there (predicted) ----------------------------------------
def predicted_ladder(decision: Decision) -> pd.DataFrame:
    """decision.json's predicted tokens/s: one row per concurrency, one column per spec_k (0: plain)."""
    t = pd.DataFrame(decision.table_rows())
    if not {SPEC_K, "concurrency", "predicted_tok_s"} <= set(t.columns):
        return pd.DataFrame()
    if "feasible" in t.columns:
        t = t[t["feasible"].fillna(True).astype(bool)]
    t = t.assign(predicted_tok_s=pd.to_numeric(t["predicted_tok_s"], errors="coerce"))
    t = t[t["predicted_tok_s"] > 0]
    return t.pivot_table(index="concurrency", columns=SPEC_K, values="predicted_tok_s").sort_index()


def ratio_at(ladder: pd.DataFrame, k: int, c: np.ndarray) -> np.ndarray:
    """Predicted speculative (k) over plain tokens/s at concurrencies c (> 0): each interpolated
    linearly in log(concurrency) between the ladder's points, held at its ends."""
    both = ladder[[0, k]].dropna()
    x, at = np.log(both.index.to_numpy(float)), np.log(c)
    return np.interp(at, x, both[k].to_numpy(float)) / np.interp(at, x, both[0].to_numpy(float))


def saving(
    load: Load, start_index: int, level: float, ladder: pd.DataFrame, k: int, servers: int = 1
) -> tuple[float, ...]:
    """Seconds speculation with k would have saved over the tail (central, low, high): each interval
    at mean in-flight c (per server) takes dt x plain(c) / spec(c) instead of dt where speculation
    wins; the ratio is moved by the cost model's known error (MODEL_ERROR) for the low and high
    figures. An interval with nothing in flight saves nothing."""
    f = load.frame.iloc[start_index:]
    t, v = f["t_s"].to_numpy(float), np.minimum(f[IN_FLIGHT].to_numpy(float), level)
    dt, c = np.diff(t), (v[1:] + v[:-1]) / 2 / max(servers, 1)
    ran = (dt > 0) & (c > 0)
    if not ran.any():
        return (0.0, 0.0, 0.0)
    r = ratio_at(ladder, k, c[ran])
    return tuple(
        float(np.sum(dt[ran] * np.maximum(0.0, 1 - 1 / (r * m))))
        for m in (1, 1 - MODEL_ERROR, 1 + MODEL_ERROR)
    )


def crossover(ladder: pd.DataFrame, k: int) -> int | None:
    """The largest concurrency on the ladder where speculation with k is predicted to beat plain."""
    both = ladder[[0, k]].dropna()
    wins = both.index[both[k] > both[0]]
    return int(wins.max()) if len(wins) else None


def _ran_speculative(manifest: Manifest | None, decision: Decision) -> int | None:
    """k the run generated with (0: speculation of unknown k), or None for plain decoding: the
    manifest's engine, else the decision's settings (what stage 3 takes by default)."""
    if manifest is not None and "engine" in manifest:
        spec = manifest.speculative
        if spec is None:
            return None
        return int(spec.get("num_steps") or max(int(spec.get("num_draft_tokens") or 1) - 1, 0))
    arm = decision.arm
    return arm.k if arm is not None and arm.speculative else None


def speculation_entry(
    load: Load, tail: TailSummary, manifest: Manifest | None, inputs: TailInputs
) -> TailSpeculation:
    """`_speculation_entry` as summary.json holds it (its keys depend on its status)."""
    return TailSpeculation.from_json(_speculation_entry(load, tail, manifest, inputs))


def _speculation_entry(
    load: Load, tail: TailSummary, manifest: Manifest | None, inputs: TailInputs
) -> dict[str, Any]:
    """What speculation would have saved in the tail: the spec k that saves most (where none does,
    the one that wins up to the highest concurrency), its crossover,
    the central figure and its low / high; or why nothing is said (no decision, already speculating)."""
    decision, name = inputs.decision, inputs.spec_name
    if decision is None:
        return {"status": "no decision", "reason": "decision.json is absent (stage 2 has not run)"}
    k_ran = _ran_speculative(manifest, decision)
    if k_ran is not None:
        return {"status": "already speculating", SPEC_K: k_ran, "name": name}
    switch = manifest.tail_speculation if manifest is not None else None
    if switch is not None and switch.switched:  # generate.tail_speculation: stage 3 switched for the tail
        return {"status": "switched", SPEC_K: switch.k, "name": name}
    ladder = predicted_ladder(decision)
    ks = [int(k) for k in ladder.columns if k != 0 and 0 in ladder.columns]
    if not ks:
        return {"status": "no ladder", "reason": "decision.json predicts no plain and speculative tokens/s"}
    level = tail.full_load_in_flight
    start = start_index(load, level)
    by_k = {k: saving(load, start, level, ladder, k, inputs.servers) for k in ks}
    k = max(ks, key=lambda j: (by_k[j][0], crossover(ladder, j) or 0, -j))  # then: wins furthest up
    central, low, high = by_k[k]
    return {
        "status": "saves" if central > 0 else "no win",
        "name": name,
        SPEC_K: k,
        "crossover": crossover(ladder, k),
        "ladder_concurrencies": [int(c) for c in ladder[[0, k]].dropna().index],
        "servers": inputs.servers,
        "saved_s": round(central, 3),
        "saved_low_s": round(low, 3),
        "saved_high_s": round(high, 3),
        "model_error": MODEL_ERROR,
        "available": bool(decision.speculation_available),
        "unavailable_reason": decision.speculation_unavailable_reason,
        "switch_rule": switch_rule(decision),
    }


def switch_rule(decision: Decision) -> dict[str, Any]:
    """What stage 3's `generate.tail_speculation` would switch to on this decision (kit.decide.choose.tailarm:
    only a win outside the decision's noise counts), beside the prediction above (any predicted win)."""
    arm, why = tail_arm(decision)
    return {"would_switch": False, "why": why} if arm is None else {"would_switch": True, **arm.as_dict()}


# ---- summary entry (its sentence: kit/analyse/tail_words.py) -----------------------------------------
def tail_entry(
    metrics: pd.DataFrame | None, df: pd.DataFrame, manifest: Manifest | None, inputs: TailInputs
) -> TailSummary:
    """summary.json's `tail`: the numbers and a `sentence`; `known` false with a `reason` where the
    run holds nothing to measure it from."""
    load = session_load(metrics, df, manifest)
    why = load if isinstance(load, str) else None
    if why is None and not (load.frame[IN_FLIGHT] > 0).any():
        why = "the timeline never saw a request in flight"
    if why is not None:
        return TailSummary.from_json(
            {"known": False, "reason": why, "sentence": f"The tail: unknown, because {why}."}
        )
    entry = measure(load, manifest, inputs.devices, df)
    if entry.duration_s > 0:
        entry = replace(entry, speculation=speculation_entry(load, entry, manifest, inputs))
    return replace(entry, sentence=tail_sentence(entry))


# ---- figure -------------------------------------------------------------------------------------------
def tail_figure(metrics: pd.DataFrame | None, df: pd.DataFrame, manifest: Manifest | None) -> Figure | None:
    """Requests in flight over the last session, the full-load line and the tail shaded; None when
    there is nothing to draw."""
    load = session_load(metrics, df, manifest)
    if isinstance(load, str) or not (load.frame[IN_FLIGHT] > 0).any():
        return None
    entry = measure(load, manifest, Devices(1, "replica", ""))
    frame = load.frame
    if len(frame) > FIGURE_POINTS:
        frame = frame.iloc[:: math.ceil(len(frame) / FIGURE_POINTS)]
    level = entry.full_load_in_flight
    label = "capacity" if entry.engine_capacity is not None and level >= entry.engine_capacity else "peak"
    over = f"session {load.session} (the last)" if load.sessions > 1 else "the run"
    tail = (entry.start_s, entry.end_s)
    return in_flight_tail(frame, level, f"{label} ({level:,.0f})", tail, f"Requests in flight over {over}")
