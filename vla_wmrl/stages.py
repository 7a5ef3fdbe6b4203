"""Pipeline stages cached by configuration: a stage's output directory is named by a hash of everything that
determines it, and is reused when a ``DONE`` marker says it finished. An unfinished directory is kept so the stage
can resume from its own checkpoints.

Inputs that are earlier stages' outputs enter the hash relative to the cache root (written as ``cache/...``), so a
stage's name does not depend on where the cache lives: the same configuration gives the same names under
``cache_dir=cache`` (the default, whose names this leaves unchanged), ``cache_dir=/elsewhere`` or a copied cache."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)


def config_hash(spec: dict) -> str:
    """Short stable hash of a JSON-serialisable stage specification."""
    return hashlib.sha1(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:10]


def location_free(value, cache_root: str | Path):
    """``value`` with every string path under ``cache_root`` rewritten as ``cache/<relative path>`` (recursively
    through dicts, lists and tuples); other values unchanged."""
    root = str(Path(cache_root))
    if isinstance(value, str) and (value == root or value.startswith(root + os.sep)):
        return "cache" + value[len(root):]
    if isinstance(value, dict):
        return {k: location_free(v, cache_root) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [location_free(v, cache_root) for v in value]
    return value


def run_stage(cache_root: str | Path, name: str, spec: dict, fn: Callable[[Path], dict | None]) -> tuple[Path, dict]:
    """Run ``fn(out_dir)`` unless a finished run of the same ``spec`` exists; return (out_dir, its summary).

    Args:
        cache_root: directory holding every stage's outputs.
        name: stage name, the directory's prefix.
        spec: everything that determines the stage's output (configs, inputs' directories; those inside
            ``cache_root`` are hashed relative to it, see ``location_free``).
        fn: does the work into ``out_dir`` and returns a JSON-serialisable summary.
    """
    out = Path(cache_root) / f"{name}-{config_hash(location_free(spec, cache_root))}"
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
