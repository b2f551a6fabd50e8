"""One `kit generate` session of stage 3, and how its generation loop is built (on this machine or
in a Ray actor): the engines' capacity, the requests in flight, the loop's fields.

`Session` is what the orchestration (`kit.generate.run`) hands to the loop it runs here or to the
Ray job (`kit.generate.raydriver`): the run's params and folder, the `--shard` session's files, the
identity every row is stamped with, the failure log and the decision.
"""

from __future__ import annotations

import json
import logging
import resource
from dataclasses import dataclass
from typing import Any

from kit.arch import load_arch
from kit.artifacts import Decision
from kit.artifacts.manifest_sections import RunIdentity
from kit.engines.capacity import Capacity, launched_capacity, server_info_capacity
from kit.engines.request_fields import run_request_fields, tool_request_fields
from kit.errors import ModelDirError
from kit.generate.loop import MAX_IN_FLIGHT, GenerationLoop
from kit.generate.metrics import Timeline
from kit.generate.pool import Replica, ServerPool
from kit.generate.rowsampling import RowSampling
from kit.generate.store import FailureLog
from kit.params import GenerateParams, RunParams
from kit.probe.gpu import nvml_gpus
from kit.runfolder import RunFolder, ShardView

log = logging.getLogger(__name__)
DEFAULT_CONCURRENCY = 64
QUEUE_FACTOR = 2
"""Requests in flight per request the engine runs: its capacity, and as many again queued."""
OPEN_FILES_MARGIN = 1024


@dataclass(frozen=True)
class Session:
    """A session of stage 3: what the loop (here, or in Ray actors) needs besides the work."""

    params: RunParams
    files: ShardView
    """This session's files: the whole run's, or a `--shard i/N` session's."""
    shard: tuple[int, int]
    identity: RunIdentity
    """The engine, model, sampling and plan the rows are made with (`_run.json`)."""
    sampling_json: str
    sampling_hash: str
    failures: FailureLog
    decision: Decision | None
    """decision.json, when stage 2 ran."""

    @property
    def folder(self) -> RunFolder:
        return self.files.folder

    @property
    def made_with(self) -> tuple[str, str, str]:
        """What each row is stamped with: the engine's identity JSON, the sampling JSON and its hash."""
        return json.dumps(self.identity, sort_keys=True), self.sampling_json, self.sampling_hash


def hang_timeout(params: GenerateParams) -> float:
    """Seconds without any sign of life before a server counts as hung: `generate.hang_timeout_s`,
    at most half the request timeout, so that a freeze is caught before requests time out."""
    return min(params.hang_timeout_s, params.request_timeout_s / 2)


def replica_params(params: RunParams, index: int) -> RunParams:
    """Params of replica `index`: its own GPU group through CUDA_VISIBLE_DEVICES when replicas > 1."""
    eng = params.engine
    if eng.replicas == 1:
        return params
    if eng.replica_gpus is not None:
        gpus = eng.replica_gpus[index]
    else:
        per = eng.gpus_per_replica or eng.tp_size
        gpus = ",".join(str(g) for g in range(index * per, (index + 1) * per))
    new_eng = eng.model_copy(update={"env": {**eng.env, "CUDA_VISIBLE_DEVICES": gpus}})
    return params.model_copy(update={"engine": new_eng})


def context_limit(params: RunParams) -> int | None:
    """The context the server will allow: engine.context_length, else the model's max positions."""
    if params.engine.context_length:
        return params.engine.context_length
    try:
        return load_arch(params.model.path).max_positions
    except ModelDirError:  # an external server's model may not be on this disk
        return None


async def engine_capacity(pool: ServerPool, params: RunParams, servers: list[Any]) -> Capacity:
    """Requests the engines run at once (`kit.engines.capacity`): what a server that answers
    /server_info says (SGLang), else what the kit launched them with or their flavor's default for
    this device."""
    said = server_info_capacity([await r.client.server_info() for r in pool.replicas])
    if said is not None:
        return said
    launcher = getattr(servers[0], "launcher", None) if servers else None
    return launched_capacity(params.engine, launcher.distribution if launcher else None, nvml_gpus)


def loop_concurrency(params: RunParams, cap: int | None) -> int:
    """Requests in flight: the params' value, else the engine's capacity and a queue as deep again
    (a slot that frees is taken at the engine's next step: docs/lab/bench_ceiling.md), else
    DEFAULT_CONCURRENCY (the loop adds more when the engine's gauges show it idles)."""
    if params.generate.concurrency:
        return params.generate.concurrency
    if cap:
        return min(MAX_IN_FLIGHT, QUEUE_FACTOR * cap)
    return DEFAULT_CONCURRENCY


def allow_open_files(needed: int) -> None:
    """Raise this process's soft limit on open files to hold `needed` connections (up to the hard
    limit); a loop at thousands in flight would otherwise fail with EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed + OPEN_FILES_MARGIN
    if soft != resource.RLIM_INFINITY and soft < want:
        top = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))
        if top < want:
            log.warning(
                "open files are limited to %d (ulimit -n); %d requests in flight need about %d",
                top,
                needed,
                want,
            )


def replica_of(params: RunParams, server: Any, api_key: str | None) -> Replica:
    """The pool's handle on one started server."""
    return Replica(
        server, params.engine.flavor, params.model.served_name, params.generate.request_timeout_s, api_key
    )


def build_loop(
    params: RunParams,
    pool: ServerPool,
    writer: Any,
    failures: FailureLog,
    timeline: Timeline,
    rows_made_with: tuple[str, str, str],
    *,
    concurrency: int,
    **extra: Any,
) -> GenerationLoop:
    """The generation loop over `pool` for these params (this process's, or one Ray actor's).

    `writer`: a `ShardWriter` (or a Ray actor's per-block writer); `rows_made_with`: the engine's
    identity JSON, the sampling JSON and its hash stamped on each row; `extra`: GenerationLoop's
    optional fields (tail, premises, answered, show_progress)."""
    engine_json, sampling_json, sampling_hash = rows_made_with
    grow = not params.generate.concurrency  # a concurrency the user wrote is kept
    allow_open_files(MAX_IN_FLIGHT if grow else concurrency)
    return GenerationLoop(
        pool=pool,
        writer=writer,
        failures=failures,
        timeline=timeline,
        params=params.generate,
        engine_json=engine_json,
        sampling_json=sampling_json,
        sampling_hash=sampling_hash,
        context_limit=context_limit(params),
        fields=run_request_fields(params),
        tool_fields=tool_request_fields(params),
        max_tokens_by_source={src.name: src.max_tokens for src in params.data.sources if src.max_tokens},
        row_sampling=RowSampling(params)
        if any(s.adapter == "openai_batch" for s in params.data.sources)
        else None,
        grow_when_starved=grow,
        **extra,
    )
