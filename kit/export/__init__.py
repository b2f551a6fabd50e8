"""After the run: a run folder as training data (kit export).

    from kit.export import ExportOptions, export_run
    result = export_run(Path("outputs/demo"), ExportOptions(to=Path("/tmp/demo-data")))

Modules: `run` (export_run: the two passes, the splits, the staging folder), `drops` (the drop
rules), `rows` (the `messages` and `raw` row shapes), `card` (the dataset card), `openai_batch`
(the OpenAI batch output file), `hub` (pushing the folder to the Hugging Face Hub).
"""

from kit.export.drops import DEFAULT_DROP, RULES, parse_drop
from kit.export.hub import push_folder
from kit.export.result import ExportResult
from kit.export.run import ExportOptions, export_run

__all__ = [
    "DEFAULT_DROP",
    "RULES",
    "ExportOptions",
    "ExportResult",
    "export_run",
    "parse_drop",
    "push_folder",
]
