"""The four stage artifacts as typed records, read and written through `RunFolder`:

    ProbeReport   probe.json      stage 1   folder.read_probe()     folder.write_probe(report)
    Decision      decision.json   stage 2   folder.read_decision()  folder.write_decision(decision)
    Manifest      manifest.json   stage 3   folder.read_manifest()  files.write_manifest(manifest)
                  (manifest-s<i>of<N>.json for `--shard i/N`: folder.shard(i, N).read_manifest())
    Summary       summary.json    stage 4   folder.read_summary()   folder.write_summary(summary)

Frozen dataclasses of the standard library, not pydantic models: `RunFolder` reads and writes them,
and the probe's GPU-box script (benchmarks/probe_gpu.py) imports RunFolder and builds a ProbeReport
without the kit's dependencies. One module per file (probe_json, decision_json, manifest_json,
summary_json), on the base in kit.artifacts.record; import them from here.
"""

from kit.artifacts.decision_json import (
    MEASURED,
    AdaptiveComparison,
    AdaptiveLevel,
    ArmCrash,
    ArmForecast,
    BackendResult,
    Decision,
    EngineSettings,
    Forecast,
    LadderPoint,
    Noise,
    SkippedMeasurement,
    SweepCost,
)
from kit.artifacts.manifest_json import Manifest, TailNote
from kit.artifacts.probe_json import (
    Finding,
    GpuSection,
    ProbeReport,
    ProbeSpeculation,
    ProbeSummary,
    Recommended,
)
from kit.artifacts.record import Distribution, JSONObject, Record, arm_from_json, arm_json, optional
from kit.artifacts.summary_json import (
    Fitness,
    ForecastCheck,
    Health,
    SourceSummary,
    Summary,
    TailSpeculation,
    TailSummary,
)

__all__ = [
    "AdaptiveComparison",
    "AdaptiveLevel",
    "ArmCrash",
    "ArmForecast",
    "BackendResult",
    "Decision",
    "Distribution",
    "EngineSettings",
    "Finding",
    "Fitness",
    "Forecast",
    "ForecastCheck",
    "GpuSection",
    "Health",
    "JSONObject",
    "LadderPoint",
    "MEASURED",
    "Manifest",
    "Noise",
    "ProbeReport",
    "ProbeSpeculation",
    "ProbeSummary",
    "Recommended",
    "Record",
    "SkippedMeasurement",
    "SourceSummary",
    "Summary",
    "SweepCost",
    "TailNote",
    "TailSpeculation",
    "TailSummary",
    "arm_from_json",
    "arm_json",
    "optional",
]
