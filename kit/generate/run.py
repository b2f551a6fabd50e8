"""`run_generation`: resume-aware orchestration of the plan, the servers and the loop."""

from __future__ import annotations

import json
import logging
import signal
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

import pyarrow as pa

from kit.artifacts import Manifest, TailNote
from kit.artifacts.manifest_sections import OrderReport, PremiseReport, RayReport, RunIdentity
from kit.asyncrun import run_coroutine, stop_signals
from kit.engines import all_started, start_server
from kit.generate.eta import TokenEta
from kit.generate.lock import RunLock
from kit.generate.loop import LoopStats, sampling_identity
from kit.generate.metrics import Timeline, load_timeline
from kit.generate.order import longest_first
from kit.generate.pool import ServerPool
from kit.generate.premises import PremiseCheck
from kit.generate.raydriver import RayJob
from kit.generate.rowsampling import check_row_sampling
from kit.generate.session import (
    Session,
    build_loop,
    engine_capacity,
    hang_timeout,
    loop_concurrency,
    replica_of,
    replica_params,
)
from kit.generate.setting_changes import identity_settings
from kit.generate.store import FailureLog, ShardCheck, ShardWriter, done_ids, now_utc
from kit.generate.tailswitch import TailPlanNote, TailSwitch, switched_identity, tail_plan
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
from kit.generate.work_item import LoggedFailure
from kit.params import RunParams, SamplingParams, SpeculativeParams
from kit.prompts.lengths import run_length_model
from kit.prompts.plan import read_prompts
from kit.prompts.prompt_set import batch_file_digests, data_hash, ensure_plan, read_prompt_ids
from kit.runfolder import RunFolder, ShardView, disk_full_is_a_message

if TYPE_CHECKING:
    from kit.engines.settings import AppliedSettings

log = logging.getLogger(__name__)
EXIT_COMPLETE = 0
EXIT_INCOMPLETE = 3
"""`kit generate` exits with 3 when the session ended normally but rows are left (failures to retry)."""


def run_generation(
    params: RunParams,
    folder: RunFolder,
    *,
    fresh: bool = False,
    shard: str | None = None,
    retry_failures: bool = False,
    from_decision: AppliedSettings | None = None,
    accepted: Callable[[], None] | None = None,
    tail_base: SpeculativeParams | None = None,
    sampling_problems: Callable[[SamplingParams], list[str]] | None = None,
) -> Manifest:
    """Generate every planned (prompt, sample) not yet done; write the manifest when finished.

    `from_decision`: the engine settings taken from decision.json, recorded in the manifest.
    `accepted`: called once this session holds the folder's lock and the folder accepted its
    settings (stage 3 saves params.yaml there, so a refused run leaves the folder's own).
    `tail_base`: the params' own speculative section (algorithm, draft model) before the decision
    applied its arm: what `generate.tail_speculation` switches to, with the decision's k.
    `sampling_problems`: what the engine refuses of a sampling setting (`Flavor.sampling_problems`),
    asked of the rows' own settings (batch lines) once the plan exists, before any request.
    The manifest's `exit_code` (EXIT_COMPLETE or EXIT_INCOMPLETE) is what `kit generate` exits with.
    """
    shard_i, shard_n = parse_shard(shard)
    folder.ensure()
    files = folder.shard(shard_i, shard_n)
    with RunLock(folder.root, files.tag), stop_signals(), disk_full_is_a_message(folder.root):
        if fresh and (archived := archive_outputs(folder)):
            log.warning("earlier outputs archived in %s", archived)
        session = _open(params, files, (shard_i, shard_n), accepted)
        return _generate(session, retry_failures, from_decision, tail_base, sampling_problems)


def _open(
    params: RunParams, files: ShardView, shard: tuple[int, int], accepted: Callable[[], None] | None
) -> Session:
    """The session: the folder checked against the rows' identity, then bound to it."""
    folder = files.folder
    sampling_json, sampling_hash = sampling_identity(params.generate)
    engine = engine_identity(params)
    identity = RunIdentity(**engine, sampling_hash=sampling_hash, data_hash=data_hash(params))
    if files_made_with := batch_file_digests(params):
        identity["batch_files"] = files_made_with  # a line changed: its rows are not this file's
    check_identity(folder, identity, identity_settings(params))
    if accepted is not None:
        accepted()
    failures = FailureLog(folder.failures)
    return Session(
        params, files, shard, identity, sampling_json, sampling_hash, failures, folder.read_decision()
    )


def _generate(
    session: Session,
    retry_failures: bool,
    from_decision: AppliedSettings | None,
    tail_base: SpeculativeParams | None,
    sampling_problems: Callable[[SamplingParams], list[str]] | None = None,
) -> Manifest:
    params, folder, failures = session.params, session.folder, session.failures
    prompts_path = ensure_plan(params, folder)
    if sampling_problems is not None:
        check_row_sampling(prompts_path, params, sampling_problems)
    record_identity(folder, session.identity, identity_settings(params))
    session.files.manifest.unlink(missing_ok=True)  # written again when this session ends, however

    ids = read_prompt_ids(prompts_path)  # what is left is decided on ids; the prompts are read if any is
    found = done_ids(folder.generations)
    folder.failures.touch()  # present and empty says "no failures"; absent would mean "unknown"
    skip = found.with_ids(() if retry_failures else failures.permanent_ids())
    n_samples, limit = params.generate.sampling.n, params.generate.limit
    work = pending_work(ids, n_samples, skip, session.shard, limit)
    started = now_utc()
    stats, after, order = None, found, OrderReport(order=params.generate.order, items=len(work))
    tail, tail_note = tail_plan(params, session.decision, tail_base)
    on_ray = params.generate.executor == "ray"
    if on_ray and tail is not None:
        tail, tail_note = None, TailPlanNote(enabled=False, why="not built for generate.executor: ray yet")
    if work:
        todo, work = select_rows(read_prompts(prompts_path), work)
        lengths = run_length_model(params, folder)
        if params.generate.order == "longest_first":
            work, order = longest_first(todo, work, lengths)
        eta = TokenEta.for_work(lengths, _column(todo, "source", work), _column(todo, "prompt_tokens", work))
        switch = None
        if tail is not None:
            engine_json = switched_identity(session.identity, tail)
            switch = TailSwitch(tail, params.generate.tail_drain_s, engine_json, replica_params)
        try:
            if on_ray:
                stats = RayJob(session, todo, work).run()
            else:
                stats = _run_loop(session, todo, work, switch, eta)
        except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM, SIGHUP: the finished rows are on disk
            after = done_ids(folder.generations, verify=False)
            end = Ending("interrupted", 128 + getattr(stop, "signum", signal.SIGINT))
            said = {"order": order, "tail_note": tail_note, "from_decision": from_decision}
            session.files.write_manifest(_manifest(session, ids, found, after, None, started, end, **said))
            raise
        tail_note.update(switch.report() if switch else {})
        del todo
        after = done_ids(folder.generations, verify=False)
    manifest = _manifest(
        session,
        ids,
        found,
        after,
        stats,
        started,
        order=order,
        tail_note=tail_note,
        from_decision=from_decision,
    )
    session.files.write_manifest(manifest)
    _say_what_is_left(manifest, folder)
    return manifest


class Ending(NamedTuple):
    """How a session ended other than by running out of work: manifest.json's status, exit code."""

    status: str
    exit_code: int


def _manifest(
    session: Session,
    ids: pa.ChunkedArray,
    found: ShardCheck,
    after: ShardCheck,
    stats: LoopStats | None,
    started: datetime,
    ending: Ending | None = None,
    *,
    order: OrderReport,
    tail_note: TailPlanNote,
    from_decision: AppliedSettings | None,
) -> Manifest:
    """manifest.json of this session: complete or incomplete by the rows left (`found` before it,
    `after` it), or how it ended (`ending`)."""
    params, folder, failures = session.params, session.folder, session.failures
    n_samples, limit = params.generate.sampling.n, params.generate.limit
    left = pending_work(ids, n_samples, after.with_ids(failures.permanent_ids()), session.shard, limit)
    failed, never = _failure_counts(failures, after)
    if ending is None:
        ending = Ending("incomplete", EXIT_INCOMPLETE) if left else Ending("complete", EXIT_COMPLETE)
    return Manifest(
        run=params.run,
        complete=not left,
        status=ending.status,
        exit_code=ending.exit_code,
        rows=after.rows,
        left=len(left),
        planned_prompts=len(ids),
        samples_per_prompt=n_samples,
        rows_this_session=stats.rows if stats else max(0, after.rows - found.rows),
        failures=failed,
        never_generated=never,
        rows_by_source=dict(sorted(after.by_source.items())),
        shards=len(folder.shard_paths()),
        corrupt_shards_set_aside=found.corrupt + after.corrupt,
        duplicate_shards_set_aside=found.duplicate + after.duplicate,
        shard="/".join(map(str, session.shard)),
        engine=session.identity,
        sampling=json.loads(session.sampling_json),
        **_loop_figures(stats),
        settings_from_decision=from_decision,
        order=order,
        tail_speculation=TailNote.from_json(tail_note),
        executor=params.generate.executor,
        generating_s=_generating_s(session.files.metrics, session.files.metrics_log),
        session_started_at=started.isoformat(),
        finished_at=now_utc().isoformat(),
    )


def _failure_counts(failures: FailureLog, after: ShardCheck) -> tuple[int, dict[str, int]]:
    """Rows that failed and are not done since, and those the engine refuses for good, by reason."""
    recorded = failures.read()
    failed = {f["id"] for f in recorded}
    done_of_failed = after.holds(failed)  # failed once, done since
    return len(failed - done_of_failed), _never_generated(recorded, done_of_failed)


class LoopFigures(TypedDict, total=False):
    """The manifest's fields a session's loop gives (`Manifest`'s keyword arguments)."""

    server_restarts: int
    concurrency: int
    concurrency_start: int | None
    engine_capacity: int | None
    capacity_source: str
    premises: PremiseReport | None
    ray: RayReport | None


def _loop_figures(stats: LoopStats | None) -> LoopFigures:
    """The manifest's fields of this session's loop (none when nothing was left to do)."""
    if stats is None:
        return {}
    return {
        "server_restarts": stats.restarts,
        "concurrency": stats.concurrency,
        "concurrency_start": stats.concurrency_start,
        "engine_capacity": stats.capacity.total,
        "capacity_source": stats.capacity.source,
        "premises": stats.premises,
        "ray": stats.ray,
    }


def _say_what_is_left(manifest: Manifest, folder: RunFolder) -> None:
    never = manifest.never_generated
    if never:
        kinds = ", ".join(f"{n} {reason}" for reason, n in sorted(never.items()))
        log.warning(
            "%d prompt(s) can never be generated as planned (%s): the engine refuses them for good; "
            "see %s (rerun with --retry-failures to try them again, e.g. after raising the context)",
            sum(never.values()),
            kinds,
            folder.failures,
        )
    if manifest.left:
        log.warning(
            "incomplete: %d rows are not generated (see %s: rerun the same command to retry them)",
            manifest.left,
            folder.failures,
        )


def _never_generated(recorded: list[LoggedFailure], done: set[str]) -> dict[str, int]:
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


def _column(todo: pa.Table, name: str, work: list[tuple[int, int]]) -> list[Any]:
    """A column of the prompts, one entry per work item."""
    values = todo.column(name).to_pylist()
    return [values[r] for r, _ in work]


def _run_loop(
    session: Session, todo: pa.Table, work: list[tuple[int, int]], tail: TailSwitch | None, eta: TokenEta
) -> LoopStats:
    """This machine's servers (`engine.replicas`) and one loop over the work."""
    params, folder = session.params, session.folder
    api_key = params.engine.api_key()  # before any server starts: a key named but not set stops here
    with ExitStack() as stack:
        servers = stack.enter_context(
            all_started(
                [
                    start_server(replica_params(params, i), folder.logs, name=f"server-{i}")
                    for i in range(params.engine.replicas)
                ]
            )
        )

        async def main() -> LoopStats:
            pool = ServerPool(
                [replica_of(params, s, api_key) for s in servers],
                params.generate.max_server_restarts,
                hang_timeout_s=hang_timeout(params.generate),
                first_answer_s=params.engine.startup_timeout_s,
            )
            async with pool:
                cap = await engine_capacity(pool, params, servers)
                conc = min(loop_concurrency(params, cap.total), len(work))
                log.info("%s: %d requests in flight", cap.words(), conc)
                premises = PremiseCheck.for_run(session.decision, params, cap, total=len(work))
                for line in premises.unchecked:  # the manifest says why (its premises' why_not)
                    log.debug(line)
                loop = build_loop(
                    params,
                    pool,
                    ShardWriter(folder.generations, session.files.tag),
                    session.failures,
                    Timeline(session.files.metrics, session.files.metrics_log),
                    session.made_with,
                    concurrency=conc,
                    tail=tail,
                    premises=premises,
                    eta=eta,
                )
                stats = await loop.run(iter_items(todo, work), total=len(work), concurrency=conc)
                stats.restarts, stats.capacity = pool.restarts, cap
                stats.premises = premises.report()
                return stats

        return run_coroutine(main())
