"""What a run records about where and how it ran: the machine, the ISA
Sagitta dispatched to, the command, and the core single-thread passes are
pinned to. Shared by every mode of the harness."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path


def drop_page_cache() -> bool:
    """Writes dirty pages and drops the page cache, when this process may
    (root); returns whether it did, for the report."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_env(mode: str, argv: list[str] | None) -> dict:
    """Machine, ISA and the command of a run (``mode``: the subcommand
    prefix, such as ``"server "``)."""
    import sagitta

    args = sys.argv[1:] if argv is None else argv
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "isa": sagitta.isa(),
        "python": platform.python_version(),
        "command": f"python -m sagitta_bench {mode}" + " ".join(args),
    }


def pin_cpu(enabled: bool) -> tuple[int | None, dict]:
    """The core every engine's single-thread passes run on (the last one
    this process may use), and what the run records about it."""
    if not enabled:
        return None, {"used": False, "cpu": None, "why": "--no-pin"}
    if not hasattr(os, "sched_setaffinity") or not Path("/proc/self/task").is_dir():
        return None, {"used": False, "cpu": None, "why": "no sched_setaffinity here"}
    cpu = max(os.sched_getaffinity(0))
    return cpu, {"used": True, "cpu": cpu, "why": "os.sched_setaffinity"}
