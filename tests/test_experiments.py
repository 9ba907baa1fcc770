"""The graft commands of the user's Makefile targets and of the experiment scripts (experiments/*.sh) parse with
graft's own parser: `make -n` and the scripts' DRY_RUN=1 print them (nothing runs), and each command line is
parsed as the CLI would. A script that passes an option twice (argparse keeps the last `--data`) or misspells one
fails here, not hours into a run. The user's Makefile stays short: at most 12 targets; every script says what it
measures, how long it takes and where its results go."""

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from graftlib.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
USER_TARGETS = ("setup", "data", "main", "test", "lab", "lint", "artifacts", "clean")
SCRIPTS = sorted(p.stem for p in (ROOT / "experiments").glob("*.sh") if p.name != "lib.sh")


def make_dry(*args: str) -> str:
    """What `make -n ARGS` prints for the user's Makefile (nothing runs); the outer `make test`'s flags are not
    passed."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=True).stdout


def script_dry(name: str, *args: str, **env: str) -> str:
    """What experiments/NAME.sh ARGS would run, one command a line (DRY_RUN=1; settings as environment variables)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GRAFT_SABA_PARAMS")}
    return subprocess.run(["bash", f"experiments/{name}.sh", *args], cwd=ROOT, env={**clean, **env, "DRY_RUN": "1"},
                          capture_output=True, text=True, check=True).stdout


def graft_commands(name: str, *args: str, **env: str) -> list[list[str]]:
    """The argument lists of every `graft ...` command experiments/NAME.sh would run."""
    out = []
    for line in script_dry(name, *args, **env).splitlines():
        words = shlex.split(line)
        if words[:1] == [".venv/bin/graft"]:
            out.append(words[1:])
        elif words[:3] == ["python3", "-m", "graftlib"]:
            out.append(words[3:])
    return out


def make_graft_commands(target: str) -> list[list[str]]:
    """The graft commands `make -n TARGET` of the user's Makefile prints."""
    text = re.sub(r"\\\n\s*", " ", make_dry(target))
    commands = []
    for line in text.splitlines():
        line = re.sub(r"\$\((?:[^()]|\([^()]*\))*\)", "", line)
        for m in re.finditer(r"bin/graft (.*?)(?:\|\||&&|;|$)", line):
            commands.append(shlex.split(re.sub(r"\$\{[^}]*\}", "X", m.group(1))))
    return commands


def test_eagle3_equal_commands_parse_and_score_the_same_anchors():
    parser = build_parser()
    commands = graft_commands("eagle3-equal") + graft_commands("eagle3-ship")
    parsed = {args[0]: parser.parse_args(args) for args in commands}
    assert {"drafter-corpus", "train-eagle3", "train-drafter", "ship-eagle3"} <= set(parsed)
    e3, df = parsed["train-eagle3"], parsed["train-drafter"]
    assert len(e3.data) == 3 and e3.data == df.data  # one data set, in one order: one held-out split
    assert e3.clock == "cpu" and e3.minutes == 350 and e3.eval_blocks_per_seq == df.blocks_per_seq == 16
    assert df.max_steps == 0 and df.init_drafter == "embedded"
    assert parsed["ship-eagle3"].folder == str(Path(e3.out) / "drafter")
    assert parsed["ship-eagle3"].reference == str(Path(df.out) / "drafter")  # the DFlash drafter on its anchors


def test_eagle3_stage_warm_starts_the_shipped_drafter_on_the_named_corpora():
    """A stage of the EAGLE-3 lineage (the script's example): a warm start from the shipped drafter on the task corpus
    alone, and the DFlash drafter scored on the same data; without EAGLE3_INIT the run starts from random weights."""
    stage = dict(EAGLE3_CORPORA="smollm2-135m-tasks:drafter-data-tasks-v3", EAGLE3_INIT="embedded", EAGLE3_MIN="120",
                 EAGLE3_OUT="runs/eagle3-s2")
    parser = build_parser()
    parsed = {a[0]: parser.parse_args(a) for a in graft_commands("eagle3-equal", **stage) + graft_commands(
        "eagle3-ship", **stage)}
    e3, df = parsed["train-eagle3"], parsed["train-drafter"]
    assert e3.init_drafter == "embedded" and e3.minutes == 120 and e3.data == df.data == ["runs/drafter-data-tasks-v3"]
    assert parsed["ship-eagle3"].folder == "runs/eagle3-s2/drafter"
    partial = dict(EAGLE3_CORPORA="smollm2-135m:drafter-data-v3:8 smollm2-135m-regular:drafter-data-regular")
    commands = [parser.parse_args(a) for a in graft_commands("eagle3-equal", **partial)]
    featurize = [a for a in commands if a.command == "drafter-corpus"]
    assert [(f.corpus, f.to_data, f.shards) for f in featurize] == [
        ("data/corpus/smollm2-135m", "runs/drafter-data-v3", 8),  # CORPUS:DIR:N, the first N shards
        ("data/corpus/smollm2-135m-regular", "runs/drafter-data-regular", None)]
    assert next(a for a in commands if a.command == "train-eagle3").data == [
        "runs/drafter-data-v3", "runs/drafter-data-regular"]
    scratch = next(parser.parse_args(a) for a in graft_commands("eagle3-equal") if a[0] == "train-eagle3")
    assert scratch.init_drafter is None


def phony_targets(makefile: str) -> list[str]:
    text = re.sub(r"\\\n\s*", " ", (ROOT / makefile).read_text())
    return next(line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith(".PHONY:"))


def test_the_users_makefile_has_its_few_targets_and_each_experiment_its_script():
    """The user's Makefile: set-up, data, main, test, lab, lint, artifacts, clean; every experiment is a script under
    experiments/ headed by what it measures, how long it takes and where its results go, and runs as its own
    command; the README names the folder."""
    assert sorted(phony_targets("Makefile")) == sorted(USER_TARGETS) and len(USER_TARGETS) <= 12
    assert len(SCRIPTS) >= 15 and not set(SCRIPTS) & set(USER_TARGETS)
    for name in SCRIPTS:
        path = ROOT / "experiments" / f"{name}.sh"
        head = path.read_text().split("\nsource ", 1)[0]
        assert head.startswith("#!/usr/bin/env bash\n"), name
        for field in ("# Measures: ", "# Takes: ", "# Results: "):
            assert field in head, f"{name}.sh: no {field.strip()!r} line in its header"
        assert os.access(path, os.X_OK), f"{name}.sh is not executable"
    assert "experiments/" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_dry_runs_and_its_graft_commands_parse(name):
    args = ("device-check",) if name == "gpu-remote" else ()
    commands = graft_commands(name, *args)
    assert commands or "/papermill notebooks/" in script_dry(name,
                                                             *args), f"{name}.sh runs no graft command or notebook"
    parser = build_parser()
    for a in commands:
        parser.parse_args(a)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
@pytest.mark.parametrize("target", ["artifacts", "main"])
def test_the_users_targets_parse(target):
    commands = make_graft_commands(target)
    assert commands
    for args in commands:
        build_parser().parse_args(args)


def test_gpu_remote_refuses_an_unknown_script():
    out = subprocess.run(["bash", "experiments/gpu-remote.sh", "nonsense"], cwd=ROOT, capture_output=True, text=True,
                         check=False,
                         env={**os.environ, "DRY_RUN": "1"})
    assert out.returncode == 2 and "unknown script 'nonsense'" in out.stderr
def test_tasks_branches_continues_the_committed_corpus():
    """The generation settings of `experiments/tasks-branches.sh` are those the committed branch corpus was made with,
    so a re-run extends it (an export of data made otherwise is refused, hours later) and featurizes into one data
    dir."""
    from graftlib.training.drafter.data.corpus import read_corpus
    from graftlib.training.drafter.data.target_data import DataConfig, data_config_from_args

    commands = graft_commands("tasks-branches")
    parser = build_parser()
    parsed = [parser.parse_args(args) for args in commands if args[0] != "data"]  # `graft data --fetch` first
    assert [a.command for a in parsed] == ["drafter-corpus", "drafter-data", "drafter-corpus"]
    featurize, gen, export = parsed
    assert featurize.to_data == gen.out == export.from_data and featurize.corpus == export.corpus
    corpus = read_corpus(ROOT / export.corpus)
    cfg = data_config_from_args(gen)
    assert isinstance(cfg, DataConfig)
    for key in ("pool", "max_prompt_tokens", "max_response_tokens", "shard_size", "top_k", "sample_share",
                "sample_temperature", "branches", "branch_tokens"):
        assert getattr(cfg, key) == corpus[key], key
    assert gen.n_prompts * gen.branches >= sum(s["count"] for s in corpus["shards"])


def test_drafter_next_continues_the_shipped_drafter_on_every_corpus():
    """`experiments/drafter-next.sh` warm-starts the shipped drafter on its last stage's data (the EAGLE-3 run's, in one
    order) plus the featurized branch corpus, at its last stage's fine-tune settings, on the CPU clock."""
    import json

    commands = graft_commands("drafter-next")
    parser = build_parser()
    parsed = [parser.parse_args(args) for args in commands if args[0] != "data"]
    assert [a.command for a in parsed][-2:] == ["drafter-corpus", "train-drafter"]
    *featurize, branches, train = parsed
    e3 = next(parser.parse_args(a) for a in graft_commands("eagle3-equal") if a[0] == "train-eagle3")
    assert {f.command for f in featurize} == {"drafter-corpus"}  # featurize_corpora of experiments/lib.sh
    assert train.data == [*e3.data, branches.to_data] and branches.corpus.endswith("tasks-branches")
    shipped = json.loads((ROOT / "graftlib/assets/drafters/smollm2-135m-dflash/training.json").read_text())["config"]
    assert train.init_drafter == "embedded" and train.clock == "cpu" and train.minutes >= 240
    assert (train.lr, train.blocks_per_seq) == (shipped["lr"], shipped["blocks_per_seq"])
    assert (train.feature_dropout, train.weight_decay) == (0.2, 0.1)  # the regularized arm of docs/measurements.md
    assert not (train.draft_head or train.anchor_context)
    parts = graft_commands("drafter-next", NEXT_PARTS="--draft-head --anchor-context", NEXT_LR="3e-4")
    train = parser.parse_args(next(a for a in parts if a[0] == "train-drafter"))
    assert train.draft_head and train.anchor_context and train.lr == 3e-4



def test_drafter_parts_featurizes_what_its_arms_train_on():
    """`experiments/drafter-parts.sh` on a fresh machine featurizes its corpora first (one run holds the A/B), and its
    four arms (the loop's `name flags...` words appended to one train command) train on exactly those data dirs, in
    one order (one held-out split), warm-started, one thread each, on the CPU clock."""
    parser = build_parser()
    commands = [a for a in graft_commands("drafter-parts") if a[0] != "data"]
    featurize = [parser.parse_args(a) for a in commands if a[0] == "drafter-corpus"]
    assert [(f.to_data, f.shards) for f in featurize] == [
        ("runs/drafter-data-v3", 8), ("runs/drafter-data-tasks-v3", None), ("runs/drafter-data-regular", None)]
    arms = [parser.parse_args(a) for a in commands if a[0] == "train-drafter"]
    assert [Path(a.out).name for a in arms] == ["base", "anchor", "head", "both"]
    for arm in arms:
        assert arm.data == [f.to_data for f in featurize]
        assert arm.init_drafter == "embedded" and arm.clock == "cpu" and arm.minutes == 20 and arm.threads == 1
    assert [(a.draft_head, a.anchor_context) for a in arms] == [
        (False, False), (False, True), (True, False), (True, True)]
    native_bf16 = any(w in Path("/proc/cpuinfo").read_text().split() for w in ("amx_bf16", "avx512_bf16")) \
        if Path("/proc/cpuinfo").is_file() else False
    assert {f.dtype for f in featurize} == {"bfloat16" if native_bf16 else "float32"}  # FEATURIZE_DTYPE's default
    forced = [parser.parse_args(a) for a in graft_commands("drafter-parts", FEATURIZE_DTYPE="float32")
              if a[0] == "drafter-corpus"]
    assert {f.dtype for f in forced} == {"float32"}


def test_table1_with_a_calibration_fitted_here():
    """TABLE1_SABA=here fits SABA on this machine first (`graft calibrate` into SABA_HERE) and hands that file to the
    notebook's kernel through $GRAFT_SABA_PARAMS, into its own folder; without it the shipped calibration is used."""
    here = script_dry("table1-full", TABLE1_SABA="here", SABA_HERE="results/x.json")
    calibrate = [a for a in graft_commands("saba-here", SABA_HERE="results/x.json") if a[0] == "calibrate"]
    assert build_parser().parse_args(calibrate[0]).out == "results/x.json"
    assert f"export GRAFT_SABA_PARAMS={ROOT / 'results/x.json'}" in here
    assert "results/table1-10x256-saba-here/table1_main_results.ipynb" in here
    shipped = script_dry("table1-full")
    assert "GRAFT_SABA_PARAMS" not in shipped and "graft calibrate" not in shipped
