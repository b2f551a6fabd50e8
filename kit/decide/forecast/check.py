"""Stage 2's forecast judged against what stage 3 then took (summary.json's `forecast_check`).

    check = forecast_check(decision, manifest, completion_tokens, tail)

Compared for the arm stage 3 ran: the time generating (the forecast's wall time less its start-up,
against the manifest's `generating_s` over every session), the output tokens, the tail, each with
the error in percent ((forecast - actual) / actual); whether the actual lies in the interval; and
which input missed: the output lengths (forecast tokens against those made) or the speed (the
forecast's tokens per second of generating against the run's), each when off by more than `OFF`,
and outside the interval always the one off the most. A run that is not complete is not
judged: its time and tokens are of part of the plan.
"""

from __future__ import annotations

from dataclasses import replace

from kit.artifacts import Decision, ForecastCheck, Manifest, TailSummary
from kit.display import hours, tok_s
from kit.engines.arms import arm_name

OFF = 0.15
"""An input off by more than this share is named as what missed."""


def ran_arm(manifest: Manifest) -> str | None:
    """The arm stage 3 ran: the decision's choice when it applied it, plain without speculation."""
    chosen = (manifest.settings_from_decision or {}).get("chosen_arm")
    if chosen:
        return str(chosen)
    spec = (manifest.engine or {}).get("speculative")
    if not spec:
        return "plain"
    steps = spec.get("num_steps") if isinstance(spec, dict) else None
    return arm_name(int(steps)) if steps else None


def _pct(forecast: float | None, actual: float | None) -> float | None:
    if not forecast or not actual:
        return None
    return round(100 * (forecast - actual) / actual, 1)


def what_missed(errors: dict[str, float | None], inside: bool) -> list[str]:
    """The inputs off by more than `OFF`; outside the interval with none of them that far off, the
    one off the most (the interval was too narrow for it): a miss is always named."""
    known = {name: abs(pct) for name, pct in errors.items() if pct is not None}
    missed = [name for name, pct in known.items() if pct > 100 * OFF]
    if not missed and not inside and known:
        missed = [max(known, key=known.__getitem__)]
    return missed


def forecast_check(
    decision: Decision | None, manifest: Manifest | None, output_tokens: int, tail: TailSummary | None
) -> ForecastCheck | None:
    """The check, or None when stage 2 made no forecast."""
    forecast = decision.forecast if decision is not None else None
    if forecast is None:
        return None
    if manifest is None or not manifest.complete:
        return ForecastCheck(
            judged=False, why="the run is not complete: its time and tokens are of part of the plan"
        )
    arm = ran_arm(manifest)
    f = forecast.arm(arm)
    if f is None:
        return ForecastCheck(
            arm=arm, judged=False, why=f"stage 2 forecast no arm {arm!r}, the one stage 3 ran"
        )
    actual_s = manifest.generating_s
    forecast_s = f.wall_s - f.startup_s
    lo_s, hi_s = f.wall_lo_s - f.startup_s, f.wall_hi_s - f.startup_s
    if forecast.requests != manifest.rows and manifest.rows:
        why = f"stage 3 made {manifest.rows} rows, the forecast was for {forecast.requests} requests"
        return ForecastCheck(arm=arm, judged=False, why=why)
    speed = output_tokens / actual_s if actual_s else None
    forecast_speed = forecast.output_tokens / forecast_s if forecast_s else None
    tokens_pct, speed_pct = _pct(forecast.output_tokens, output_tokens), _pct(forecast_speed, speed)
    inside = actual_s is not None and lo_s <= actual_s <= hi_s
    missed = what_missed({"output lengths": tokens_pct, "speed": speed_pct}, inside)
    check = ForecastCheck(
        arm=arm,
        judged=True,
        generating_s=actual_s,
        forecast_s=round(forecast_s, 1),
        forecast_lo_s=round(lo_s, 1),
        forecast_hi_s=round(hi_s, 1),
        wall_error_pct=_pct(forecast_s, actual_s),
        inside_interval=inside,
        output_tokens=int(output_tokens),
        forecast_output_tokens=forecast.output_tokens,
        tokens_error_pct=tokens_pct,
        output_tok_s=round(speed, 1) if speed else None,
        forecast_output_tok_s=round(forecast_speed, 1) if forecast_speed else None,
        speed_error_pct=speed_pct,
        tail_s=tail.duration_s if tail is not None and tail.known else None,
        forecast_tail_s=f.tail_s,
        missed=missed,
    )
    return replace(check, sentence=check_sentence(check))


def _off(pct: float | None) -> str:
    """A forecast's error over the actual, in words that carry its sign's meaning: 'forecast 51% under',
    'forecast 94% over', 'as forecast' (where it rounds to nothing)."""
    if pct is None:
        return "not compared"
    shown = f"{abs(pct):.0f}"
    return "as forecast" if shown == "0" else f"forecast {shown}% {'under' if pct < 0 else 'over'}"


def check_sentence(c: ForecastCheck) -> str:
    """'stage 2 forecast 1 h 05 min generating (1 h 03 min to 1 h 08 min); it took 1 h 10 min (forecast
    7% under, inside its interval); what missed: speed (5,100 tok/s forecast, 4,700 tok/s
    measured)': each error said as over or under, not as a bare sign; the inputs, output
    tokens and speed, said where one missed (summary.json's `forecast_check` keeps both always)."""
    if not c.judged:
        return f"forecast not judged: {c.why}"
    where = "inside its interval" if c.inside_interval else "outside its interval"
    took = f"{hours(c.generating_s or 0)} ({_off(c.wall_error_pct)}, {where})"
    figures = {
        "output lengths": f"{c.forecast_output_tokens:,} output tokens forecast, {c.output_tokens:,} made",
        "speed": f"{tok_s(c.forecast_output_tok_s)} forecast, {tok_s(c.output_tok_s)} measured",
    }
    text = (
        f"stage 2 forecast {hours(c.forecast_s)} generating ({hours(c.forecast_lo_s)} to "
        f"{hours(c.forecast_hi_s)}); it took {took}"
    )
    if c.missed:
        text += "; what missed: " + " and ".join(
            f"{m} ({figures[m]})" if m in figures else m for m in c.missed
        )
    return text
