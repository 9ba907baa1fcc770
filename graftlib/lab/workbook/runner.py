"""The workbook runner: every notebook of a profile through papermill, failures reported by name.

Profiles (parameter overrides for every notebook; each notebook's own defaults are the quick profile's) change
counts, never what is run: a profile's `n_tasks` takes the first n of a notebook's own task list, so Figure 5
stays on tasks its GSM8K-only scorer never saw. `smoke` (CI), `quick` (`make main`, sized for a 2-core CPU),
`full` (paper scale, for GPUs) and `evidence` (quick's settings at 3 tasks x 10 held-out prompts x 128 tokens:
the only profile that draws into the committed `figures/`, packing its records into `figures/records/` after
each notebook and restoring them before the first, so it redraws without decoding and resumes where it stopped).

`run_workbook` executes each notebook (by name, `LAST` at the end) into `<out>/<name>.ipynb`, keeps going when one
fails, writes `<out>/summary.md`, and records every figure a notebook writes in the figures manifest
(`graftlib.lab.workbook.figures_manifest`) after each notebook. Notebooks check their parameters in their
first cell (`check_params`): a bad value stops there with one clear message.

Details: docs/internals.md, `graftlib.lab.workbook.runner`.
"""

import time
from collections.abc import Callable
from pathlib import Path

from graftlib.core.errors import GraftError, require
from graftlib.core.paths import PROJECT_DIR
from graftlib.lab.workbook import figures_manifest

NOTEBOOK_DIR = PROJECT_DIR / "notebooks"
FIGURES_DIR = "results/figures"  # the notebooks' default `figures_dir`: a fresh run's figures, never committed
COMMITTED_FIGURES = "figures"  # the evidence profile's figures and packed records, the ones committed

# Each notebook receives the profile values of the parameters it declares (and no others). Every budget grid of
# quick (and so of evidence) brackets the best budget it was searched for in the committed figures (a best at a
# grid's edge is `not tested`, `graftlib.lab.report.modeled.EDGE`): under the paper's A100 costs a node is cheap
# and the best trees are small, so its grids reach down to 4.
QUICK = {"profile": "quick", "slider": False, "prompt_index": 0, "prompt_text": "", "show_rounds": "auto",
         "method": "graft", "temperature": 0.0, "compare": "ddtree", "task": "gsm8k", "pool": "tdes",
         "n_prompts": 2, "max_new_tokens": 48, "n_tasks": 2, "budgets": "2,4,8,16,32", "chain_budgets": "3,7,15",
         "budget": 16, "cap": 64, "betas": "0,0.05,0.1,0.2,0.4", "grid": "2,4,8,12,16,24,32",
         "paper_grid": "4,8,12,16,24,32,48,64,96,128", "paper_budgets": "8,16,32,64,128,256", "paper_cap": 512,
         "paper_curve_grid": "4,8,16,32,64,128,256,512", "regime_names": "machine,paper,paper+acceptance",
         "strengths": "0,0.2,0.4,0.6", "gains": "0,1,2", "val_prompts": 2, "trace_prompts": 8, "epochs": 8,
         "data_prompts": 48,
         "data_tokens": 64, "train_minutes": 1.5, "train_steps": 0, "eval_every": 100, "tau_prompts": 2,
         "data_pools": "tdes", "repeats": 3, "sampling_tasks": "gsm8k", "temperatures": "0,0.6,1.0", "top_p": 1.0,
         "seed": 0, "saba_prompts": 1, "saba_grid": "2,4,8", "saba_max_new_tokens": 32, "saba_repeats": 1,
         "mix_dir": "results/adaptive-mix"}
# The other profiles: quick's settings and their named differences (smoke: CI's smallest run; full: paper scale).
PROFILES: dict[str, dict] = {
    "smoke": dict(QUICK, profile="smoke", n_prompts=1, max_new_tokens=16, n_tasks=1, budgets="4,16", chain_budgets="7",
                  budget=8, cap=16, betas="0,0.2", grid="2,4,8", paper_grid="32,64", paper_budgets="32,64",
                  paper_cap=64, paper_curve_grid="32,64", strengths="0,0.4", gains="0,2", val_prompts=1,
                  trace_prompts=1,
                  epochs=1, data_prompts=2, data_tokens=8, train_minutes=0.0, train_steps=2, eval_every=2,
                  tau_prompts=1, repeats=1, temperatures="0,1.0", saba_grid="2,4", saba_max_new_tokens=16),
    "quick": QUICK,
    "full": dict(QUICK, profile="full", n_prompts=128, max_new_tokens=2048, n_tasks=8,
                 budgets="16,32,64,128,256,512", chain_budgets="15", budget=256, cap=512,
                 grid="32,48,64,96,128,192,256,384,512", paper_budgets="8,16,32,64,128,256,512",
                 paper_curve_grid="4,8,16,32,48,64,96,128,192,256,384,512", strengths="0,0.1,0.2,0.3,0.4,0.5,0.7",
                 val_prompts=80, trace_prompts=2702, data_prompts=800, data_tokens=192, train_minutes=40.0,
                 eval_every=400, tau_prompts=4, data_pools="tdes,drafter", sampling_tasks="gsm8k,mt-bench",
                 saba_prompts=16, saba_grid="32,64,128,256,512", saba_max_new_tokens=256, saba_repeats=3),
}


# The counts by which the evidence profile differs from quick's settings (it runs what quick runs, at more of it,
# and in more regimes).
COUNTS = ("n_prompts", "max_new_tokens", "n_tasks", "train_minutes")

# The committed figures: the quick profile's settings at evidence counts (10 held-out prompts on each of the first 3
# tasks a notebook names, 128 new tokens, 3 minutes of drafter training), drawn into figures/ with their records
# packed beside them (figures/records, `graftlib.lab.report.archive`). Quick's counts are sized for `make main` (at
# most 45 minutes on a 2-core CPU); these are the ones the committed records were decoded at.
# They also draw the third regime under each drafter-strength calibration (`regimes.ACCEPTANCE_REGIMES`), whose
# verdicts the claims table's robust column compares, and the tree-gain axis at more points.
PROFILES["evidence"] = dict(PROFILES["quick"], profile="evidence", n_prompts=10, max_new_tokens=128, n_tasks=3,
                            train_minutes=3.0, figures_dir=COMMITTED_FIGURES, results_dir="results/evidence",
                            regime_names="machine,paper,paper+acceptance,paper+pinned,paper+true-path",
                            gains="0,0.5,1,1.5,2")  # the tree-gain axis in 5 steps

LAST = ("paper_regime",)  # reads the benches and sweeps the item notebooks decode (same settings, same files)


def notebooks() -> list[Path]:
    """The workbook's notebooks in the order a profile runs them: by name, `LAST` at the end."""
    return sorted(NOTEBOOK_DIR.glob("[!_]*.ipynb"), key=lambda b: (b.stem in LAST, b.stem))


def split_ints(text: str, name: str) -> list[int]:
    try:
        values = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise GraftError(f"parameter {name}={text!r}: expected comma-separated integers") from None
    require(values, f"parameter {name} is empty")
    return values


def split_floats(text: str, name: str, lo: float, hi: float) -> list[float]:
    """A comma list of numbers in [lo, hi] (a notebook parameter), or a one-line error naming it: the one
    parser of number lists (betas, strengths, temperatures)."""
    parts = [x.strip() for x in str(text).split(",") if x.strip()]
    require(parts, f"parameter {name} is empty")
    bad = next((x for x in parts if not _is_number(x)), None)
    require(bad is None, f"parameter {name}={text!r}: {bad!r} is not a number (expected comma-separated numbers)")
    values = [float(x) for x in parts]
    require(all(lo <= v <= hi for v in values), f"parameter {name}={text!r}: each value must lie in [{lo:g}, {hi:g}]")
    return values


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def samplings(temperatures: str, top_p: float = 1.0, seed: int = 0) -> list:
    """'0,0.6,1.0' -> one `graftlib.core.sampling.Sampling` per temperature (a notebook parameter), or a one-line
    error naming the problem."""
    from graftlib.core.sampling import Sampling

    return [Sampling(t, top_p, seed=seed).check() for t in split_floats(temperatures, "temperatures", 0.0, 100.0)]


BUDGET_LISTS = ("budgets", "chain_budgets", "grid", "paper_grid")  # and every name ending in `_grid`


def check_params(unseen_by: tuple[str, ...] = (), **params) -> dict:
    """Validate notebook parameters by name; return the parsed ones (lists for comma strings, and `repeats`).
    `tasks` (only its first `n_tasks` kept: a profile shortens a notebook's list, never changes it; none of
    `unseen_by`, e.g. Figure 5's scorer's own task), `pools`, `methods`, `profile`; budget lists (`BUDGET_LISTS`,
    any `*_grid`) and budgets (`budget`, `cap`) in [1, MAX_BUDGET]; `betas` and `beta` in [0, 10]; every other
    name an integer >= 1 (e.g. saba_prompts=1). None values are skipped."""
    from graftlib.methods.registry import MAX_BUDGET

    out: dict = {}
    for name, value in params.items():
        if value is None or name == "n_tasks":
            continue
        if name == "tasks":
            out["tasks"] = _tasks(value, unseen_by, params.get("n_tasks"))
        elif name in ("pools", "methods", "profile"):
            out.update(_names(name, value))
        elif name in BUDGET_LISTS or name.endswith("_grid"):
            out[name] = split_ints(value, name)
            require(all(1 <= b <= MAX_BUDGET for b in out[name]),
                    f"parameter {name}={value!r}: budgets must lie in [1, {MAX_BUDGET}]")
        elif name in ("budget", "cap"):
            require(isinstance(value, int) and 1 <= value <= MAX_BUDGET,
                    f"parameter {name}={value!r}: must be an integer in [1, {MAX_BUDGET}]")
        elif name == "betas":
            out["betas"] = split_floats(value, "betas", 0.0, 10.0)
        elif name == "beta":
            require(0.0 <= value <= 10.0, f"parameter beta={value!r}: must lie in [0, 10]")
        else:
            require(isinstance(value, int) and value >= 1, f"parameter {name}={value!r}: must be an integer >= 1")
            if name == "repeats":
                out["repeats"] = value
    return out


def _tasks(text: str, unseen_by: tuple[str, ...], n_tasks) -> list[str]:
    from graftlib.data import prompts

    tasks = [t.strip() for t in text.split(",") if t.strip()]
    require(tasks, "parameter tasks is empty")
    known = prompts.TASKS + prompts.GENERATED_TASKS
    for t in tasks:
        require(t in known, f"parameter tasks: unknown task {t!r}; choose from {', '.join(known)}")
        require(t != "livecodebench", prompts.LIVECODEBENCH_MESSAGE)
        require(t not in unseen_by, f"parameter tasks: {t!r} is the task the scorer under test was trained on; "
                f"name only tasks it never saw")
    if n_tasks is None:
        return tasks
    require(isinstance(n_tasks, int) and n_tasks >= 1, f"parameter n_tasks={n_tasks!r}: must be an integer >= 1")
    return tasks[:n_tasks]


def _names(name: str, value: str) -> dict:
    """`profile` checked; `pools` (training pools, parameter data_pools) and `methods` parsed into lists."""
    from graftlib.data import prompts
    from graftlib.lab.run.bench import BASELINES
    from graftlib.methods.registry import METHODS

    if name == "profile":
        require(value in PROFILES, f"parameter profile={value!r}: choose from {', '.join(PROFILES)}")
        return {}
    items = [x.strip() for x in value.split(",") if x.strip()]
    if name == "pools":
        require(items, "parameter data_pools is empty")
        known = [q for q in prompts.POOLS if q != "val"]
        for x in items:
            require(x in known, f"parameter data_pools: unknown training pool {x!r}; choose from {', '.join(known)}")
    else:
        for m in items:
            require(m in METHODS + BASELINES, f"parameter methods: unknown method {m!r}; choose from "
                    f"{', '.join(METHODS + BASELINES)}")
    return {name: items}


def profile_values(profile: str, out: Path, extra: dict | None = None) -> dict:
    """The parameter values of a profile's run writing to `out`, `extra` overriding them. The smoke
    profile draws its figures under `out/figures`; only the evidence profile draws into the committed
    `figures/`, every other one into the notebooks' default `results/figures/`."""
    values = dict(PROFILES[profile])
    if profile == "smoke":
        values["figures_dir"] = str(Path(out) / "figures")
    return dict(values, **(extra or {}))


def run_workbook(profile: str = "quick", out: str | Path = "results/notebooks", only: list[str] | None = None,
                 extra: dict | None = None, progress: bool = True,
                 drawn_with: Callable[[dict], dict] = figures_manifest.drawn_with) -> list[dict]:
    """Run the profile's notebooks with papermill; return one status row per notebook.
    `progress`: the bars over notebooks and cells (on stderr); the per-notebook lines are printed anyway.
    `drawn_with(parameters)`: what the figures are drawn with, for the figures manifest (module doc),
    called once, after the first notebook that writes a figure."""
    import papermill as pm
    from tqdm.auto import tqdm

    require(profile in PROFILES, f"unknown profile {profile!r}: choose from {', '.join(PROFILES)}")
    books = notebooks()
    if only:
        unknown = sorted(set(only) - {b.stem for b in books})
        require(not unknown, f"unknown notebook(s) {unknown}: choose from {[b.stem for b in books]}")
        books = [b for b in books if b.stem in only]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    values = profile_values(profile, out, extra)
    figures = NOTEBOOK_DIR.parent / values.get("figures_dir", FIGURES_DIR)
    evidence = values.get("figures_dir") == COMMITTED_FIGURES and values.get("results_dir")
    if evidence:  # resume from the committed records: what an earlier run decoded is read, not decoded again
        from graftlib.lab.report.archive import pack, restore

        restored = restore(figures / "records", NOTEBOOK_DIR.parent / values["results_dir"])
        if restored:
            print(f"restored {sum(restored.values())} records in {len(restored)} files from {figures / 'records'}")
    used = None
    rows = []
    bar = tqdm(books, desc=f"workbook {profile}", unit="notebook", disable=not progress, position=0)
    for book in bar:
        bar.set_postfix_str(book.stem)
        cells = {"desc": f"  {book.stem}", "position": 1, "leave": False} if progress else False
        declared = pm.inspect_notebook(str(book))
        params = {k: v for k, v in values.items() if k in declared}
        before = figures_manifest.snapshot(figures)
        t0 = time.time()
        row = {"notebook": book.stem, "status": "ok", "seconds": 0.0, "error": ""}
        try:
            pm.execute_notebook(str(book), str(out / book.name), parameters=params, kernel_name="python3",
                                cwd=str(NOTEBOOK_DIR.parent), progress_bar=cells)
        except pm.PapermillExecutionError as e:
            row.update(status="failed", error=f"cell {e.exec_count}: {e.ename}: {str(e.evalue).splitlines()[0]}")
        row["seconds"] = round(time.time() - t0, 1)
        written = figures_manifest.drawn(before, figures_manifest.snapshot(figures))
        if written:
            used = used or drawn_with(values)
            figures_manifest.record(figures, written, book.stem, profile, used)
        rows.append(row)
        tqdm.write(f"[{row['status']:>6}] {book.stem} ({row['seconds']} s) {row['error']}")
        results = NOTEBOOK_DIR.parent / values["results_dir"] if evidence else None
        if results is not None and any(results.glob("*.jsonl")):  # after each notebook: an interruption keeps them
            pack(results, figures / "records")
    bar.close()
    lines = ["| notebook | status | seconds | error |", "|---|---|---|---|"]
    lines += [f"| {r['notebook']} | {r['status']} | {r['seconds']} | {r['error']} |" for r in rows]
    (out / "summary.md").write_text(f"profile: {profile}\n\n" + "\n".join(lines) + "\n")
    return rows


def add_parser(sub) -> None:
    p = sub.add_parser("workbook", help="run every notebook of a profile with papermill")
    p.add_argument("--profile", default="quick", help=f"one of {', '.join(PROFILES)}")
    p.add_argument("--out", default="results/notebooks", help="folder for executed notebooks + summary.md")
    p.add_argument("--only", nargs="+", help="notebook names (stems) to run")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="the pair's dtype in every notebook that loads one (default: float32 on a CPU, bfloat16 "
                   "on CUDA); bfloat16 on a CPU exercises a GPU's numerics (decodes may end in certified ties)")
    p.set_defaults(func=run)


def run(args) -> int:
    rows = run_workbook(args.profile, args.out, args.only, extra={"dtype": args.dtype} if args.dtype else None)
    failed = [r["notebook"] for r in rows if r["status"] != "ok"]
    print(f"{len(rows) - len(failed)}/{len(rows)} notebooks ok; summary in {Path(args.out) / 'summary.md'}")
    return 1 if failed else 0
