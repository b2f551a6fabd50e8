"""Load the model directory's tokenizer the way the kit will, in a child process.

A `tokenizer.json` that exists is not one that loads: the probe runs `AutoTokenizer.from_pretrained`
on the local directory (offline) and renders the chat template once, in a child interpreter so the
caller does not pay for importing transformers, and reports the loader's own message when it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kit.artifacts.probe_sections import TokenizerLoad

_LOAD = r"""
import json, sys
from transformers import AutoTokenizer
try:
    tok = AutoTokenizer.from_pretrained(sys.argv[1])
except Exception as e:
    print(json.dumps({"loaded": False, "error": f"{type(e).__name__}: {e}"}))
    raise SystemExit(0)
out = {"loaded": True, "class": type(tok).__name__, "vocab_size": len(tok)}
if getattr(tok, "chat_template", None):
    try:
        tok.apply_chat_template([{"role": "user", "content": "hello"}], add_generation_prompt=True)
    except Exception as e:
        out["template_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def load_tokenizer(model_dir: Path, python: str | None = None, timeout_s: float = 180) -> TokenizerLoad:
    """{loaded, class, vocab_size[, template_error]} or {loaded: False, error} with the loader's message."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    cmd = [python or sys.executable, "-c", _LOAD, str(model_dir)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return TokenizerLoad(loaded=False, error=f"loading took more than {timeout_s:.0f} s")
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        tail = (proc.stderr or proc.stdout).strip()[-500:]
        return TokenizerLoad(loaded=False, error=f"the loader exited with code {proc.returncode}: {tail}")
