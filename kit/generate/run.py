"""`run_generation`: resume-aware orchestration of the plan, the servers and the loop."""

from __future__ import annotations

import json
import logging
import resource
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pandas as pd

from kit.asyncrun import run_coroutine, stop_signals
from kit.engines import start_server
from kit.engines.capacity import Capacity, launched_capacity, server_info_capacity
from kit.engines.settings import run_request_fields, tool_request_fields
from kit.errors import ModelDirError
from kit.generate.lock import RunLock
from kit.generate.loop import MAX_IN_FLIGHT, GenerationLoop, sampling_identity
from kit.generate.metrics import Timeline, load_timeline
from kit.generate.order import LengthModel, done_lengths, longest_first
from kit.generate.pool import Replica, ServerPool
from kit.generate.premises import PremiseCheck
from kit.generate.store import FailureLog, ShardWriter, done_ids, now_utc
from kit.generate.tailswitch import TailSwitch, switched_identity, tail_plan
from kit.generate.work import (
    archive_outputs,
    check_identity,
    engine_identity,
    iter_items,
    parse_shard,
    pending_work,
    record_identity,
    select_rows,
)
from kit.params import GenerateParams, RunParams, SpeculativeParams
from kit.probe.gpu import nvml_gpus
from kit.prompts.plan import read_prompts
from kit.prompts.prompt_set import data_hash, ensure_plan, read_prompt_ids
from kit.runfolder import RunFolder, disk_full_is_a_message, read_json, write_json_atomic

log = logging.getLogger(__name__)
DEFAULT_CONCURRENCY = 64
QUEUE_FACTOR = 2
"""Requests in flight per request the engine runs: its capacity, and as many again queued."""
OPEN_FILES_MARGIN = 1024
EXIT_COMPLETE = 0
EXIT_INCOMPLETE = 3
"""`kit generate` exits with 3 when the session ended normally but rows are left (failures to retry)."""


def hang_timeout(params: GenerateParams) -> float:
    """Seconds without any sign of life before a server counts as hung: `generate.hang_timeout_s`,
    at most half the request timeout, so that a freeze is caught before requests time out."""
    return min(params.hang_timeout_s, params.request_timeout_s / 2)


def replica_params(params: RunParams, index: int) -> RunParams:
    """Params of replica `index`: its own GPU group through CUDA_VISIBLE_DEVICES when replicas > 1."""
    eng = params.engine
    if eng.replicas == 1:
        return params
    per = eng.gpus_per_replica or eng.tp_size
    gpus = ",".join(str(g) for g in range(index * per, (index + 1) * per))
    new_eng = eng.model_copy(update={"env": {**eng.env, "CUDA_VISIBLE_DEVICES": gpus}})
    return params.model_copy(update={"engine": new_eng})


def context_limit(params: RunParams) -> int | None:
    """The context the server will allow: engine.context_length, else the model's max positions."""
    if params.engine.context_length:
        return params.engine.context_length
    try:
        from kit.arch import load_arch

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
    (a slot that frees is taken at the engine's next step: docs/bench_ceiling.md), else
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


def run_generation(
    params: RunParams,
    folder: RunFolder,
    *,
    fresh: bool = False,
    shard: str | None = None,
    retry_failures: bool = False,
    from_decision: dict[str, Any] | None = None,
    accepted: Callable[[], None] | None = None,
    tail_base: SpeculativeParams | None = None,
) -> dict[str, Any]:
    """Generate every planned (prompt, sample) not yet done; write the manifest when finished.

    `from_decision`: the engine settings taken from decision.json, recorded in the manifest.
    `accepted`: called once this session holds the folder's lock and the folder accepted its
    settings (stage 3 saves params.yaml there, so a refused run leaves the folder's own).
    `tail_base`: the params' own speculative section (algorithm, draft model) before the decision
    applied its arm: what `generate.tail_speculation` switches to, with the decision's k.
    The manifest's `exit_code` (EXIT_COMPLETE or EXIT_INCOMPLETE) is what `kit generate` exits with.
    """
    shard_i, shard_n = parse_shard(shard)
    folder.ensure()
    session = folder.shard(shard_i, shard_n)
    with RunLock(folder.root, session.tag), stop_signals(), disk_full_is_a_message(folder.root):
        return _generate(
            params,
            folder,
            fresh,
            (shard_i, shard_n),
            session,
            retry_failures,
            from_decision,
            accepted,
            tail_base,
        )


def _generate(  # noqa: ANN001
    params, folder, fresh, shard, session, retry_failures, from_decision, accepted, tail_base
) -> dict[str, Any]:
    if fresh:
        archived = archive_outputs(folder)
        if archived:
            log.warning("earlier outputs archived in %s", archived)
    sampling_json, sampling_hash = sampling_identity(params.generate)
    identity = {**engine_identity(params), "sampling_hash": sampling_hash, "data_hash": data_hash(params)}
    check_identity(folder, identity)
    if accepted is not None:
        accepted()
    prompts_path = ensure_plan(params, folder)
    record_identity(folder, identity)
    session.manifest.unlink(missing_ok=True)  # present again only once this run completes

    ids = read_prompt_ids(prompts_path)  # what is left is decided on ids; the prompts are read if any is
    found = done_ids(folder.generations)
    failures = FailureLog(folder.failures)
    folder.failures.touch()  # present and empty says "no failures"; absent would mean "unknown"
    skip = found.with_ids(() if retry_failures else failures.permanent_ids())
    n_samples, limit = params.generate.sampling.n, params.generate.limit
    work = pending_work(ids, n_samples, skip, shard, limit)
    started = now_utc()
    stats, after, order = None, found, {"order": params.generate.order, "items": len(work)}
    decision = read_json(folder.decision) if folder.decision.exists() else None
    tail, tail_note = tail_plan(params, decision, tail_base)
    on_ray = params.generate.executor == "ray"
    if on_ray and tail is not None:
        tail, tail_note = None, {"enabled": False, "why": "not built for generate.executor: ray yet"}
    if work:
        todo, work = select_rows(read_prompts(prompts_path), work)
        if params.generate.order == "longest_first":
            work, order = longest_first(todo, work, length_model(params, folder))
        switch = None
        if tail is not None:
            engine_json = switched_identity(identity, tail)
            switch = TailSwitch(tail, params.generate.tail_drain_s, engine_json, replica_params)
        if on_ray:
            from kit.generate.raydriver import RayJob  # imports kit.generate.run: not at module top

            made_with = (json.dumps(identity, sort_keys=True), sampling_json, sampling_hash)
            stats = RayJob(params, session, todo, work, made_with, decision).run()
        else:
            stats = _run_loop(
                params,
                todo,
                work,
                session,
                failures,
                identity,
                sampling_json,
                sampling_hash,
                switch,
                decision,
            )
        tail_note.update(switch.report() if switch else {})
        del todo
        after = done_ids(folder.generations, verify=False)
    left = pending_work(ids, n_samples, after.with_ids(failures.permanent_ids()), shard, limit)
    recorded = failures.read()
    failed = {f["id"] for f in recorded}
    done_of_failed = after.holds(failed)  # failed once, done since
    manifest = {
        "run": params.run,
        "complete": not left,
        "status": "complete" if not left else "incomplete",
        "exit_code": EXIT_COMPLETE if not left else EXIT_INCOMPLETE,
        "rows": after.rows,
        "left": len(left),
        "planned_prompts": len(ids),
        "samples_per_prompt": params.generate.sampling.n,
        "rows_this_session": stats.rows if stats else 0,
        "failures": len(failed - done_of_failed),
        "never_generated": _never_generated(recorded, done_of_failed),
        "rows_by_source": dict(sorted(after.by_source.items())),
        "shards": len(folder.shard_paths()),
        "corrupt_shards_set_aside": found.corrupt + after.corrupt,
        "duplicate_shards_set_aside": found.duplicate + after.duplicate,
        "shard": f"{shard[0]}/{shard[1]}",
        "engine": identity,
        "sampling": json.loads(sampling_json),
        "server_restarts": stats.restarts if stats else 0,
        "concurrency": stats.concurrency if stats else None,
        "concurrency_start": stats.concurrency_start if stats else None,
        **(stats.capacity.as_dict() if stats else {"engine_capacity": None, "capacity_source": None}),
        "settings_from_decision": from_decision,
        "order": order,
        "tail_speculation": tail_note,
        "premises": stats.premises if stats else None,
        "executor": params.generate.executor,
        "ray": stats.ray if stats else None,
        "generating_s": _generating_s(session.metrics, session.metrics_log),
        "session_started_at": started.isoformat(),
        "finished_at": now_utc().isoformat(),
    }
    write_json_atomic(session.manifest, manifest)
    never = manifest["never_generated"]
    if never:
        kinds = ", ".join(f"{n} {reason}" for reason, n in sorted(never.items()))
        log.warning(
            "%d prompt(s) can never be generated as planned (%s): the engine refuses them for good; "
            "see %s (rerun with --retry-failures to try them again, e.g. after raising the context)",
            sum(never.values()),
            kinds,
            folder.failures,
        )
    if left:
        log.warning(
            "incomplete: %d rows are not generated (see %s: rerun the same command to retry them)",
            len(left),
            folder.failures,
        )
    return manifest


def length_model(params: RunParams, folder: RunFolder) -> LengthModel:
    """Predicted output lengths for `generate.order: longest_first`: from the rows this run made,
    else stage 2's sweep answers (cut at `decide.max_tokens`), else each source's max_tokens."""
    caps = {src.name: src.max_tokens for src in params.data.sources if src.max_tokens}
    answers = pd.read_parquet(folder.sweep_answers) if folder.sweep_answers.exists() else None
    done = done_lengths(folder.shard_paths())
    return LengthModel.fit(done, caps, params.generate.sampling.max_tokens, answers, params.decide.max_tokens)


def _never_generated(recorded: list[dict[str, Any]], done: set[str]) -> dict[str, int]:
    """Rows recorded (last record per id) as ones the engine refuses for good (too long for the
    context, rejected), by reason: the run is complete without them, and says so."""
    last = {f["id"]: f for f in recorded}
    reasons = Counter(
        f.get("reason", "rejected") for rid, f in last.items() if f.get("permanent") and rid not in done
    )
    return dict(reasons)


def _generating_s(timeline: Path, log_path: Path) -> float | None:
    """Seconds spent generating over every session of this run, from the metrics timeline."""
    m = load_timeline(timeline, log_path)
    if not len(m):
        return None
    return round(float(m.groupby("session")["t_s"].max().sum()), 3)


def _run_loop(  # noqa: ANN001, ANN202
    params, todo, work, session, failures, identity, sampling_json, sampling_hash, tail, decision
):
    folder = session.folder
    api_key = params.engine.api_key()  # before any server starts: a key named but not set stops here
    with ExitStack() as stack:
        servers = [
            stack.enter_context(start_server(replica_params(params, i), folder.logs, name=f"server-{i}"))
            for i in range(params.engine.replicas)
        ]

        async def main():
            pool = ServerPool(
                [replica_of(params, s, api_key) for s in servers],
                params.generate.max_server_restarts,
                hang_timeout_s=hang_timeout(params.generate),
            )
            async with pool:
                cap = await engine_capacity(pool, params, servers)
                conc = min(loop_concurrency(params, cap.total), len(work))
                log.info("engine capacity %s (%s): %d requests in flight", cap.total, cap.source, conc)
                premises = PremiseCheck.for_run(decision, params, cap, total=len(work))
                for line in premises.unchecked:
                    log.info(line)
                loop = build_loop(
                    params,
                    pool,
                    ShardWriter(folder.generations, session.tag),
                    failures,
                    Timeline(session.metrics, session.metrics_log),
                    (json.dumps(identity, sort_keys=True), sampling_json, sampling_hash),
                    concurrency=conc,
                    tail=tail,
                    premises=premises,
                )
                stats = await loop.run(iter_items(todo, work), total=len(work), concurrency=conc)
                stats.restarts, stats.capacity = pool.restarts, cap
                stats.premises = premises.report()
                return stats

        return run_coroutine(main())


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
        grow_when_starved=grow,
        **extra,
    )
