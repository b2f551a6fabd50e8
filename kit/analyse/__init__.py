"""Stage 4: is the generated data good, and how did the run go?

    from kit.analyse import analyse_run
    summary = analyse_run(RunFolder(Path("outputs/demo")), params.analyse)

Modules: `load` (read a run folder, naming each gap), `scan` (read the shards batch by batch,
keeping each row's facts, not its text), `tables` (per source, finish reasons), `flags` (quality
flags), `reasoning` (reasoning and answer of a row, their lengths), `toolcalls` (parsed and text
tool calls, judged against the prompt's tools), `health` (throughput, latency, failures, accept
length), `plots` (seaborn figures), `run` (analyse_run, run_analysis), `compare` (two runs),
`browser` (sample browser), `explore` (filters over the rows, live in JupyterLab), `tail` (the
job's tail: below capacity to the end, idle capacity, what speculation there would have saved),
`neardup` (near-duplicate prompts and answers: MinHash LSH clusters).
"""

from kit.analyse.browser import SampleBrowser, sample_browser
from kit.analyse.compare import compare_runs, difference_table
from kit.analyse.explore import RunExplorer, explore
from kit.analyse.flags import FLAGS, compute_flags, flag_counts
from kit.analyse.health import accept_length_timeline, failures_by_reason, run_health, throughput_timeline
from kit.analyse.load import load_failures, load_generations, load_metrics
from kit.analyse.reasoning import reasoning_parts, row_parts, split_think
from kit.analyse.run import Analysis, RunData, analyse_run, read_run, run_analysis, summarise
from kit.analyse.tables import finish_reason_table, per_source_table, requested_counts, summary_tables

__all__ = [
    "FLAGS",
    "Analysis",
    "RunData",
    "RunExplorer",
    "SampleBrowser",
    "accept_length_timeline",
    "analyse_run",
    "compare_runs",
    "compute_flags",
    "difference_table",
    "explore",
    "failures_by_reason",
    "finish_reason_table",
    "flag_counts",
    "load_failures",
    "load_generations",
    "load_metrics",
    "per_source_table",
    "reasoning_parts",
    "row_parts",
    "read_run",
    "run_analysis",
    "requested_counts",
    "run_health",
    "sample_browser",
    "split_think",
    "summarise",
    "summary_tables",
    "throughput_timeline",
]
