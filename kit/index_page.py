"""index.html of a run's report: the run's questions answered in sentences beside the figure that
matters most (measured vs predicted output tokens/s per arm), then the stage pages. Everything it
shows is read from the run folder; a stage that has not run is named as missing."""

from __future__ import annotations

import base64
import dataclasses
import html
import io
from pathlib import Path

from matplotlib.figure import Figure

from kit.analyse.tail_words import tail_sentence
from kit.analyse.view import fitness_answer
from kit.artifacts import Decision, Fitness, Manifest, Summary
from kit.decide.choose.decision import speculation_label
from kit.decide.choose.reasons import sweep_cost_sentence
from kit.decide.costmodel.validation import ErrorBand
from kit.decide.views.plots import throughput_alt, throughput_curves
from kit.decide.views.verdict import against_sweep, decision_answer
from kit.decide.views.whatif_model import band_for_run
from kit.decide.views.worth import worth_for_run
from kit.display import Answer, timestamp
from kit.export.run import CARD
from kit.generate.verdict import (
    data_answer,
    failure_answer,
    failures_by_reason,
    generation_answer,
    load_snippet,
    throughput_answer,
)
from kit.params import saved_params
from kit.probe.view import gpu_line, probe_answer
from kit.runfolder import RunFolder

STAGE_PAGES = {
    "01_probe_environment": (
        "1 · Probe the environment",
        "GPUs, the engine's environment, the model directory, memory plan and attention backends: "
        "every check with its reason",
    ),
    "02_decide_mtp": (
        "2 · Decide on speculative decoding",
        "the measured sweep beside the cost model's prediction, the decision and the settings stage 3 used",
    ),
    "03_generate": ("3 · Generate", "the prompt plan per source, the run, what the rows kept, failures"),
    "04_analyse_outputs": (
        "4 · Analyse the outputs",
        "lengths, truncation, quality flags, throughput over time, sample rows",
    ),
}
DECIDE_PAGE = "02_decide_mtp"
INDEX_CSS = """
body{font:15px/1.45 system-ui,sans-serif;max-width:84em;margin:1em auto;padding:0 1.2em;color:#1d1d1f}
h1{font-size:1.6em;margin:.2em 0}.sub{color:#555;margin:.1em 0 .8em}
.top{display:flex;gap:1.5em;align-items:flex-start;flex-wrap:wrap}
.answers{flex:1 1 34em;margin:0;padding:0;list-style:none}
.answers li{margin:0 0 .55em;padding:.35em .7em;border-left:5px solid #2e8b57;background:#f6faf7}
.answers li.warn{border-color:#c88a00;background:#fffaf0}
.answers li.fail{border-color:#c0392b;background:#fdf3f2}
.answers li.missing{border-color:#999;background:#f4f4f4}
.topic{display:inline-block;min-width:6.5em;font-size:.8em;text-transform:uppercase;letter-spacing:.05em;color:#555}
code{font-size:.9em;background:#f0f0f0;padding:0 .25em;overflow-wrap:anywhere}
code.load{display:block;margin:.3em 0 .1em;padding:.3em .5em;white-space:pre-wrap}
figure{flex:1 1 30em;margin:0}figure img{width:100%;max-width:40em;border:1px solid #ddd}
figcaption{font-size:.85em;color:#555}
.warn{color:#a40}
"""


def _page_item(stem: str, pages: dict[str, tuple[Path, list[str]]]) -> str:
    title, what = STAGE_PAGES.get(stem, (stem, ""))
    if stem not in pages:
        why = "not rendered: the stage notebook has not run"
        return f"<li>{html.escape(title)}: <span class='warn'>{why}</span></li>"
    page, remote = pages[stem]
    warn = (
        f" <span class='warn'>(fetches {len(remote)} resource(s) from the network: "
        f"{html.escape(', '.join(remote[:3]))})</span>"
        if remote
        else ""
    )
    return f"<li><a href='{html.escape(page.name)}'>{html.escape(title)}</a>: {html.escape(what)}{warn}</li>"


def run_answers(folder: RunFolder) -> list[Answer]:
    """The run's questions answered from its folder, in the order the index shows them (a file that
    is absent or unreadable is a question not answered yet)."""
    manifest = folder.read_manifest(lenient=True)
    summary = folder.read_summary(lenient=True)
    decision = folder.read_decision(lenient=True)
    worth = None
    if decision is not None and not any(r.spec_k and r.status == "ok" for r in decision.table):
        band = worth_for_run(folder)
        worth = band.headline() if band else None
    fitness = summary.fitness if summary is not None else None
    name = speculation_label(saved_params(folder.params))
    return [
        _data(folder, manifest, fitness),
        probe_answer(folder.read_probe(lenient=True)),
        _with_cost(
            _with_adaptive(_with_forecast(decision_answer(decision, name, worth), decision), decision),
            decision,
        ),
        _judged(generation_answer(folder, manifest), summary),
        _beside_fitness(failure_answer(failures_by_reason(folder, summary)), fitness),
        _with_tail(
            throughput_answer(summary, manifest, baseline=_against_sweep(decision, summary, name)), summary
        ),
    ]


def _against_sweep(decision: Decision | None, summary: Summary | None, name: str) -> str | None:
    """The run's tokens/s against the sweep's interval for its arm: the decision's answer above states
    that figure, so the first screen does not say it twice."""
    return against_sweep(decision, summary.health.output_tok_s if summary is not None else None, name)


def _data(folder: RunFolder, manifest: Manifest | None, fitness: Fitness | None) -> Answer:
    """The data first: the rows fit to train on and why the rest are not (stage 4), where the export
    of them is, and where every row made is; without stage 4, where the rows are."""
    made = data_answer(folder, manifest)
    if fitness is None:
        return made
    answer = fitness_answer(fitness)
    if (folder.dataset / CARD).exists():  # every row made is in the run folder the subtitle names
        where = (
            "Exported to dataset/ in the run folder (`train`: these rows; `rejected`: the rest, with why)."
        )
    else:
        every = f"Every row made: {made.headline} {made.detail}"
        where = f"`kit export RUN --to DIR` writes them as a dataset. {every}"
    return dataclasses.replace(answer, detail=f"{answer.detail} {where}")


def _beside_fitness(answer: Answer, fitness: Fitness | None) -> Answer:
    """ "Failures: none" must not read as "all is well" beside answers that are mostly unusable: with
    rows left out of the data, it says how many, and takes the data's colour where that is worse."""
    if fitness is None or fitness.usable >= fitness.rows or answer.status == "missing":
        return answer
    left = fitness.rows - fitness.usable
    detail = (
        f"{answer.detail} All the same, {left:,} answer(s) are not fit to keep (the first line says why)."
    )
    worse = fitness_answer(fitness).status != "ok" and answer.status == "ok"
    return dataclasses.replace(answer, detail=detail, status="warn" if worse else answer.status)


def _then(answer: Answer, sentence: str) -> Answer:
    """The answer with `sentence` after its detail (the answer as it is when there is none)."""
    return dataclasses.replace(answer, detail=f"{answer.detail} {sentence}") if sentence else answer


def _with_tail(answer: Answer, summary: Summary | None) -> Answer:
    """The throughput answer, then the tail's sentence (kit.analyse.tail) where stage 4 measured it;
    what speculation would have done there only where it could act on it (it ran, switched, or would
    save where it is available: the stage 4 page says the rest)."""
    tail = summary.tail if summary is not None else None
    if tail is None:
        return answer
    spec = tail.speculation
    acts = spec is not None and (
        spec.status in ("already speculating", "switched") or (spec.status == "saves" and spec.available)
    )
    return _then(answer, tail_sentence(tail, speculation=acts))


def _with_forecast(answer: Answer, decision: Decision | None) -> Answer:
    """The decision, then stage 3 in hours per arm (kit.decide.forecast.job) where stage 2 made one."""
    forecast = decision.forecast if decision is not None else None
    return _then(
        answer, f"Forecast for the whole plan: {forecast.sentence}." if forecast and forecast.sentence else ""
    )


def _with_adaptive(answer: Answer, decision: Decision | None) -> Answer:
    """The decision, then the engine's own adaptive speculation against it (kit.decide.measure.adaptive) where
    the sweep measured it (`decide.adaptive_k`)."""
    cmp = decision.adaptive if decision is not None else None
    return _then(answer, f"The engine's own switch: {cmp.sentence}." if cmp is not None else "")


def _with_cost(answer: Answer, decision: Decision | None) -> Answer:
    """The decision, then what its sweep took beside what it is worth on this job (decision.json's
    `sweep_cost`, kit.decide.choose.reasons.sweep_cost_sentence)."""
    cost = decision.sweep_cost if decision is not None else None
    arms = len(decision.forecast.arms) if decision is not None and decision.forecast is not None else 0
    if cost is None or (not cost.skipped and arms < 2):  # one arm measured in full: nothing it saved
        return answer
    sentence = sweep_cost_sentence(cost, decision.forecast)
    return _then(answer, f"{sentence[0].upper()}{sentence[1:]}.")


def _judged(answer: Answer, summary: Summary | None) -> Answer:
    """The generation, then stage 2's forecast against what it took (kit.decide.forecast.check)."""
    check = summary.forecast_check if summary is not None else None
    text = check.sentence if check is not None else ""
    return _then(answer, f"{text[0].upper()}{text[1:]}." if text else "")


def _answer_item(a: Answer, folder: RunFolder) -> str:
    detail = html.escape(a.detail)
    if a.topic == "Data" and a.status != "missing":
        detail += f" Load them with:<code class='load'>{html.escape(_load_line(folder))}</code>"
    return (
        f"<li class='{a.status}'><span class='topic'>{html.escape(a.topic)}</span> "
        f"<b>{html.escape(a.headline)}</b>: {detail}</li>"
    )


def _load_line(folder: RunFolder) -> str:
    """The line that loads the export (the usable rows) where there is one, else every row made."""
    if (folder.dataset / CARD).exists():
        return f'datasets.load_dataset("{folder.dataset.resolve()}")'
    return load_snippet(folder)


def _key_figure(folder: RunFolder) -> str:
    """Measured vs predicted output tok/s per arm and concurrency, as an embedded <figure>."""
    decision = folder.read_decision(lenient=True)
    if decision is None or not decision.table:
        why = "No decision yet: the measured vs predicted figure needs decision.json (stage 2)."
        return f"<figure><figcaption>{why}</figcaption></figure>"
    name = speculation_label(saved_params(folder.params))
    band = band_for_run(folder)
    data = base64.b64encode(key_figure_png(decision, name, band)).decode()
    return (
        f"<figure><img alt='{html.escape(throughput_alt(decision, name), quote=True)}' "
        f"src='data:image/png;base64,{data}'><figcaption>Output tokens/s per arm and concurrency: "
        "measured by the sweep (points) and predicted by the cost model (dashed). "
        f"{html.escape(_band_caption(band))}"
        f"<a href='{folder.report_page(DECIDE_PAGE).name}'>Decision page</a>.</figcaption></figure>"
    )


def key_figure_png(decision: Decision, name: str, band: ErrorBand | None) -> bytes:
    """The index's figure as PNG, cut to what it draws (bbox_inches="tight"): its title, axes and the
    legend under them all inside the image (a fixed canvas cut the title at both ends)."""
    fig = Figure(figsize=(6.4, 3.8))
    throughput_curves(decision, fig.subplots(), name, band)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return buf.getvalue()


def _band_caption(band: ErrorBand | None) -> str:
    """What the shading is, and what of the run the model was not checked on."""
    if band is None:
        return ""
    outside = f" This run lies {band.outside_sentence}." if band.outside else ""
    return f"Shaded: where the truth lay for the speculative predictions, the model's {band.label}.{outside} "


def index_html(folder: RunFolder, pages: list[tuple[Path, list[str]]]) -> str:
    """The index page: the run's answers in sentences beside the key figure, then the stage pages."""
    answers = "".join(_answer_item(a, folder) for a in run_answers(folder))
    by_stem = {p.stem: (p, remote) for p, remote in pages}
    stems = list(STAGE_PAGES) + [s for s in by_stem if s not in STAGE_PAGES]
    links = "".join(_page_item(s, by_stem) for s in stems)
    summary = folder.read_summary(lenient=True)
    gaps = summary.gaps if summary is not None else []
    gap_html = (
        "<h2>Gaps</h2><ul>" + "".join(f"<li class='warn'>{html.escape(str(g))}</li>" for g in gaps) + "</ul>"
        if gaps
        else ""
    )
    title = html.escape(f"Run {folder.root.name}")
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title}: report</title>"
        f"<style>{INDEX_CSS}</style></head><body><h1>{title}</h1>"
        f"<p class='sub'>{html.escape(_subtitle(folder))}</p>"
        f"<div class='top'><ul class='answers'>{answers}</ul>{_key_figure(folder)}</div>"
        f"<h2>Stage pages</h2><ul>{links}</ul>{gap_html}</body></html>\n"
    )


def _subtitle(folder: RunFolder) -> str:
    """Model, engine and hardware of the run, and where its folder is."""
    params = saved_params(folder.params)
    if params is None:
        name, engine = "?", "?"
    else:
        name = "the demo model" if params.model.demo else Path(params.model.path).name
        engine = params.engine.flavor
    probe = folder.read_probe(lenient=True)
    hardware = gpu_line(probe) if probe is not None else "hardware not probed"
    manifest = folder.read_manifest(lenient=True)
    finished = manifest.finished_at if manifest is not None else None
    when = f" · finished {timestamp(finished)}" if finished else ""
    return f"{name} on {engine}, {hardware}{when} · run folder {folder.root.resolve()}"
