"""Which arms the sweep measured and which it could not, and every crash of an arm's server.

The sweep (kit.decide.sweep.sweep) marks an arm `skipped` (the engine or model cannot run it: no MTP
weights, no speculation in this engine), `failed` (its server would not start, or its requests
failed) or `crashed` (its server died while measured more often than `decide.crash_restarts`). A
server that died and came back is a `crashed` measurement in sweep_runs.parquet with `restarted`
true, and its level was measured again. decision.json says all of it: `unmeasured` (arm -> why),
`crashes` (each with the engine's own error) and `decided_by` ("measured in part" when an arm
that could run was not measured), and its reasons say it in sentences.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from kit.artifacts import ArmCrash

NOT_MEASURED = ("skipped", "failed", "crashed")


def unmeasured(sweep: pd.DataFrame | None) -> dict[str, str]:
    """{arm: why} for every arm with no level measured, or given up after crashes."""
    if sweep is None or sweep.empty:
        return {}
    out: dict[str, str] = {}
    for arm, g in sweep.groupby("arm", sort=False):
        if (g.status == "answers_differ").all():
            continue  # measured, and set aside for its answers: kit.decide.checks.answers says so
        gave_up = (g.status == "crashed").all()
        if gave_up or not ((g.status == "ok") & g.output_tok_s.notna()).any():
            bad = g[g.status.isin(NOT_MEASURED)]
            row = bad.iloc[0] if len(bad) else g.iloc[0]
            out[str(arm)] = f"{row.status}: {_first_line(row.reason)}"
    return out


def decided_by(source: str, missing: dict[str, str]) -> str:
    """'measured', 'measured in part' (an arm the engine could run was not measured: `missing`, the
    sweep's `unmeasured`), 'predicted'."""
    if source != "measured":
        return source
    failed = [why for why in missing.values() if not why.startswith("skipped")]
    return "measured in part" if failed else "measured"


def crashes(runs: pd.DataFrame | None) -> list[ArmCrash]:
    """Every measurement whose server died, in the order they happened."""
    if runs is None or runs.empty or "crash_in_flight" not in runs:
        return []
    dead = runs[(runs.status == "crashed") & runs["round"].notna()]
    return [
        ArmCrash(
            arm=str(r.arm),
            concurrency=int(r.concurrency),
            round=int(r["round"]),
            exit_code=_int(r.crash_exit_code),
            error=_str(r.crash_error),
            where=_str(r.crash_where),
            running=_int(r.crash_running),
            in_flight=_int(r.crash_in_flight),
            restarted=bool(r.restarted) if _given(r.restarted) else False,
            reason=_str(r.reason) or "",
        )
        for _, r in dead.iterrows()
    ]


def crash_sentences(missing: dict[str, str], dead: list[ArmCrash]) -> list[str]:
    """The reasons' lines on the crashes `dead` of arms whose server died but came back (measured, with
    a warning that stage 3 may meet it too); an arm given up (`missing`, the sweep's `unmeasured`)
    is said with its last crash and what to try in `unmeasured_sentences`."""
    given_up = {a for a, why in missing.items() if why.startswith("crashed")}
    out = []
    for arm in dict.fromkeys(c.arm for c in dead):
        if arm in given_up:
            continue
        mine = [c for c in dead if c.arm == arm]
        first = mine[0]
        said = first.error or "no error in its log"
        out.append(
            f"{arm}'s server died {len(mine)} time(s) while measured (first at concurrency "
            f"{first.concurrency}, round {first.round}: {said}); it was restarted and those levels "
            "measured again, but stage 3 may meet the same crash (it restarts a dead server, up to "
            "generate.max_server_restarts in a row)"
        )
    return out


def unmeasured_sentences(sweep: pd.DataFrame | None, missing: dict[str, str]) -> list[str]:
    """One line per arm the sweep could not measure for a failure (a crash: the engine's own error,
    where it was raised, and what to try); arms skipped by design are said in the decision's reasons."""
    if sweep is None or sweep.empty:
        return []
    out = []
    for arm, why in missing.items():
        status = why.split(":", 1)[0]
        full = sweep[(sweep.arm == arm) & (sweep.status == status)].reason
        text = _str(full.iloc[0]) if len(full) else None
        if status == "skipped":
            continue  # said once per reason with the arms it kept out (kit.decide.choose.decision)
        if status == "crashed":
            out.append(f"{arm} crashed and is not chosen: {text}")
        else:
            out.append(f"{arm} could not be measured ({_first_line(text)}); its figures are predicted")
    return out


def _first_line(text: Any) -> str:
    text = _str(text)
    return text.splitlines()[0] if text else "unknown error"


def _given(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _int(v: Any) -> int | None:
    return int(v) if _given(v) else None


def _str(v: Any) -> str | None:
    return str(v) if _given(v) and str(v) else None
