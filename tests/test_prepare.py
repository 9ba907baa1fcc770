"""`graft prepare` end to end on a tiny random Qwen3 pair given by path, as a new user would try it.

The shipped artifacts are refused for that pair (with the command), `graft prepare` makes the
pair's own traces, scorer and calibration into one folder (tiny sizes: seconds on one thread), a
re-run keeps every step, `graft generate --artifacts DIR` decodes exactly with GRAFT, and a folder
of another pair is refused.
"""

import json

import pytest
from tiny import write_drafter_dir, write_target_dir

from graftlib.cli import main
from graftlib.core.errors import GraftError
from graftlib.inputs.cost_profile import PAPER_PROFILE, CostProfile
from graftlib.methods.saba_params import PAPER_GRID, SabaParams
from graftlib.methods.tdes import scorer_config
from graftlib.models.pair import load_pair
from graftlib.training.prepare import QUICK, prepare

pytestmark = pytest.mark.usefixtures("one_thread")
SIZES = ["--trace-prompts", "2", "--val-prompts", "2", "--grid", "1", "2", "4"]


@pytest.fixture(scope="module")
def user_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("own")
    target = write_target_dir(root / "Qwen3-tiny", "qwen3", seed=1, initializer_range=0.1)
    drafter = write_drafter_dir(root / "tiny-dflash", seed=1)
    return str(target), str(drafter), root


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def generate(capsys, target, drafter, *extra):
    return cli(capsys, "generate", "--target", target, "--drafter", drafter, "--device", "cpu", "--prompt",
               "what is six times seven?", "--max-new-tokens", "20", *extra)


def test_new_pair_first_run_prepare_and_use(capsys, user_pair):
    target, drafter, root = user_pair
    for method in ("graft", "ddtree+saba"):  # the shipped artifacts belong to the embedded pair
        code, _, err = generate(capsys, target, drafter, "--method", method)
        assert code == 2 and "not for this pair" in err and f"graft prepare --target {target}" in err, err
    out = root / "artifacts"
    code, log, err = cli(capsys, "prepare", "--target", target, "--drafter", drafter, "--device", "cpu", "--quick",
                         "--out", str(out), *SIZES)
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    pair = load_pair(target, drafter, "cpu").identity()
    assert manifest["pair"] == pair.to_dict() and manifest["hardware"].startswith("cpu:")
    assert {s: (v["status"], v["complete"]) for s, v in manifest["steps"].items()} == {
        "traces": ("made", True), "tdes": ("made", True), "saba": ("made", True)}
    saba = SabaParams.load(out / "saba.json")
    assert saba.grid == [1, 2, 4]
    assert saba.meta["pair"] == pair.to_dict() == scorer_config(out / "tdes.safetensors")["pair"]
    assert saba.meta["hardware"] == manifest["hardware"] == scorer_config(out / "tdes.safetensors")["hardware"]
    assert (out / "traces" / "index.json").is_file() and "--artifacts" in log

    code, log, _ = cli(capsys, "prepare", "--target", target, "--drafter", drafter, "--device", "cpu", "--quick",
                       "--out", str(out), *SIZES)  # resumable: nothing left to do
    steps = json.loads((out / "manifest.json").read_text())["steps"]
    assert code == 0 and {v["status"] for v in steps.values()} == {"kept"}
    assert SabaParams.load(out / "saba.json").id == saba.id

    # step 4: SABA on the paper's grid under the paper's A100 costs, walked (seconds for one tiny prompt)
    paper_args = ("prepare", "--target", target, "--drafter", drafter, "--device", "cpu", "--quick", "--out", str(out),
                  *SIZES, "--paper-prompts", "1")
    code, log, err = cli(capsys, *paper_args)
    steps = json.loads((out / "manifest.json").read_text())["steps"]
    assert code == 0 and steps["saba-paper"]["status"] == "made" and steps["saba"]["status"] == "kept", err
    paper, profile = SabaParams.load(out / "saba-paper-a100.json"), CostProfile.load(PAPER_PROFILE)
    assert paper.grid == list(PAPER_GRID) and (paper.c, paper.c_ar, paper.c_draft) == (profile.c, profile.c_ar,
                                                                                        profile.c_draft)
    assert paper.meta["cost_profile"] == profile.label and paper.meta["pair"] == pair.to_dict()
    assert cli(capsys, *paper_args)[0] == 0
    assert json.loads((out / "manifest.json").read_text())["steps"]["saba-paper"]["status"] == "kept"

    texts = []
    for method in ("ar", "graft", "ddtree+saba"):
        code, text, err = generate(capsys, target, drafter, "--method", method, "--budget", "8", "--artifacts",
                                   str(out))
        assert code == 0, err
        texts.append(text.splitlines()[0])
    assert texts[0] == texts[1] == texts[2]  # GRAFT with the pair's own artifacts is exact


def test_a_folder_of_another_pair_is_refused(user_pair):
    target, _, root = user_pair
    other = write_drafter_dir(root / "other-dflash", seed=5)
    out = root / "artifacts"
    if not (out / "manifest.json").is_file():
        pytest.skip("needs the folder of test_new_pair_first_run_prepare_and_use")
    with pytest.raises(GraftError, match="holds the artifacts of .* not of this pair"):
        prepare(load_pair(target, str(other), "cpu"), out, QUICK)
