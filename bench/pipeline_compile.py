"""Load, verify and compile time of a generated 200-step pipeline against the built-in Catalog.

The pipeline repeats a unit of 12 steps (a skill step, a step with a condition and text around
its expressions, a sequential `for`, a parallel `for` with a two-step body (a compiled
sub-graph), an `if` / `elif` / `else` with a step in each branch, a `while` assigning state)
and is padded with skill steps to exactly 200 steps, every one calling a built-in skill with
checked arguments. Timed phases:

- `load_spec`: YAML with positions + the pydantic models;
- `verify`, warm (expression cache filled) and cold (`expressions._compile` cache cleared:
  every template parsed and compiled by Jinja again);
- `compile_pipeline`: the `StateGraph` built (parallel bodies compiled as sub-graphs);
- `.graph()`: LangGraph's compile of the builder, as on the first run;
- the same phases once each in fresh interpreters (nothing cached, imports done), the
  `import langgraph.graph` a first compile pays in a fresh server, and one run of the
  pipeline (informational; it checks the generated pipeline is sound).

No fixed budget (ARCHITECTURE.md has none for this): absolute figures only.

    .venv/bin/python bench/pipeline_compile.py [--steps N] [--reps N] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as c
import yaml

UNIT = 12  # steps per generated unit


def generate(steps: int) -> str:
    """A valid pipeline of exactly `steps` steps (counting nested ones) over built-in skills."""
    out: list[dict[str, Any]] = []
    count, k = 0, 0
    prev = "{{ x }}"
    while count + UNIT <= steps:
        a = f"a_{k}"
        out += [
            {"id": a, "skill": "number-stats", "parameters": {"values": [prev, "{{ x * 2 }}", 3]}},
            {
                "id": f"t_{k}",
                "skill": "text-stats",
                "condition": f"{{{{ {a}.count > 0 and label | length > 0 }}}}",
                "parameters": {"text": f"run {{{{ {a}.sum }}}} of {{{{ label | upper }}}}, step {k}", "top": 3},
            },
            {
                "id": f"f_{k}",
                "for": {"items": f"{{{{ range({a}.count) | list }}}}", "variable": f"i_{k}"},
                "skill": "json-query",
                "parameters": {"query": "v", "data": {"v": f"{{{{ i_{k} * 2 + loop.index }}}}"}},
            },
            {
                "id": f"p_{k}",
                "for": {"items": "{{ [1, 2, 3] }}", "variable": f"j_{k}", "parallel": True, "max_parallel": 4},
                "steps": [
                    {"id": f"pa_{k}", "skill": "number-stats", "parameters": {"values": [f"{{{{ j_{k} }}}}", 1]}},
                    {
                        "id": f"pb_{k}",
                        "skill": "json-query",
                        "parameters": {"query": "sum", "data": f"{{{{ pa_{k} }}}}"},
                    },
                ],
            },
            {
                "id": f"b_{k}",
                "if": {
                    "condition": f"{{{{ {a}.sum > 10 and t_{k} is not none }}}}",
                    "then": [
                        {"id": f"bt_{k}", "skill": "number-stats", "parameters": {"values": [f"{{{{ {a}.max }}}}"]}}
                    ],
                },
                "elif": [
                    {
                        "condition": f"{a}.sum > 5",
                        "then": [{"id": f"be_{k}", "skill": "json-query", "parameters": {"query": "", "data": 1}}],
                    }
                ],
                "else": [{"id": f"bx_{k}", "skill": "text-stats", "parameters": {"text": f"{{{{ f_{k} | length }}}}"}}],
            },
            {
                "id": f"w_{k}",
                "while": {"condition": "{{ loop.index <= 2 and not stop }}", "max_iterations": 5},
                "steps": [
                    {
                        "id": f"wa_{k}",
                        "skill": "number-stats",
                        "parameters": {"values": ["{{ loop.index }}", "{{ x }}"]},
                        "state": {"total": f"{{{{ total + wa_{k}.sum }}}}"},
                    }
                ],
            },
        ]
        prev = f"{{{{ {a}.sum }}}}"
        count += UNIT
        k += 1
    for i in range(steps - count):
        out.append({"id": f"z_{i}", "skill": "number-stats", "parameters": {"values": [prev, i]}})
    spec = {
        "id": f"generated-{steps}",
        "description": f"A generated pipeline of {steps} steps (benchmark).",
        "inputs": {"x": {"type": "integer", "default": 1}, "label": {"type": "string", "default": "bench"}},
        "state": {"total": 0, "stop": False},
        "steps": out,
        "outputs": {"total": "{{ total }}", "last": prev},
    }
    return yaml.safe_dump(spec, sort_keys=False, width=200)


def builtin_catalog(cache: Path) -> Any:
    from skills import BUILTIN_SKILLS_DIR, Catalog, FolderSource

    return Catalog([FolderSource(BUILTIN_SKILLS_DIR, "builtin", cache_dir=cache)])


def phases(text: str, catalog: Any, *, cold: bool) -> dict[str, float]:
    """One pass of every phase; `cold` clears the expression cache before verify."""
    from pipelines.engine.compiler import compile_pipeline
    from pipelines.language import expressions
    from pipelines.language.loader import load_spec
    from pipelines.language.verify import verify

    out: dict[str, float] = {}
    start = time.perf_counter()
    spec, smap = load_spec(text, "<bench>")
    out["load_spec"] = time.perf_counter() - start
    if cold:
        expressions._compile.cache_clear()
    start = time.perf_counter()
    issues = verify(spec, smap, catalog=catalog)
    out["verify"] = time.perf_counter() - start
    errors = [i for i in issues if i.severity == "error"]
    if errors:
        raise SystemExit(f"the generated pipeline does not verify: {errors[:3]}")
    start = time.perf_counter()
    compiled = compile_pipeline(spec)
    out["compile_pipeline"] = time.perf_counter() - start
    start = time.perf_counter()
    compiled.graph(None)
    out["graph"] = time.perf_counter() - start
    return out


def child(steps: int) -> None:
    """Fresh interpreter: imports first, then each phase once, nothing cached; JSON on stdout."""
    import tempfile

    from pipelines.engine.compiler import compile_pipeline  # noqa: F401 - the imports a server has done
    from pipelines.language.loader import load_spec  # noqa: F401
    from pipelines.language.verify import verify  # noqa: F401

    text = generate(steps)
    with tempfile.TemporaryDirectory(prefix="orch-bench-") as tmp:
        catalog = builtin_catalog(Path(tmp))
        len(catalog)
        start = time.perf_counter()
        import langgraph.graph  # noqa: F401 - what the first compile of a fresh server pays

        imported = time.perf_counter() - start
        out = phases(text, catalog, cold=True)
    out["import_langgraph"] = imported
    print(json.dumps(out))


def fresh(steps: int, runs: int) -> dict[str, float]:
    samples: list[dict[str, float]] = []
    for _ in range(runs):
        proc = subprocess.run(
            [sys.executable, __file__, "--child", "--steps", str(steps)], capture_output=True, text=True, check=True
        )
        samples.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {key: c.median([s[key] for s in samples]) for key in samples[0]}


def run_once(text: str, catalog: Any, tmp: Path) -> tuple[float, dict[str, Any]]:
    import anyio

    from pipelines.engine.compiler import compile_pipeline
    from pipelines.engine.runtime import run_pipeline
    from pipelines.language.loader import load_spec
    from skills import SkillContext

    compiled = compile_pipeline(load_spec(text, "<bench>")[0])

    async def go() -> dict[str, Any]:
        return await run_pipeline(
            compiled,
            {"x": 1, "label": "bench"},
            catalog=catalog,
            ctx=SkillContext(),
            run_id="bench",
            artifact_dir=tmp / "artifacts",
        )

    start = time.perf_counter()
    result = anyio.run(go)
    return time.perf_counter() - start, result


def profile_verify(text: str, catalog: Any) -> str:
    from pipelines.engine.compiler import compile_pipeline
    from pipelines.language import expressions
    from pipelines.language.loader import load_spec
    from pipelines.language.verify import verify

    prof = cProfile.Profile()
    for _ in range(3):
        spec, smap = load_spec(text, "<bench>")
        expressions._compile.cache_clear()
        prof.enable()
        verify(spec, smap, catalog=catalog)
        compile_pipeline(spec).graph(None)
        prof.disable()
    stream = io.StringIO()
    pstats.Stats(prof, stream=stream).sort_stats("cumulative").print_stats(40)
    return stream.getvalue()


def main(steps: int, reps: int, fresh_runs: int, profile: bool) -> None:
    load = os.getloadavg()[0]
    text = generate(steps)
    with c.bench_env() as tmp:
        catalog = builtin_catalog(tmp / "cache")
        from pipelines.language.loader import load_spec

        spec, _ = load_spec(text)
        counted = sum(1 for _ in spec.walk())
        if counted != steps:
            raise SystemExit(f"generated {counted} steps, not {steps}")
        phases(text, catalog, cold=True)  # imports, pydantic and LangGraph warm-up
        cold = [phases(text, catalog, cold=True) for _ in range(reps)]
        warm = [phases(text, catalog, cold=False) for _ in range(reps)]
        first = fresh(steps, fresh_runs)
        run_time, result = run_once(text, catalog, tmp)
        report = profile_verify(text, catalog) if profile else ""
    med = {key: c.median([s[key] for s in cold]) for key in cold[0]}
    med_warm = {key: c.median([s[key] for s in warm]) for key in warm[0]}
    kinds: dict[str, int] = {}
    for step in spec.walk():
        kinds[step.kind] = kinds.get(step.kind, 0) + 1
    mix = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    templates = sum(1 for _ in _templates(spec.model_dump(by_alias=True)))

    print(f"a generated pipeline of {steps} steps ({mix}; {templates} template strings, {len(text):,} bytes)")
    print(f"{reps} passes each in this process (medians); fresh interpreters: median of {fresh_runs}\n")
    c.table(
        ["phase", "cold caches", "warm caches", "fresh process"],
        [
            ["load_spec", c.ms(med["load_spec"]), c.ms(med_warm["load_spec"]), c.ms(first["load_spec"])],
            ["verify", c.ms(med["verify"]), c.ms(med_warm["verify"]), c.ms(first["verify"])],
            [
                "compile_pipeline",
                c.ms(med["compile_pipeline"]),
                c.ms(med_warm["compile_pipeline"]),
                c.ms(first["compile_pipeline"]),
            ],
            ["first .graph()", c.ms(med["graph"]), c.ms(med_warm["graph"]), c.ms(first["graph"])],
            ["import langgraph.graph", "-", "-", c.ms(first["import_langgraph"])],
        ],
    )
    print(f"\none run of the pipeline (no checkpointer): {c.ms(run_time)}; outputs {result}")
    if report:
        print("\ncProfile, 3 cold verify + compile + .graph() (cumulative)\n")
        print(report.strip())
    total = sum(med.values())
    total_warm = sum(med_warm.values())
    total_fresh = sum(first.values())
    print(f"\n{c.load_note(load)}")
    print()
    print(f"ABS pipeline_compile.load_spec {c.ms(med['load_spec'])} (fresh process {c.ms(first['load_spec'])})")
    print(f"ABS pipeline_compile.verify_cold {c.ms(med['verify'])} (fresh process {c.ms(first['verify'])})")
    print(f"ABS pipeline_compile.verify_warm {c.ms(med_warm['verify'])}")
    print(
        f"ABS pipeline_compile.compile_pipeline {c.ms(med['compile_pipeline'])} "
        f"(fresh process {c.ms(first['compile_pipeline'])})"
    )
    print(f"ABS pipeline_compile.first_graph {c.ms(med['graph'])} (fresh process {c.ms(first['graph'])})")
    print(f"ABS pipeline_compile.import_langgraph {c.ms(first['import_langgraph'])} (fresh process)")
    print(
        f"ABS pipeline_compile.total_{steps} {c.ms(total)} cold, {c.ms(total_warm)} warm, "
        f"{c.ms(total_fresh)} fresh process with the langgraph import (no budget)"
    )
    print(f"ABS pipeline_compile.run_{steps} {c.ms(run_time)} (informational)")


def _templates(value: Any) -> Any:
    if isinstance(value, str):
        if "{{" in value or "{%" in value:
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _templates(item)
    elif isinstance(value, list):
        for item in value:
            yield from _templates(item)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps of the generated pipeline (default: 200)")
    parser.add_argument("--reps", type=int, default=15, help="passes in this process (default: 15)")
    parser.add_argument("--fresh", type=int, default=3, help="fresh interpreters (default: 3)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of cold verify + compile")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.steps)
    else:
        main(args.steps, args.reps, args.fresh, args.profile)
