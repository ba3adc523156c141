"""A pytest plugin for iscc-usearch's own test suite run against
``sagitta.compat.iscc``: the tests named in ``skip.txt`` are skipped, each
with the reason written beside it there; a name in the file that matches
no test is an error (the list cannot go stale silently)."""

from __future__ import annotations

from pathlib import Path

import pytest

_SKIP_FILE = Path(__file__).with_name("skip.txt")


def _read_skips() -> dict[str, str]:
    """``{"test_file.py::test_name": reason}``: a ``#`` line is the reason
    of the names under it; text after a name's ``#`` is added to it."""
    out: dict[str, str] = {}
    reason = ""
    for raw in _SKIP_FILE.read_text().splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            reason = line.lstrip("# ").strip()
            continue
        if not reason:
            raise pytest.UsageError(f"{_SKIP_FILE}: {line} has no reason above it")
        name, _, detail = line.partition("#")
        out[name.strip()] = f"{reason} ({detail.strip()})" if detail.strip() else reason
    return out


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skips = _read_skips()
    used: set[str] = set()
    for item in items:
        name = f"{Path(str(item.fspath)).name}::{item.originalname}"
        if name in skips:
            used.add(name)
            item.add_marker(pytest.mark.skip(reason=skips[name]))
    unused = sorted(set(skips) - used)
    if unused and not config.getoption("keyword") and not config.args_filtered:
        raise pytest.UsageError(f"{_SKIP_FILE} names tests that do not exist: {unused}")


def pytest_configure(config: pytest.Config) -> None:
    # Whether the run was narrowed to some files (then unused names are fine).
    tests = {Path(a.split("::")[0]).name for a in config.args}
    config.args_filtered = any(t.startswith("test_") for t in tests)  # type: ignore[attr-defined]
