"""Refreshing the shipped artifacts from one `graft prepare` folder (`make artifacts`), on a tiny random pair.

`graft prepare --task-scorers gsm8k` trains a second scorer on the gsm8k rounds of the same traces
(kept on a re-run, re-made alone when its files are gone, dropped when the traces are remade without
it, a task without traces named); `ship`
copies a finished folder into a temporary assets root (never the repository's) with the drafter's
fingerprint and the regenerating command in each JSON, and refuses, writing nothing, another pair's
folder, a folder holding a doctored artifact and an unfinished one; `check_shipped` passes on the
repository's assets for the embedded pair and names a doctored copy's artifact.
"""

import json
import shutil
from dataclasses import replace

import pytest
import torch
from tiny import write_drafter_dir, write_target_dir

from graftlib.cli import main
from graftlib.core.errors import GraftError
from graftlib.inputs.artifacts import ArtifactDir, ShippedAssets, check_shipped
from graftlib.methods.saba_params import SabaParams
from graftlib.methods.tdes import scorer_config, scorer_id
from graftlib.models.pair import PairId, load_pair
from graftlib.training.prepare import QUICK, PrepareConfig, prepare
from graftlib.training.ship import REGENERATE, ship

pytestmark = pytest.mark.usefixtures("one_thread")
# the tdes pool starts gsm8k, gsm8k, math500: the gsm8k scorer sees two of the three prompts
SIZES = replace(QUICK, trace_prompts=3, val_prompts=2, grid=(1, 2, 4), task_scorers=("gsm8k",))


def quiet(_):
    pass


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("ship")
    target = write_target_dir(root / "Qwen3-tiny", "qwen3", seed=1, initializer_range=0.1)
    drafter = write_drafter_dir(root / "tiny-dflash", seed=1)
    return load_pair(str(target), str(drafter), "cpu"), root


@pytest.fixture(scope="module")
def folder(tiny_pair):
    pair, root = tiny_pair
    out = root / "artifacts"
    prepare(pair, out, SIZES, command="graft prepare --task-scorers gsm8k (test)", log=quiet)
    return out


def manifest_of(folder) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def statuses(manifest: dict) -> dict:
    return {step: s["status"] for step, s in manifest["steps"].items()}


def test_prepare_trains_a_scorer_on_one_tasks_traces(folder, tiny_pair):
    pair, _ = tiny_pair
    m = manifest_of(folder)
    assert statuses(m) == {"traces": "made", "tdes": "made", "tdes-gsm8k": "made", "saba": "made"}
    step = m["steps"]["tdes-gsm8k"]
    assert step["complete"] and step["task"] == "gsm8k" and step["id"] == scorer_id(folder / "tdes-gsm8k.safetensors")
    every, gsm8k = scorer_config(folder / "tdes.safetensors"), scorer_config(folder / "tdes-gsm8k.safetensors")
    assert every["tasks"] == "all" and gsm8k["tasks"] == ["gsm8k"]
    assert gsm8k["pair"] == every["pair"] == pair.identity().to_dict() and gsm8k["traces"] == every["traces"]
    assert every["data"]["prompts"] == 3 and gsm8k["data"]["prompts"] == 2
    assert step["id"] != m["steps"]["tdes"]["id"]


def test_prepare_keeps_the_task_scorer_and_remakes_it_alone(folder, tiny_pair):
    pair, _ = tiny_pair
    ids = {k: s.get("id") for k, s in manifest_of(folder)["steps"].items()}
    assert set(statuses(prepare(pair, folder, SIZES, log=quiet)).values()) == {"kept"}
    (folder / "tdes-gsm8k.safetensors").unlink()  # as if interrupted while training it
    m = prepare(pair, folder, SIZES, log=quiet)
    assert statuses(m) == {"traces": "kept", "tdes": "kept", "tdes-gsm8k": "made", "saba": "kept"}
    assert {k: s.get("id") for k, s in m["steps"].items()} == ids  # same traces, same seed: the same scorer


def test_retraced_folders_drop_a_task_scorer_no_longer_asked_for(folder, tiny_pair, tmp_path):
    pair, _ = tiny_pair
    copy = shutil.copytree(folder, tmp_path / "copy")
    (copy / "tdes.safetensors").unlink()  # the scorers are trained again, on traces that resume
    m = prepare(pair, copy, replace(SIZES, task_scorers=()), log=quiet)
    assert statuses(m) == {"traces": "made", "tdes": "made", "saba": "kept"}
    assert not (copy / "tdes-gsm8k.safetensors").exists() and not (copy / "tdes-gsm8k.json").exists()


def test_a_task_scorer_needs_that_tasks_traces(folder, tiny_pair):
    pair, _ = tiny_pair
    with pytest.raises(GraftError, match="no traces of task\\(s\\) \\['aime24'\\]"):
        PrepareConfig(task_scorers=("aime24",)).check()
    with pytest.raises(GraftError, match="named twice"):
        PrepareConfig(task_scorers=("gsm8k", "gsm8k")).check()
    with pytest.raises(GraftError, match="no trace rounds in .* for tasks \\['swe-bench'\\]"):
        prepare(pair, folder, replace(SIZES, task_scorers=("gsm8k", "swe-bench")), log=quiet)
    assert "tdes-swe-bench" not in manifest_of(folder)["steps"]


def test_ship_copies_a_finished_folder_into_the_assets(folder, tiny_pair, tmp_path):
    pair, _ = tiny_pair
    ident, m = pair.identity(), manifest_of(folder)
    assets = ShippedAssets(tmp_path / "assets")
    written = ship(folder, ident, assets, log=quiet)
    assert sorted(p.relative_to(assets.root).as_posix() for p in written) == [
        "saba/default.json", "tdes/default.json", "tdes/default.safetensors", "tdes/gsm8k.json",
        "tdes/gsm8k.safetensors"]
    assert not list(assets.root.rglob("*.partial"))
    assert scorer_id(assets.tdes()) == m["steps"]["tdes"]["id"]
    assert scorer_id(assets.tdes("gsm8k")) == m["steps"]["tdes-gsm8k"]["id"]
    saba = SabaParams.load(assets.saba)
    assert saba.id == m["steps"]["saba"]["id"]
    for record in (scorer_config(assets.tdes()), scorer_config(assets.tdes("gsm8k")), saba.meta):
        shipped = record["shipped"]
        assert shipped["drafter_fingerprint"] == ident.drafter_fingerprint == record["pair"]["drafter_fingerprint"]
        assert shipped["regenerate"] == REGENERATE and shipped["prepare_command"] == m["command"]
    assert check_shipped(assets, ident) == []
    other = replace(ident, drafter_fingerprint="0" * 12)
    assert len(check_shipped(assets, other)) == 3  # the check can fail: a retrained drafter flags all three


def test_a_folder_with_the_paper_regime_step_ships_that_calibration_too(folder, tiny_pair, tmp_path):
    pair, _ = tiny_pair
    mine = tmp_path / "artifacts"
    shutil.copytree(folder, mine)
    m = prepare(pair, mine, replace(SIZES, paper_prompts=1), command="graft prepare --paper-prompts 1 (test)",
                log=quiet)
    assert statuses(m) == {"traces": "kept", "tdes": "kept", "tdes-gsm8k": "kept", "saba": "kept", "saba-paper": "made"}
    assets = ShippedAssets(tmp_path / "assets")
    written = {p.relative_to(assets.root).as_posix() for p in ship(mine, pair.identity(), assets, log=quiet)}
    assert "saba/paper-a100.json" in written and "saba/default.json" in written
    paper = SabaParams.load(assets.saba_paper)
    assert paper.id == m["steps"]["saba-paper"]["id"] and paper.meta["shipped"]["regenerate"] == REGENERATE
    assert assets.calibrations() == [assets.saba, assets.saba_paper]
    other = replace(pair.identity(), drafter_fingerprint="0" * 12)
    assert len(check_shipped(assets, other)) == 4  # both calibrations and both scorers name the old drafter


def test_ship_refuses_another_pair_and_writes_nothing(folder, tiny_pair, tmp_path):
    pair, _ = tiny_pair
    assets = ShippedAssets(tmp_path / "assets")
    other = replace(pair.identity(), drafter_fingerprint="0" * 12)
    with pytest.raises(GraftError, match="not of the embedded pair"):
        ship(folder, other, assets, log=quiet)
    assert not assets.root.exists()


def test_ship_refuses_a_doctored_artifact_and_writes_nothing(folder, tiny_pair, tmp_path):
    pair, _ = tiny_pair
    copy = shutil.copytree(folder, tmp_path / "copy", ignore=shutil.ignore_patterns("traces"))
    config = json.loads((copy / "tdes-gsm8k.json").read_text())
    config["pair"]["drafter_fingerprint"] = "0" * 12
    (copy / "tdes-gsm8k.json").write_text(json.dumps(config))
    assets = ShippedAssets(tmp_path / "assets")
    with pytest.raises(GraftError, match="tdes-gsm8k.json was fitted for .* not for the embedded pair"):
        ship(copy, pair.identity(), assets, log=quiet)
    assert [p for p in assets.root.rglob("*") if p.is_file()] == []  # tdes/default.* was staged, then discarded


def test_ship_refuses_an_unfinished_folder(folder, tiny_pair, tmp_path):
    pair, _ = tiny_pair
    copy = shutil.copytree(folder, tmp_path / "copy", ignore=shutil.ignore_patterns("traces"))
    m = manifest_of(copy)
    m["steps"]["tdes-gsm8k"]["complete"] = False
    del m["steps"]["saba"]
    (copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(GraftError, match="not finished \\(missing or incomplete: saba, tdes-gsm8k\\)"):
        ship(copy, pair.identity(), ShippedAssets(tmp_path / "assets"), log=quiet)
    with pytest.raises(GraftError, match="is not a `graft prepare` folder"):
        ship(tmp_path, pair.identity(), ShippedAssets(tmp_path / "assets"), log=quiet)


def test_prepare_ship_refuses_another_pair_before_loading(capsys, tiny_pair, tmp_path):
    _, root = tiny_pair
    code = main(["prepare", "--target", str(root / "Qwen3-tiny"), "--drafter", str(root / "tiny-dflash"),
                 "--quick", "--out", str(tmp_path / "out"), "--ship", "--assets", str(tmp_path / "assets")])
    assert code == 2 and "only the embedded pair's artifacts ship" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "assets").exists()


def shipped_copy(tmp_path) -> ShippedAssets:
    """The repository's shipped scorers and calibration, copied (the drafters stay behind)."""
    repo = ShippedAssets()
    for sub in ("tdes", "saba"):
        shutil.copytree(repo.root / sub, tmp_path / sub)
    return ShippedAssets(tmp_path)


def test_the_shipped_artifacts_belong_to_the_shipped_drafter(embedded_pair):
    assert check_shipped(ShippedAssets(), embedded_pair.identity()) == []


def test_check_shipped_names_a_doctored_copy(tmp_path):
    assets = shipped_copy(tmp_path)
    embedded = PairId.from_dict(scorer_config(assets.tdes())["pair"], "the shipped scorer")
    assert check_shipped(assets, embedded) == []
    config = json.loads(assets.tdes("gsm8k").with_suffix(".json").read_text())
    config["pair"]["drafter_fingerprint"] = "0" * 12  # as if trained for another (older) drafter
    assets.tdes("gsm8k").with_suffix(".json").write_text(json.dumps(config))
    problems = check_shipped(assets, embedded)
    assert len(problems) == 1 and "tdes/gsm8k.json was fitted for" in problems[0] and "000000000000" in problems[0]
    saba = json.loads(assets.saba.read_text())
    del saba["meta"]["pair"]
    assets.saba.write_text(json.dumps(saba))
    problems = check_shipped(assets, embedded)
    assert len(problems) == 2 and "saba/default.json records no pair" in problems[1]


def test_ship_drafter_replaces_the_drafter_and_refuses_a_misfit(tmp_path, tiny_pair):
    """`graft ship-drafter`: a trained drafter directory becomes the shipped one (files staged, then renamed;
    a stale record the new drafter lacks is removed, ablation.json kept); a drafter of another target, a
    directory without weights and the shipped directory itself are refused with nothing written."""
    from graftlib.models.drafter import load_drafter
    from graftlib.models.tiny import write_drafter_dir as write_dir
    from graftlib.training.ship import ship_drafter

    pair, root = tiny_pair
    dest = tmp_path / "assets-drafter"
    shutil.copytree(root / "tiny-dflash", dest)
    (dest / "metrics.jsonl").write_text('{"old": 1}\n')
    (dest / "lineage.jsonl").write_text('{"old": 1}\n')
    (dest / "ablation.json").write_text("{}\n")
    new = write_dir(tmp_path / "new", seed=7)
    (new / "training.json").write_text('{"steps": 3}\n')
    (new / "lineage.jsonl").write_text('{"stage": "new"}\n')
    written = ship_drafter(new, pair.target, dest, log=quiet)
    assert sorted(p.name for p in written) == ["config.json", "lineage.jsonl", "model.safetensors", "training.json"]
    assert (dest / "model.safetensors").read_bytes() == (new / "model.safetensors").read_bytes()
    assert (dest / "lineage.jsonl").read_text() == '{"stage": "new"}\n'  # the new drafter's curve ships with it
    assert not (dest / "metrics.jsonl").exists() and (dest / "ablation.json").is_file()
    assert not list(dest.glob("*.partial"))
    shipped, _ = load_drafter(str(dest), pair.target.config)
    fresh, _ = load_drafter(str(new), pair.target.config)
    assert all(torch.equal(a, b) for a, b in zip(shipped.state_dict().values(), fresh.state_dict().values()))
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    other = write_dir(tmp_path / "other", seed=2, vocab_size=pair.target.config.vocab_size + 8)
    with pytest.raises(GraftError):
        ship_drafter(other, pair.target, dest, log=quiet)
    (tmp_path / "empty").mkdir()
    with pytest.raises(GraftError, match="missing config.json, model.safetensors"):
        ship_drafter(tmp_path / "empty", pair.target, dest, log=quiet)
    with pytest.raises(GraftError, match="already the shipped drafter"):
        ship_drafter(dest, pair.target, dest, log=quiet)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before


def test_ship_eagle3_replaces_the_eagle3_drafter_and_refuses_a_misfit(tmp_path, tiny_pair):
    """`graft ship-eagle3`: a trained EAGLE-3 directory becomes the shipped one
    with its records; one fitted to a target of another width, an unknown family, or a DFlash directory
    given as EAGLE-3 are refused with nothing written."""
    from tiny import eagle3_config, random_eagle3, write_eagle3_dir

    from graftlib.models.eagle3 import load_eagle3
    from graftlib.training.ship import ship_drafter

    pair, root = tiny_pair
    tc = pair.target.config
    dest = write_eagle3_dir(tmp_path / "assets-eagle3", random_eagle3(eagle3_config(tc), tc, seed=1), embed=True)
    (dest / "training.json").write_text('{"steps": 1}\n')
    new = write_eagle3_dir(tmp_path / "new", random_eagle3(eagle3_config(tc), tc, seed=2), embed=True)
    (new / "training.json").write_text('{"steps": 3}\n')
    (new / "lineage.jsonl").write_text('{"stage": "new"}\n')
    written = ship_drafter(new, pair.target, dest, "eagle3", log=quiet)
    assert sorted(p.name for p in written) == ["config.json", "lineage.jsonl", "model.safetensors", "training.json"]
    assert (dest / "model.safetensors").read_bytes() == (new / "model.safetensors").read_bytes()
    embed = pair.target.get_input_embeddings().weight
    assert torch.equal(load_eagle3(dest, embed).d2t, load_eagle3(new, embed).d2t)
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    wide = tc.__class__(**{**tc.to_dict(), "hidden_size": tc.hidden_size * 2})
    other = write_eagle3_dir(tmp_path / "other", random_eagle3(eagle3_config(wide), wide, seed=3), embed=True)
    with pytest.raises(GraftError, match="target_hidden_size"):
        ship_drafter(other, pair.target, dest, "eagle3", log=quiet)
    with pytest.raises(GraftError, match="is not an EAGLE-3 checkpoint"):
        ship_drafter(root / "tiny-dflash", pair.target, dest, "eagle3", log=quiet)
    with pytest.raises(GraftError, match="unknown drafter family 'medusa'"):
        ship_drafter(new, pair.target, dest, "medusa", log=quiet)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before


def test_ship_eagle3_with_its_dflash_reference(tmp_path, tiny_pair):
    """`graft ship-eagle3 --reference DIR`: the DFlash drafter scored on the EAGLE-3 drafter's held-out anchors
    ships beside it (with the DFlash checkpoint's id) and reads back until another DFlash drafter is shipped; a
    reference that trained, holds other weights or scored other anchors is refused with nothing written; a
    drafter shipped without one removes the old reference."""
    from tiny import eagle3_config, random_eagle3, write_eagle3_dir

    from graftlib.training.drafter.eval_anchors import REFERENCE, read_reference
    from graftlib.training.ship import ship_drafter

    pair, root = tiny_pair
    tc = pair.target.config
    dflash = shutil.copytree(root / "tiny-dflash", tmp_path / "dflash")
    split = {"final_eval": {"acc_by_depth": [0.5]}, "data": {"dirs": ["runs/drafter-data-tasks-v3"]},
             "config": {"heldout": 0.04, "seed": 0, "eval_blocks": 384, "blocks_per_seq": 16},
             "split": {"heldout_sequences": 9}}
    dest = write_eagle3_dir(tmp_path / "assets-eagle3", random_eagle3(eagle3_config(tc), tc, seed=1), embed=True)
    new = write_eagle3_dir(tmp_path / "new", random_eagle3(eagle3_config(tc), tc, seed=2), embed=True)
    (new / "training.json").write_text(json.dumps({**split, "steps": 300}))
    scored = shutil.copytree(dflash, tmp_path / "scored")
    (scored / "training.json").write_text(json.dumps({**split, "steps": 0}))
    written = ship_drafter(new, pair.target, dest, "eagle3", log=quiet, reference=(scored, dflash))
    assert REFERENCE in {p.name for p in written}
    ref = read_reference(dest, dflash)
    assert ref["steps"] == 0 and ref["final_eval"] == split["final_eval"] and len(ref["dflash_checkpoint"]) == 12
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    for name, change, match in (("trained", {"steps": 5}, "trained 5 steps"),
                                ("apart", {"data": {"dirs": ["runs/other"]}}, "not scored on the EAGLE-3 drafter")):
        bad = shutil.copytree(dflash, tmp_path / name)
        (bad / "training.json").write_text(json.dumps({**split, "steps": 0, **change}))
        with pytest.raises(GraftError, match=match):
            ship_drafter(new, pair.target, dest, "eagle3", log=quiet, reference=(bad, dflash))
    other = write_drafter_dir(tmp_path / "other-weights", seed=9)
    (other / "training.json").write_text(json.dumps({**split, "steps": 0}))
    with pytest.raises(GraftError, match="does not hold the weights of"):
        ship_drafter(new, pair.target, dest, "eagle3", log=quiet, reference=(other, dflash))
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    shutil.copyfile(other / "model.safetensors", dflash / "model.safetensors")  # another DFlash drafter shipped
    assert read_reference(dest, dflash) is None
    ship_drafter(new, pair.target, dest, "eagle3", log=quiet)
    assert not (dest / REFERENCE).exists()


def test_ship_dflash2_needs_a_selector_on_the_same_drafts(tmp_path, tiny_pair):
    """`graft ship-dflash2`: a DFlash 2 drafter ships beside the DFlash one only with its selector and the
    DFlash drafter's own draft weights (so the scorers and calibration fitted for those drafts hold for it)."""
    from graftlib.models.drafter import load_drafter, save_drafter
    from graftlib.models.pair import identify
    from graftlib.models.tiny import tiny_drafter
    from graftlib.training.ship import ship_drafter

    pair, root = tiny_pair
    plain = root / "tiny-dflash"
    base, _ = load_drafter(str(plain), pair.target.config)
    with_selector = tiny_drafter(seed=5, selector_rank=8, selector_top_k=6)
    missing, unexpected = with_selector.load_state_dict(base.state_dict(), strict=False)
    assert not unexpected and missing and all(k.startswith("candidate_selector.") for k in missing)
    save_drafter(with_selector, tmp_path / "sel")
    dest = tmp_path / "assets-dflash2"
    written = ship_drafter(tmp_path / "sel", pair.target, dest, "dflash2", log=quiet, drafts_of=plain)
    assert {p.name for p in written} == {"config.json", "selector.safetensors"}  # no copy of the drafter
    shipped, _ = load_drafter(str(dest), pair.target.config)
    full = with_selector.state_dict()
    drafted = base.id_map if base.id_map is not None else torch.arange(pair.target.config.vocab_size)
    for name, tensor in shipped.state_dict().items():  # the full checkpoint's function: every row a draft reads
        rows = full[name] if name != "candidate_selector.successor_codebook" else full[name][drafted]
        mine = tensor if name != "candidate_selector.successor_codebook" else tensor[drafted]
        assert torch.equal(mine, rows), name
    assert identify(pair.target, shipped).drafter_fingerprint == identify(pair.target, base).drafter_fingerprint
    save_drafter(tiny_drafter(seed=6, selector_rank=8, selector_top_k=6), tmp_path / "other-drafts")
    with pytest.raises(GraftError, match="drafts with weights .* not those of"):
        ship_drafter(tmp_path / "other-drafts", pair.target, dest, "dflash2", log=quiet, drafts_of=plain)
    with pytest.raises(GraftError, match="has no DFlash 2 candidate selector"):
        ship_drafter(plain, pair.target, dest, "dflash2", log=quiet, drafts_of=plain)


def strength_file(path, s: float = 0.9, tau: float = 0.5):
    """A drafter-strength file for the tiny pair: every task at (s, tau)."""
    from graftlib.data.prompts import TASKS
    from graftlib.models.strength import SCHEMA

    path.write_text(json.dumps({"schema": SCHEMA, "tasks": {t: {"s": s, "tau": tau} for t in TASKS}}))
    return path


def test_prepare_on_the_strength_construction_fits_every_part_on_it_and_ships_as_paper_acceptance(
        folder, tiny_pair, tmp_path):
    from graftlib.inputs.cost_profile import PAPER_PROFILE, CostProfile
    from graftlib.models.strength import TaskStrengths

    pair, _ = tiny_pair
    file = strength_file(tmp_path / "strength.json")
    out, cfg = tmp_path / "construction", replace(SIZES, strength=str(file), paper_prompts=1)
    m = prepare(pair, out, cfg, command="graft prepare --strength FILE (test)", log=quiet)
    strength = TaskStrengths(file).describe()
    assert m["strength"] == strength and "saba" not in m["steps"]  # a construction is never timed: no step 3
    assert statuses(m) == {"traces": "made", "tdes": "made", "tdes-gsm8k": "made", "saba-paper": "made"}
    index = json.loads((out / "traces" / "index.json").read_text())
    real = json.loads((folder / "traces" / "index.json").read_text())
    assert index["strength"] == strength["strength_id"] and "strength" not in real
    mat = [sum(s["mat"] * s["rounds"] for s in i["shards"]) / sum(s["rounds"] for s in i["shards"]) for i in (index,
                                                                                                              real)]
    assert mat[0] > mat[1] + 0.5, mat  # the same prompts drafted at strength 0.9 accept far deeper
    paper = SabaParams.load(out / "saba-paper-a100.json")
    assert paper.meta["strength_id"] == strength["strength_id"] and paper.meta["regular_prompts"] == 0
    assert paper.meta["cost_profile"] == CostProfile.load(PAPER_PROFILE).label
    assert set(statuses(prepare(pair, out, cfg, log=quiet)).values()) == {"kept"}  # resumable

    assets = ShippedAssets(tmp_path / "assets")
    written = {p.relative_to(assets.root).as_posix() for p in ship(out, pair.identity(), assets, log=quiet)}
    assert written == {"saba/paper-acceptance.json", "tdes/paper-acceptance.json", "tdes/paper-acceptance.safetensors",
                       "tdes/paper-acceptance-gsm8k.json", "tdes/paper-acceptance-gsm8k.safetensors"}
    assert SabaParams.load(assets.saba_paper_acceptance).id == m["steps"]["saba-paper"]["id"]
    assert scorer_id(assets.acceptance_scorers()["gsm8k"]) == m["steps"]["tdes-gsm8k"]["id"]
    assert check_shipped(assets, pair.identity()) == []
    # fitted on another shipped calibration: its parts ship under that calibration's names, beside own-spine's
    from graftlib.training.ship import shipments

    pinned = {**m, "strength": {**m["strength"],
                                "strength_file": "graftlib/assets/strength/paper-qwen3-8b-pinned.json"}}
    names = {dest.relative_to(assets.root).as_posix() for _, dest in shipments(ArtifactDir(out), pinned, assets)}
    assert names == {"saba/paper-acceptance-pinned.json", "tdes/paper-acceptance-pinned.safetensors",
                     "tdes/paper-acceptance-pinned-gsm8k.safetensors"}


def test_a_folder_of_another_drafter_strength_is_refused(folder, tiny_pair, tmp_path):
    pair, _ = tiny_pair
    cfg = replace(SIZES, strength=str(strength_file(tmp_path / "strength.json")), paper_prompts=1)
    with pytest.raises(GraftError, match="fitted with the real drafter, not at the drafter strengths of"):
        prepare(pair, folder, cfg, log=quiet)
    with pytest.raises(GraftError, match="--paper-prompts must be > 0"):
        prepare(pair, tmp_path / "new", replace(cfg, paper_prompts=0), log=quiet)
    bad = tmp_path / "partial.json"
    bad.write_text(json.dumps({"schema": "graft-drafter-strength/1", "tasks": {"alpaca": {"s": 0.5, "tau": 1.0}}}))
    with pytest.raises(GraftError, match="has no calibrated drafter strength for 'gsm8k'"):
        prepare(pair, tmp_path / "partial", replace(cfg, strength=str(bad)), log=quiet)
