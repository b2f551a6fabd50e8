"""The settings sweep (`decide.backends`): after the speculation sweep, the chosen arm measured with
other engine settings (attention backend, sampling backend) against the params' own.

Each alternative changes one setting from the params' engine (the baseline) and gets a server of its
own; all are measured at the sweep's top level only (stage 3 runs the engine at capacity), sampled
as stage 3 samples (`generate.sampling`: temperature, top_p, seed; `decide.max_tokens` long), in
`decide.repetitions` interleaved rounds (baseline, alt1, alt2, then alt2, alt1, baseline), with the
speculation sweep's machinery: `ArmServers` (warm-up, crashes, start times), `measure_level`, the
machine readings and the intervals of kit.decide.measure.noise. It is a second, small sweep and not a cross
product with every k and level: each combination is a server start (~100 s for a 27B model on the
H200), and a setting that moves throughput at capacity moves it for the arm stage 3 runs.

Which alternative wins is kit.decide.checks.settings_choice's. Every measurement goes to
`sweep_backends.parquet`, each server's log to logs/ (`sweep-<setting>-<value>`).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

import pandas as pd

from kit.decide.measure.level import stage3_sampling
from kit.decide.measure.servers import ArmServers, Slot
from kit.decide.measure.slots import SweepLog, run_slots
from kit.decide.measure.tables import RUN_COLUMNS, flag_slow
from kit.decide.sweep.setup import SweepSetup
from kit.decide.sweep.sweep import interleaved
from kit.engines.arms import Arm
from kit.engines.flavors import flavor, server_env
from kit.engines.launcher import discover
from kit.errors import ParamsError
from kit.params import RunParams
from kit.progress import progress

BASELINE = "baseline"
"""The name of the baseline's server and rows: the chosen arm with the params' own settings."""


@dataclass(frozen=True)
class Alternative(Arm):
    """One server of the settings sweep: the chosen arm with `setting` set to `value` (no setting: the
    baseline, the params' own engine)."""

    setting: str | None = None
    value: str | None = None

    @property
    def name(self) -> str:
        if self.setting is None:
            return BASELINE
        return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{self.setting}-{self.value}")

    @property
    def arm(self) -> Arm:
        return Arm(self.k, self.algorithm)


def alternatives(params: RunParams, arm: Arm) -> list[Alternative]:
    """The baseline, then one alternative per value of `decide.backends` that differs from the params'
    own value of its setting."""
    out = [Alternative(arm.k, arm.algorithm)]
    for setting, values in params.decide.backends.items():
        own = getattr(params.engine, setting)
        out += [Alternative(arm.k, arm.algorithm, setting=setting, value=v) for v in values if v != own]
    return out


def launch_problems(params: RunParams) -> list[str]:
    """What the installed engine cannot launch among `decide.backends`: a setting whose flag its
    `--help` lacks, or a value its flag's choices leave out (read once and cached:
    kit.engines.launcher). Nothing is said where the launcher cannot be read (the server's own start
    then says why, and that alternative is named as failed)."""
    fl = flavor(params.engine.flavor)
    wanted = {s: v for s, v in params.decide.backends.items() if fl.backend_settings.get(s)}
    if not wanted:
        return []
    launcher = discover(params.engine_python, fl, env={**os.environ, **server_env(params)})
    if launcher is None:
        return []
    out = []
    for setting, values in wanted.items():
        flag = str(fl.backend_settings[setting])
        if not launcher.accepts(flag):
            out.append(
                f"decide.backends.{setting}: the installed {fl.title} ({launcher.version}) has no {flag}; "
                f"remove {setting} from decide.backends"
            )
            continue
        out += [f"decide.backends.{setting}: {p}" for v in values if (p := launcher.check_choice(flag, v))]
    return out


def check_backends(params: RunParams) -> None:
    """Refuse, before any server starts, a settings sweep the installed engine cannot launch."""
    problems = launch_problems(params)
    if problems:
        raise ParamsError("; ".join(problems) + " (then run kit decide again)")


def backend_slots(alts: list[Alternative], top: int, rounds: int) -> list[Slot]:
    """Interleaved rounds at the top level, the order reversed every other round (ABBA)."""
    return interleaved(list(alts), [top], range(rounds), together=False)


def with_setting(params: RunParams, alt: Alternative) -> RunParams:
    """`params` with the alternative's setting on its engine (the baseline: as they are)."""
    if alt.setting is None:
        return params
    engine = params.engine.model_copy(update={alt.setting: alt.value})
    return params.model_copy(update={"engine": engine})


@dataclass
class BackendSweep:
    """What the settings sweep measured: every measurement (judged), each alternative's server start
    times, and the ones that would not start or kept dying (name -> why)."""

    alternatives: list[Alternative]
    runs: pd.DataFrame
    starts: dict[str, list[float]]
    failed: dict[str, str]
    crashed: dict[str, str]
    concurrency: int


def run_backends(setup: SweepSetup, arm: Arm) -> BackendSweep:
    """Measure the chosen `arm` under each alternative of `decide.backends` (on the sweep's servers'
    params, prefix cache off); write `sweep_backends.parquet`."""
    params, folder, prompts = setup.server_params, setup.folder, setup.prompts
    hybrid, together, running_caps = setup.hybrid, setup.together, setup.running_caps
    d = params.decide
    alts = alternatives(params, arm)
    top = max(d.concurrencies)
    together = together and len(alts) <= 1 + len(d.spec_steps)  # as many servers as the arms fitted
    servers = ArmServers(
        params, folder, alts, hybrid, together, prompts, running_caps, warm_sampling=stage3_sampling(params)
    )
    servers.arm_params = {a.name: with_setting(servers.arm_params[a.name], a) for a in alts}
    slots = backend_slots(alts, top, d.repetitions)
    sweep_log = SweepLog(folder.logs / "sweep.log")
    sweep_log.line(
        f"settings sweep: {arm.name} at {top} concurrent, sampled as stage 3, {len(alts)} server(s) "
        f"({', '.join(a.name for a in alts)}), {d.repetitions} round(s)"
    )
    bar = progress(total=len(slots), desc="settings", unit="level")
    try:
        if together:
            servers.start_all(alts)
        rows = run_slots(slots, servers, prompts, bar, sweep_log, time.monotonic(), sampled=True)
    finally:
        servers.stop_all()
        bar.close()
    for name, why in {**servers.failed, **servers.crashed}.items():
        status = "failed" if name in servers.failed else "crashed"
        rows.append({"arm": name, "concurrency": top, "phase": "sweep", "status": status, "reason": why})
    runs = flag_slow(pd.DataFrame(rows).reindex(columns=[*RUN_COLUMNS, "setting", "value"]))
    by_name = {a.name: a for a in alts}
    runs["setting"] = [getattr(by_name.get(n), "setting", None) for n in runs.arm]
    runs["value"] = [getattr(by_name.get(n), "value", None) for n in runs.arm]
    runs.to_parquet(folder.sweep_backends, index=False)
    starts = dict(servers.started)
    if together and servers.start_s:  # side by side they started together: that time for each
        starts = {a.name: [servers.start_s[0]] for a in alts}
    return BackendSweep(alts, runs, starts, dict(servers.failed), dict(servers.crashed), top)
