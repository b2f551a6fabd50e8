"""What an export wrote."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict


class ExportResultJson(TypedDict):
    """What `kit export` prints (`ExportResult.to_json`)."""

    folder: str
    splits: dict[str, int]
    drop_reasons: dict[str, int]
    complete: bool
    files: list[str]
    card: str | None


@dataclass
class ExportResult:
    """What an export wrote: rows per split, rows per drop reason, the files and the card."""

    folder: Path
    splits: dict[str, int]
    reasons: dict[str, int]
    files: list[Path]
    complete: bool
    card: Path | None = None
    sources: dict[str, dict[str, int | None]] = field(default_factory=dict)

    def to_json(self) -> ExportResultJson:
        return ExportResultJson(
            folder=str(self.folder),
            splits=self.splits,
            drop_reasons=self.reasons,
            complete=self.complete,
            files=[str(p) for p in self.files],
            card=str(self.card) if self.card else None,
        )

    def markdown(self) -> str:
        """What was written, in a few lines of Markdown (notebook 04)."""
        if "answered" in self.splits:
            return (
                f"**OpenAI batch output** `{self.files[0]}`: {self.splits['answered']:,} answers, "
                f"{self.splits['errors']:,} error lines."
            )
        dropped = ", ".join(f"{n:,} {r.replace('_', ' ')}" for r, n in self.reasons.items() if n) or "none"
        state = "" if self.complete else " The run was incomplete: the card says so."
        return (
            f"**Exported** `{self.folder}`: {self.splits.get('train', 0):,} rows in `train`, "
            f"{self.splits.get('rejected', 0):,} in `rejected` (dropped: {dropped}).{state} "
            f'Load it with `datasets.load_dataset("{self.folder}")`; the card is `{self.card}`.'
        )
