"""Pushing an exported folder to the Hugging Face Hub as it is (card included)."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

from kit.errors import ExportError


def push_folder(folder: Path, repo: str, private: bool = True, token: str | None = None) -> str:
    """Create the dataset repo `repo` (private unless told) when it is absent and upload `folder`;
    the URL of the commit. Needs a token (`hf auth login`, or HF_TOKEN) and the Hub reachable."""
    api = HfApi(token=token)
    try:
        api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
        info = api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="dataset")
    except OfflineModeIsEnabled:
        raise ExportError(
            f"cannot push to {repo}: HF_HUB_OFFLINE is set. The export is in {folder}: unset it and push "
            f"again (`kit export ... --push {repo}`, or `hf upload {repo} {folder} --repo-type dataset`)"
        ) from None
    except (HfHubHTTPError, OSError, ValueError) as e:
        raise ExportError(
            f"cannot push to {repo}: {str(e).splitlines()[0][:300]}. The export is in {folder}: log in "
            f"(`hf auth login`, or set HF_TOKEN) and push again "
            f"(`hf upload {repo} {folder} --repo-type dataset`)"
        ) from None
    return str(info)
