"""Run the MCP conformance suite against `orchestrator serve --transport http`, both ways it serves.

    .venv/bin/python bench/conformance.py                      # npm-installs the suite into a temp dir
    .venv/bin/python bench/conformance.py --suite-dir /tmp/conf # a dir where it is installed already
    .venv/bin/python bench/conformance.py --mode stateful --keep /tmp/conformance-results

The suite is `@modelcontextprotocol/conformance` (pinned: `VERSION`), which needs Node 22 or
newer: `--node`, `$CONFORMANCE_NODE`, a `node` the suite dir installed, or `node` on PATH.
Nothing is installed globally: without `--suite-dir`, npm installs the suite into a temporary
directory that is removed afterwards. It needs the network for that (so it is not part of the
pytest suite).

Each mode starts its own server (a fresh home in a temp dir, `--port 0`) and runs every
scenario (`--suite all`: the active ones, the drafts, the extensions). Many scenarios call
tools, prompts and resources that only the suite's reference server has (`test_image_content`,
`test://static-text`, `slow_compute`...): they are listed in `FIXTURE_ONLY` with the reason,
and `STATELESS` lists what `--stateless` does not do by design. A failing check (FAILURE or
WARNING) outside those lists is a real failure: the script prints it and exits 1. An entry
that no longer fails is printed as stale (the list should lose it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

VERSION = "0.2.0-alpha.12"
PACKAGE = "@modelcontextprotocol/conformance"
ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"

_REFERENCE_TOOL = "calls a tool only the suite's reference server has"
FIXTURE_ONLY: dict[str, str] = {
    "completion-complete": "completes an argument of the prompt `test_prompt_with_arguments`",
    "prompts-get-simple": "gets the prompt `test_simple_prompt`",
    "prompts-get-with-args": "gets the prompt `test_prompt_with_arguments`",
    "prompts-get-embedded-resource": "gets the prompt `test_prompt_with_embedded_resource`",
    "prompts-get-with-image": "gets the prompt `test_prompt_with_image`",
    "resources-read-text": "reads `test://static-text`",
    "resources-read-binary": "reads `test://static-binary`",
    "resources-templates-read": "reads `test://template/123/data`",
    "resources-subscribe": "subscribes to `test://` resources; we serve files that change only with their "
    "skill, announced by list_changed, and do not offer resources/subscribe (the capability says so)",
    "resources-unsubscribe": "as resources-subscribe",
    "tools-call-image": f"{_REFERENCE_TOOL} (`test_image_content`)",
    "tools-call-audio": f"{_REFERENCE_TOOL} (`test_audio_content`)",
    "tools-call-embedded-resource": f"{_REFERENCE_TOOL} (`test_embedded_resource`)",
    "tools-call-mixed-content": f"{_REFERENCE_TOOL} (`test_multiple_content_types`)",
    "tools-call-with-logging": f"{_REFERENCE_TOOL} (`test_tool_with_logging`)",
    "tools-call-with-progress": f"{_REFERENCE_TOOL} (`test_tool_with_progress`)",
    "tools-call-sampling": f"{_REFERENCE_TOOL} (`test_sampling`)",
    "tools-call-elicitation": f"{_REFERENCE_TOOL} (`test_elicitation`)",
    "elicitation-sep1034-defaults": f"{_REFERENCE_TOOL} (`test_elicitation_sep1034_defaults`)",
    "elicitation-sep1330-enums": f"{_REFERENCE_TOOL} (`test_elicitation_sep1330_enums`)",
    "json-schema-2020-12": f"{_REFERENCE_TOOL} (`json_schema_2020_12_tool`)",
    "server-sse-polling:incoming-sse-event": f"{_REFERENCE_TOOL} (`test_reconnection`)",
    "server-stateless:sep-2575-server-rejects-undeclared-capability": f"{_REFERENCE_TOOL} (`test_missing_capability`)",
    "server-stateless:sep-2575-missing-capability-http-400": f"{_REFERENCE_TOOL} (`test_missing_capability`)",
    "server-stateless:sep-2575-server-sends-tools-list-changed-on-subscription": "changes the tool list through "
    "the reference server's `test_trigger_tool_change`",
    "server-stateless:sep-2575-server-sends-prompts-list-changed-on-subscription": "changes the prompt list "
    "through the reference server's `test_trigger_prompt_change`",
    "http-custom-header-server-validation": "needs a tool whose input schema has `x-mcp-header` annotations; "
    "none of ours maps an argument to a header",
    "sep-2640-skills-directory:sep-2640-directory-read-subdir-mimetype": "reads the first listed skill only "
    "(the built-in `code-analyzer`, which has no subfolder); a subfolder's `inode/directory` is covered by "
    "tests/mcp_server/test_skills_ext.py",
    "tasks-lifecycle": "its tasks are the reference server's `slow_compute`, `failing_job`, `protocol_error_job`",
    "tasks-capability-negotiation:tasks-per-request-meta-opt-in": f"{_REFERENCE_TOOL} (`slow_compute`)",
    "tasks-wire-fields": f"{_REFERENCE_TOOL} (`slow_compute`)",
    "tasks-request-state-removal": f"{_REFERENCE_TOOL} (`slow_compute`)",
    "tasks-mrtr-input": f"{_REFERENCE_TOOL} (`confirm_delete`, `multi_input`)",
    "tasks-mrtr-composition": f"{_REFERENCE_TOOL} (`test_tool_with_task`)",
    "tasks-request-headers:tasks-headers-tolerate-mcp-method-on-tools-call": f"{_REFERENCE_TOOL} (`greet`)",
    "tasks-request-headers:sep-2663-routing-headers-accepted-on-tasks-get": f"{_REFERENCE_TOOL} (`slow_compute`)",
    "tasks-request-headers:sep-2663-server-rejects-mismatched-mcp-name-on-tasks-get": "needs the task of "
    "`slow_compute` from the check before; the mismatch itself is tested in tests/mcp_server/test_http_protocol.py",
    "tasks-dispatch-and-envelope": f"{_REFERENCE_TOOL} (`slow_compute`, a tool that always runs as a task)",
    "tasks-required-task-error": f"{_REFERENCE_TOOL} (`failing_job` with taskSupport `required`)",
    "input-required-result-basic-elicitation": f"{_REFERENCE_TOOL} (`test_input_required_result_elicitation`)",
    "input-required-result-basic-sampling": f"{_REFERENCE_TOOL} (`test_input_required_result_sampling`)",
    "input-required-result-basic-list-roots": f"{_REFERENCE_TOOL} (`test_input_required_result_list_roots`)",
    "input-required-result-request-state": f"{_REFERENCE_TOOL} (`test_input_required_result_*`)",
    "input-required-result-multiple-input-requests": f"{_REFERENCE_TOOL} (`test_input_required_result_*`)",
    "input-required-result-multi-round": f"{_REFERENCE_TOOL} (`test_input_required_result_multi_round`)",
    "input-required-result-missing-input-response": f"{_REFERENCE_TOOL} (`test_input_required_result_*`)",
    "input-required-result-non-tool-request": "gets the prompt `test_input_required_result_prompt`",
    "input-required-result-result-type": f"{_REFERENCE_TOOL} (`test_input_required_result_*`)",
    "input-required-result-tampered-state": f"{_REFERENCE_TOOL} (`test_input_required_result_*`)",
    "input-required-result-capability-check": f"{_REFERENCE_TOOL} (`test_input_required_result_sampling`)",
    "input-required-result-validate-input": f"{_REFERENCE_TOOL} (`test_input_required_result_elicitation`)",
}
"""Scenarios (or `scenario:check`) that fail against any server but the suite's own: the reason."""

STATELESS: dict[str, str] = {
    "server-sse-polling:server-sse-polling-session": "no sessions: every request stands alone",
    "server-sse-multiple-streams:server-sse-multiple-streams-session": "no sessions: every request stands alone",
    "server-sse-polling:server-sse-priming-event": "no session to resume a stream in, so nothing to prime",
    "server-sse-polling:server-sse-retry-field": "no session to resume a stream in, so no retry to suggest",
}
"""What `--stateless` does not do, by design (on top of `FIXTURE_ONLY`)."""

_TIMESTAMP = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")
_FAILING = ("FAILURE", "WARNING")


@dataclass
class Outcome:
    """One mode's checks, by status, and the failing ones sorted by whether they are expected."""

    statuses: Counter[str] = field(default_factory=Counter[str])
    expected: dict[str, str] = field(default_factory=dict[str, str])
    unexpected: dict[str, str] = field(default_factory=dict[str, str])
    stale: list[str] = field(default_factory=list[str])


def find_node(given: str | None, suite_dir: Path | None) -> str:
    """A node binary of version 22 or newer, or exit saying where to get one."""
    candidates = [given, os.environ.get("CONFORMANCE_NODE")]
    if suite_dir is not None:
        candidates.append(str(suite_dir / "node_modules" / ".bin" / "node"))
    candidates.append(shutil.which("node"))
    for node in filter(None, candidates):
        if not Path(node).exists() and shutil.which(node) is None:
            continue
        version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout.strip()
        major = re.match(r"v(\d+)\.", version)
        if major and int(major[1]) >= 22:
            return node
    sys.exit("conformance: needs Node 22 or newer: pass --node PATH or set CONFORMANCE_NODE")


def install_suite(node: str, target: Path) -> Path:
    """npm-install the pinned suite into `target` (a temp dir; nothing global); its entry point."""
    npm = Path(node).parent / "npm"
    command = [str(npm) if npm.exists() else "npm", "install", "--no-save", "--no-audit", "--no-fund"]
    print(f"conformance: installing {PACKAGE}@{VERSION} into {target}", file=sys.stderr)
    subprocess.run([*command, "--prefix", str(target), f"{PACKAGE}@{VERSION}"], check=True)
    return entry_point(target)


def entry_point(suite_dir: Path) -> Path:
    entry = suite_dir / "node_modules" / PACKAGE / "dist" / "index.js"
    if not entry.exists():
        sys.exit(f"conformance: {entry} is missing: install {PACKAGE}@{VERSION} there, or drop --suite-dir")
    return entry


class Server:
    """`orchestrator serve --transport http --port 0` with its own home, until closed."""

    def __init__(self, home: Path, *options: str) -> None:
        command = [str(ORCHESTRATOR), "serve", "--transport", "http", "--port", "0", "--home", str(home), *options]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.url = ""
        ready = threading.Event()

        def read() -> None:
            assert self.process.stderr is not None
            for line in self.process.stderr:  # drained to the end: the server never blocks on it
                self.lines.append(line.rstrip("\n"))
                found = re.fullmatch(r"orchestrator: serving (http://\S+/mcp)", line.strip())
                if found:
                    self.url = found[1]
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(60) or not self.url:
            self.close()
            sys.exit("conformance: the server did not start:\n" + "\n".join(self.lines[-20:]))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def run_mode(node: str, entry: Path, mode: str, which: list[str], results: Path) -> Outcome:
    """Start a server for `mode`, run the suite against it, and sort what failed."""
    with tempfile.TemporaryDirectory(prefix=f"conformance-{mode}-") as home:
        server = Server(Path(home), *(["--stateless"] if mode == "stateless" else []))
        try:
            print(f"conformance: {mode} server at {server.url}", file=sys.stderr)
            command = [node, str(entry), "server", "--url", server.url, *which, "-o", str(results)]
            subprocess.run(command, stdout=subprocess.DEVNULL, check=False)
        finally:
            server.close()
    known = FIXTURE_ONLY | (STATELESS if mode == "stateless" else {})
    outcome = sort_checks(results, known)
    if "--scenario" in which:  # entries of the other scenarios did not run: not stale
        outcome.stale = [key for key in outcome.stale if key.split(":")[0] == which[1]]
    return outcome


def sort_checks(results: Path, known: dict[str, str]) -> Outcome:
    outcome = Outcome()
    used: set[str] = set()
    for checks in sorted(results.glob("*/checks.json")):
        scenario = _TIMESTAMP.sub("", checks.parent.name).removeprefix("server-")
        for check in json.loads(checks.read_text()):
            status = str(check.get("status"))
            outcome.statuses[status] += 1
            if status not in _FAILING:
                continue
            key = f"{scenario}:{check.get('id')}"
            entry = key if key in known else scenario if scenario in known else None
            said = f"{status}: {str(check.get('errorMessage') or '')[:200]}"
            if entry is None:
                outcome.unexpected[key] = said
            else:
                used.add(entry)
                outcome.expected[key] = known[entry]
    outcome.stale = sorted(set(known) - used)
    return outcome


def report(mode: str, outcome: Outcome) -> None:
    counts = ", ".join(f"{n} {status.lower()}" for status, n in sorted(outcome.statuses.items()))
    print(f"\n== {mode}: {counts}")
    print(f"   failing only for want of the reference server's fixtures: {len(outcome.expected)} checks")
    for key, said in sorted(outcome.unexpected.items()):
        print(f"   REAL FAILURE {key}: {said}")
    for key in outcome.stale:
        print(f"   stale (passes now; drop it from the list): {key}")
    print(f"   real failures: {len(outcome.unexpected)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node", help="a Node 22+ binary")
    parser.add_argument("--suite-dir", type=Path, help=f"a dir where {PACKAGE}@{VERSION} is npm-installed")
    parser.add_argument("--mode", choices=("stateful", "stateless", "both"), default="both")
    parser.add_argument("--suite", default="all", help="the suite's --suite (default: all)")
    parser.add_argument("--scenario", help="run this one scenario only (the suite's --scenario)")
    parser.add_argument("--keep", type=Path, help="keep the suite's per-scenario results here")
    parser.add_argument("--list", action="store_true", help="print the expected failures with reasons, and exit")
    args = parser.parse_args(argv)
    if args.list:
        for key, reason in {**FIXTURE_ONLY, **{f"{k} (--stateless)": v for k, v in STATELESS.items()}}.items():
            print(f"{key}: {reason}")
        return 0
    node = find_node(args.node, args.suite_dir)
    with tempfile.TemporaryDirectory(prefix="conformance-") as scratch:
        entry = entry_point(args.suite_dir) if args.suite_dir else install_suite(node, Path(scratch) / "suite")
        real = 0
        for mode in ("stateful", "stateless") if args.mode == "both" else (args.mode,):
            results = (args.keep or Path(scratch)) / f"results-{mode}"
            shutil.rmtree(results, ignore_errors=True)
            which = ["--scenario", args.scenario] if args.scenario else ["--suite", args.suite]
            outcome = run_mode(node, entry, mode, which, results)
            report(mode, outcome)
            real += len(outcome.unexpected)
    return 1 if real else 0


if __name__ == "__main__":
    sys.exit(main())
