"""Notebook 02's what-if control (kit.decide.views.whatif): scenarios priced by the cost model, measured
points fixed, static HTML for reports, a widget whose controls re-draw, one line when nothing fits."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from test_decision import CONFIGS, decide_measured, load_arch_from, measured

from kit.artifacts import Decision
from kit.decide import costmodel as cm
from kit.decide.choose.decision import decide
from kit.decide.costmodel import Hardware, Scenario, Workload, accept_length
from kit.decide.views.whatif import LIVE_NOTE, draw, what_if
from kit.decide.views.whatif_model import RunBasis, gpu_names, predict_scenario, spec_wins_up_to
from kit.engines.settings import speculation
from kit.errors import CostModelError, KitError
from kit.params import DecideParams
from kit.runfolder import RunFolder

# MTP k=2 measured beside plain at three levels: a lead at 1 and 16, a loss at 64 (tok/s per round)
LEVELS = {
    ("plain", 0, 1): [60, 61, 59],
    ("spec_k2", 2, 1): [110, 112, 111],
    ("plain", 0, 16): [800, 810, 790],
    ("spec_k2", 2, 16): [1100, 1120, 1090],
    ("plain", 0, 64): [2000, 2010, 1990],
    ("spec_k2", 2, 64): [1900, 1920, 1890],
}


def _run_folder(root: Path, config: str, decision: Decision, flavor: str) -> RunFolder:
    """A run folder as stage 2 leaves it: params.yaml naming a model dir, decision.json."""
    model = root / "model"
    model.mkdir(parents=True)
    shutil.copy(CONFIGS / f"{config}.json", model / "config.json")
    run = RunFolder(root / "run")
    run.root.mkdir()
    params = {"run": "run", "model": {"path": str(model)}, "engine": {"flavor": flavor}}
    run.params.write_text(yaml.safe_dump(params))
    run.decision.write_text(json.dumps(decision.to_json()))  # as read back: int keys become strings
    return run


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory) -> RunFolder:
    """Qwen3-32B on an H200, plain and MTP k=2 measured (the efficiency fitted to the sweep)."""
    params = DecideParams(concurrencies=[1, 16, 64], spec_steps=[2])
    decision = decide_measured(measured(LEVELS), params)
    return _run_folder(tmp_path_factory.mktemp("gpu"), "qwen3_32b", decision, "sglang")


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> RunFolder:
    """The demo's shape: a small model on the CPU with transformers (no speculation), plain measured."""
    params = DecideParams(concurrencies=[1, 4, 16], spec_steps=[1, 2, 3], max_tokens=32)
    sweep, runs = measured({("plain", 0, c): [10.0 * c, 10.2 * c, 9.9 * c] for c in (1, 4, 16)})
    cpu = Hardware(20e9, 200e9, 16e9, name="cpu")
    arch = load_arch_from("tinyllama_1_1b")
    decision = decide(
        Scenario(arch, cpu, work=Workload(40, 32)),
        sweep,
        params,
        speculation("transformers", "absent"),
        runs=runs,
    )
    return _run_folder(tmp_path_factory.mktemp("cpu"), "tinyllama_1_1b", decision, "transformers")


@pytest.fixture(scope="module")
def basis(gpu_run: RunFolder) -> RunBasis:
    return RunBasis.from_folder(gpu_run)


def _ratio_at(p, c: int) -> float:
    return float(p.ladder.set_index("concurrency").ratio[c])


def _crossover(p) -> int:
    return p.crossover or 0


def test_defaults_are_the_runs_decision(basis: RunBasis) -> None:
    d = basis.default
    assert (d.gpu, d.k, d.context) == ("H200", 2, 2048)
    assert d.accept_length == pytest.approx(1.6)  # what the sweep measured at k=2
    assert d.concurrency == (1, 1024)
    p = predict_scenario(basis)
    assert list(p.ladder.columns[:4]) == ["concurrency", "plain", "spec", "ratio"]
    assert p.ladder.concurrency.min() == 1 and p.ladder.concurrency.max() == 1024
    assert len(p.ladder) <= 24, "only what the figure draws: powers of two and the points between"
    assert np.allclose(p.ladder.ratio, p.ladder.spec / p.ladder.plain)
    assert p.crossover == spec_wins_up_to(p.ladder)
    wins = p.ladder[p.ladder.ratio > 1]
    assert (
        p.crossover == wins.concurrency.max()
        and (p.ladder[p.ladder.concurrency > p.crossover].ratio <= 1).all()
    )


def test_a_higher_accept_length_raises_the_ratio_and_never_lowers_the_crossover(basis: RunBasis) -> None:
    ps = [predict_scenario(basis, k=3, accept_length=e) for e in (1.6, 2.0, 2.4, 2.8, 3.4)]
    at_one = [_ratio_at(p, 1) for p in ps]
    assert at_one == sorted(at_one) and at_one[-1] > at_one[0] * 1.5
    crossovers = [_crossover(p) for p in ps]
    assert crossovers == sorted(crossovers) and crossovers[-1] > crossovers[0]


def test_accept_length_or_acceptance_rate_clamped_to_what_k_allows(basis: RunBasis) -> None:
    by_rate = predict_scenario(basis, k=3, acceptance=0.7)
    assert by_rate.scenario.accept_length == pytest.approx(accept_length(0.7, 3))
    assert predict_scenario(basis, k=2, accept_length=9.0).scenario.accept_length == 3.0
    assert predict_scenario(basis, k=2, accept_length=0.2).scenario.accept_length == 1.0
    with pytest.raises(CostModelError, match="not both"):
        predict_scenario(basis, accept_length=2.0, acceptance=0.7)


def test_the_gpu_changes_the_curve_and_every_datasheet_gpu_answers(basis: RunBasis) -> None:
    ratios = {g: predict_scenario(basis, gpu=g).ladder.ratio.to_numpy() for g in ("H200", "B200", "L40S")}
    assert not np.allclose(ratios["H200"], ratios["B200"])
    assert not np.allclose(ratios["H200"], ratios["L40S"])
    for gpu in gpu_names():  # A100s have no FP8 rate, A10G cannot hold the weights: no error either way
        p = predict_scenario(basis, gpu=gpu)
        assert p.scenario.gpu == gpu
    a10g = predict_scenario(basis, gpu="A10G")
    assert a10g.ladder.plain.isna().all() and a10g.crossover is None
    with pytest.raises(CostModelError, match="not in the kit's datasheet"):
        predict_scenario(basis, gpu="TPU v5")


def test_measured_points_stay_fixed_whatever_the_controls(gpu_run: RunFolder) -> None:
    w = what_if(gpu_run, interactive=False)
    before = w.basis.measured.copy()
    assert len(before) == 3
    assert before.set_index("concurrency").ratio[1] == pytest.approx(111 / 60)  # medians of the rounds

    def scatter(p) -> np.ndarray:
        ax = draw(w.basis, p)
        points = np.concatenate([c.get_offsets() for c in ax.collections if len(c.get_offsets())])
        ax.figure.clf()
        return points

    first = scatter(w.prediction)
    w.set(gpu="B200", accept_length=3.0, k=4, concurrency=(8, 256), context=16384)
    pd.testing.assert_frame_equal(w.basis.measured, before)
    assert np.array_equal(scatter(w.prediction), first)
    assert w.caption.endswith("measured points: 3")


def test_static_html_has_the_default_figure_caption_and_live_note(gpu_run: RunFolder) -> None:
    w = what_if(gpu_run, interactive=False)
    assert w.widget is None
    bundle = w._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}
    page = bundle["text/html"]
    assert "<img src='data:image/png;base64," in page
    assert "live when this notebook runs in JupyterLab" in LIVE_NOTE and html.escape(LIVE_NOTE) in page
    assert '<span class="kit-whatif-caption">H200 · accept length 1.60 · k=2 · context 2K: ' in page
    assert "speculation predicted to win up to concurrency" in w.caption
    w.set(gpu="B200")
    assert w.html == page, "the static page keeps the run's own scenario"


def test_the_widget_redraws_on_every_control(gpu_run: RunFolder) -> None:
    pytest.importorskip("ipywidgets")
    w = what_if(gpu_run, interactive=True)
    box = w.widget
    assert "kit-whatif" in box._dom_classes
    names = ("accept", "k", "concurrency", "context", "gpu")
    shown = [c for row in box.children[:2] for c in row.children]
    controls = {n: c for c in shown for n in names if f"kit-whatif-{n}" in c._dom_classes}
    assert set(controls) == {"accept", "k", "concurrency", "context", "gpu"}
    assert all(c.description for c in controls.values())
    caption, out = box.children[-2:]
    assert caption.value.startswith('<span class="kit-whatif-caption">H200 · ')
    assert len(out.outputs) == 1 and "image/png" in out.outputs[0]["data"]
    assert "application/vnd.jupyter.widget-view+json" in w._repr_mimebundle_()

    start = (w.ladder.copy(), w.crossover)
    controls["accept"].value = 2.8
    assert w.scenario.accept_length == 2.8 and _ratio_at(w.prediction, 1) > start[0].ratio.iloc[0]
    assert w.crossover >= (start[1] or 0) and "accept length 2.80" in caption.value
    controls["gpu"].value = "B200"
    assert "B200 · accept length 2.80" in caption.value and w.scenario.gpu == "B200"
    controls["k"].value = 1
    assert controls["accept"].max == 2.0 and controls["accept"].value == 2.0, "clamped to [1, k + 1]"
    assert "k=1" in caption.value and w.scenario.accept_length == 2.0
    controls["concurrency"].value = (4, 64)
    assert (w.ladder.concurrency.min(), w.ladder.concurrency.max()) == (4, 64)
    assert w.crossover is None or 4 <= w.crossover <= 64
    controls["context"].value = 32768
    assert "context 32K" in caption.value
    assert caption.value == f'<span class="kit-whatif-caption">{html.escape(w.caption)}</span>'

    w.set(gpu="H200", k=2, accept_length=1.6, concurrency=(1, 1024), context=2048)
    assert controls["gpu"].value == "H200" and controls["concurrency"].value == (1, 1024)
    pd.testing.assert_frame_equal(w.ladder, start[0])
    with pytest.raises(KitError, match="unknown setting"):
        w.set(batch=3)


def test_a_run_without_a_gpu_shows_an_h200_and_says_so(cpu_run: RunFolder) -> None:
    w = what_if(cpu_run, interactive=False)
    assert w.caption.startswith("H200 (the run had no GPU) · accept length 2.73 · k=3 · context 72: ")
    assert w.basis.gpus[0] == "cpu (this run)" and "RTX PRO 6000 Blackwell" in w.basis.gpus
    assert w.basis.hardware("H200")[1] is cm.DEFAULT_EFFICIENCY, "a CPU calibration says nothing of a GPU"
    assert w.basis.measured.empty and w.caption.endswith("measured points: 0")
    on_h200 = w.ladder.copy()
    w.set(gpu="cpu (this run)")
    assert w.caption.startswith("cpu (this run) · ") and not np.allclose(w.ladder.ratio, on_h200.ratio)


def test_nothing_to_predict_is_one_line_not_a_traceback(gpu_run: RunFolder, tmp_path: Path) -> None:
    empty = what_if(tmp_path / "never-ran", interactive=True)
    assert empty.widget is None and empty.ladder.empty and empty.crossover is None
    assert empty.html.count("\n") == 0 and "nothing to predict" in empty.html and "kit run" in empty.html
    with pytest.raises(KitError, match="nothing to predict"):
        empty.set(k=2)

    moved = RunFolder(tmp_path / "moved")
    shutil.copytree(gpu_run.root, moved.root)
    moved.params.write_text(yaml.safe_dump({"run": "moved", "model": {"path": str(tmp_path / "gone")}}))
    assert "has no config.json" in what_if(moved).message

    old = json.loads(gpu_run.decision.read_text())
    del old["workload"]
    moved.params.write_text(gpu_run.params.read_text())
    moved.decision.write_text(json.dumps(old))
    assert "decision.json has no 'workload'" in what_if(moved).message


def test_nothing_in_memory_is_said_in_the_caption(basis: RunBasis) -> None:
    from kit.decide.views.whatif import WhatIf

    w = WhatIf(basis)
    w.set(gpu="L4", context=131072)
    assert w.crossover is None and w.ladder.ratio.isna().all()
    assert "not one sequence fits in memory" in w.caption and w.image is not None


def test_the_band_is_the_held_out_error_and_says_what_was_not_checked(gpu_run: RunFolder) -> None:
    """The shading is the model's error on held-out published tables (not a fixed ±), around the
    prediction; a scenario outside what those tables covered says so in the caption."""
    from kit.decide.costmodel.validation import HELD_OUT
    from kit.index_page import _key_figure

    w = what_if(gpu_run, interactive=False)
    band = w.prediction.band
    assert band.lo == min(h.min_error for h in HELD_OUT) and band.hi == max(h.max_error for h in HELD_OUT)
    assert band.label in w.caption and "outside" not in w.caption  # Qwen3-32B, MTP, H200: all checked
    ax = draw(w.basis, w.prediction)
    shaded = ax.collections[0].get_paths()[0].vertices[:, 1]
    ratio = w.ladder.dropna(subset=["ratio"]).ratio
    assert shaded.max() == pytest.approx((ratio / (1 + band.lo)).max(), rel=1e-6)
    far = w.set(gpu="B200")
    assert "outside what the model was checked on: GPU class Blackwell" in w.caption and far.band.outside
    figure = _key_figure(gpu_run)
    assert "held-out error" in figure and "Shaded" in figure
