"""The drafter families side by side (`graftlib.lab.workbook.drafter_families`): a DFlash and an EAGLE-3 drafter trained
on one tiny dataset with the same split settings compare on the same held-out anchors, their rows are their final
evaluations, a DFlash lineage counts all its stages, and a difference in the split settings is named."""

import json
import shutil

import pytest
from tiny import MASK_ID, tiny_target, tiny_tokenizer, write_target_dir

from graftlib.core.errors import GraftError
from graftlib.data.prompts import Item
from graftlib.lab.workbook.drafter_families import families_table, plot_families, same_anchors
from graftlib.training.drafter import dflash_train as drafter_train
from graftlib.training.drafter import eagle3_train
from graftlib.training.drafter.data.target_data import DataConfig, build_dataset
from graftlib.training.drafter.lineage import read_lineage

pytestmark = pytest.mark.usefixtures("one_thread")

SPLIT = dict(draft_vocab=0, blocks_per_step=32, blocks_per_seq=8, lr=3e-3, warmup=0.1, minutes=None, max_steps=4,
             eval_blocks=16, heldout=0.3, eval_every=2, log_every=1000)


@pytest.fixture(scope="module")
def drafters(tmp_path_factory):
    """(DFlash drafter dir, EAGLE-3 drafter dir), each trained 4 steps on the same tiny data."""
    root = tmp_path_factory.mktemp("families")
    tdir = write_target_dir(root / "target", seed=0, initializer_range=0.1)
    target = tiny_target("llama", seed=0, initializer_range=0.1)
    items = [Item("alpaca", f"alpaca/{i}", f"say {i} things, please", f"say {i} things") for i in range(8)]
    cfg = DataConfig(target=str(tdir), n_prompts=8, shard_size=4, batch_size=4, max_prompt_tokens=40,
                     max_response_tokens=24, top_k=4)
    build_dataset(root / "data", cfg, target, tiny_tokenizer(), items, [0, 1, 2], log=lambda _: None)
    dflash = drafter_train.train(root / "data", root / "dflash",
                                 drafter_train.TrainConfig(block_size=8, mask_token_id=MASK_ID, tau_prompts=0, **SPLIT),
                                 log=lambda _: None)
    eagle = eagle3_train.train(root / "data", root / "eagle3",
                               eagle3_train.Eagle3TrainConfig(ttt_steps=3, eval_depth=5, **SPLIT), log=lambda _: None)
    return dflash, eagle


def test_families_on_one_split_compare_on_the_same_anchors(drafters):
    dflash, eagle = drafters
    assert same_anchors(dflash, eagle) is None
    rows = families_table({"DFlash": dflash, "EAGLE-3": eagle})
    assert [r["drafter"] for r in rows] == ["DFlash", "EAGLE-3"]
    for row, d in zip(rows, drafters):
        record = json.loads((d / "training.json").read_text())
        ev = record["final_eval"]
        assert [row[f"top-1 d{k}"] for k in (1, 2, 3, 4)] == ev["acc_by_depth"][:4]
        assert row["top-4 d1"] == ev["top4_by_depth"][0] and row["offline tau"] == ev["offline_tau"]
        chain = [row[f"chain d{k}"] for k in (1, 2, 3, 4)]
        assert chain == ev["chain_by_depth"][:4] and chain == sorted(chain, reverse=True)
        assert abs(1 + sum(ev["chain_by_depth"]) - ev["offline_tau"]) < 1e-3
        assert row["held-out sequences"] == record["split"]["heldout_sequences"] > 0
    assert "top-1 d8" not in rows[1]  # EAGLE-3 evaluated 5 depths here
    # DFlash's row counts its lineage (one stage here: its own evaluations); EAGLE-3's its run on its clock
    assert rows[0]["labels seen"] == read_lineage(dflash)[-1]["labels_seen"] and rows[0]["clock"] == "per stage"
    assert rows[1]["labels seen"] == json.loads((eagle / "training.json").read_text())["labels_seen"]
    assert rows[1]["clock"] == "per stage" and rows[1]["stages"] == 1  # its lineage too (one stage)
    fig = plot_families({"DFlash": dflash, "EAGLE-3": eagle}, "families")
    assert len(fig.axes[0].lines) == 6  # top-1, top-4 and chain per drafter


def test_a_different_split_setting_is_named(drafters, tmp_path):
    dflash, eagle = drafters
    for key, change, named in (("blocks_per_seq", {"blocks_per_seq": 16}, "eval_blocks_per_seq differs: 8 vs 16"),
                               ("eval_grouping", {"blocks_per_seq": 4, "eval_blocks_per_seq": 16},
                                "eval_blocks_per_seq differs: 8 vs 16"),
                               ("heldout", {"heldout": 0.04}, "heldout differs")):
        other = shutil.copytree(eagle, tmp_path / key)
        record = json.loads((other / "training.json").read_text())
        record["config"].update(change)
        (other / "training.json").write_text(json.dumps(record))
        assert named in same_anchors(dflash, other)
    other = shutil.copytree(eagle, tmp_path / "trained-apart")  # another training grouping, the same eval grouping
    record = json.loads((other / "training.json").read_text())
    record["config"].update(blocks_per_seq=32, eval_blocks_per_seq=8)
    (other / "training.json").write_text(json.dumps(record))
    assert same_anchors(dflash, other) is None
    other = shutil.copytree(eagle, tmp_path / "data")
    record = json.loads((other / "training.json").read_text())
    record["data"]["dirs"] = ["runs/other-data"]
    (other / "training.json").write_text(json.dumps(record))
    assert same_anchors(dflash, other).startswith("data directories differ")
    with pytest.raises(GraftError, match="not a trained drafter directory"):
        families_table({"none": tmp_path})
