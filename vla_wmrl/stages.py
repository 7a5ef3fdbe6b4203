"""Pipeline stages cached by configuration: a stage's output directory is named by a hash of everything that
determines it, and is reused when a ``DONE`` marker says it finished. An unfinished directory is kept so the stage
can resume from its own checkpoints."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)


def config_hash(spec: dict) -> str:
    """Short stable hash of a JSON-serialisable stage specification."""
    return hashlib.sha1(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:10]


def run_stage(cache_root: str | Path, name: str, spec: dict, fn: Callable[[Path], dict | None]) -> tuple[Path, dict]:
    """Run ``fn(out_dir)`` unless a finished run of the same ``spec`` exists; return (out_dir, its summary).

    Args:
        cache_root: directory holding every stage's outputs.
        name: stage name, the directory's prefix.
        spec: everything that determines the stage's output (configs, inputs' directories).
        fn: does the work into ``out_dir`` and returns a JSON-serialisable summary.
    """
    out = Path(cache_root) / f"{name}-{config_hash(spec)}"
    done = out / "DONE"
    if done.exists():
        log.info("stage %s: reusing %s", name, out)
        return out, json.loads(done.read_text())
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(spec, indent=2, sort_keys=True, default=str))
    log.info("stage %s: running into %s", name, out)
    summary = fn(out) or {}
    tmp = out / "DONE.tmp"
    tmp.write_text(json.dumps(summary, indent=2, default=float))
    tmp.replace(done)
    return out, summary
