"""Run every benchmark of this folder and print their RATIO and ABS lines together.

    .venv/bin/python bench/run_all.py [NAME ...]      # e.g. `bench/run_all.py call lookup`

Each script runs in its own interpreter (so none inherits another's imports or caches); its
full output is shown as it runs, then the budget lines of all of them are repeated at the end.
Exit status 1 if any budget was missed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = (
    "spawn", "tools_list", "call", "lookup", "pipeline_step", "fanout", "checkpoints", "pipeline_compile", "upstream",
    "confine", "http_load", "http_sessions", "wild", "handles",
)  # fmt: skip


def run(name: str) -> tuple[list[str], float, int]:
    """Run `bench/<name>.py`, echoing its output; its budget lines, wall time and exit status."""
    print(f"\n=== bench/{name}.py " + "=" * (60 - len(name)), flush=True)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(HERE / f"{name}.py")], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        if line.startswith(("RATIO ", "ABS ")):
            lines.append(line.rstrip())
    status = proc.wait()
    return lines, time.perf_counter() - start, status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"scripts to run (default: all of {', '.join(SCRIPTS)})"
    )
    names = parser.parse_args().names or list(SCRIPTS)
    unknown = sorted(set(names) - set(SCRIPTS))
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(SCRIPTS)}")
    summary: list[str] = []
    failed = False
    for name in names:
        lines, wall, status = run(name)
        summary.append(f"# {name}.py ({wall:.0f} s{', exit status ' + str(status) if status else ''})")
        summary.extend(lines)
        failed = failed or status != 0 or any(" MISSED" in line for line in lines)
    print("\n=== summary " + "=" * 60)
    print("\n".join(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
