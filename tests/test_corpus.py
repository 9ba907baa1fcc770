"""The token corpus (`graftlib.training.drafter.data.corpus`): drafter data exported to tokens and featurized back
gives the same tokens, uids and split, features and top-k log-probs equal to the ones captured while
generating (to float tolerance), resumably; plus the warm start of the DFlash trainer from a drafter."""

import copy
import json

import pytest
import torch
from test_drafter_train import EOS, LAYERS, items, small_train_config, target  # noqa: F401  (fixture)
from tiny import tiny_tokenizer, write_target_dir

from graftlib.core.errors import GraftError
from graftlib.lab.workbook.plots.training import curve_points
from graftlib.training.drafter.data import corpus as corpus_mod
from graftlib.training.drafter.data import target_data as drafter_data
from graftlib.training.drafter.data.store import load_dataset
from graftlib.training.drafter.data.target_data import DataConfig, build_dataset
from graftlib.training.drafter.dflash_train import train

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory, target):  # noqa: F811
    target.generation_config.eos_token_id = EOS
    root = tmp_path_factory.mktemp("corpus")
    tdir = write_target_dir(root / "target", seed=0, initializer_range=0.1)  # the `target` fixture, on disk
    out = root / "data"
    build_dataset(out, data_config(tdir), target, tiny_tokenizer(), items(8), LAYERS, log=lambda _: None)
    return out


def data_config(tdir, n_prompts: int = 7) -> DataConfig:
    return DataConfig(target=str(tdir), n_prompts=n_prompts, shard_size=3, batch_size=4, max_prompt_tokens=40,
                      max_response_tokens=14, top_k=6, sample_share=0.3)


def test_export_then_featurize_round_trip(tmp_path, data, target):  # noqa: F811
    corpus = tmp_path / "corpus"
    c = corpus_mod.export(data, corpus, log=lambda _: None)
    assert len(c["shards"]) == 3 and c["target_layer_ids"] is None and "bytes" not in c["shards"][0]
    assert all(corpus_mod.tokens_path(corpus, s["file"]).is_file() for s in c["shards"])
    assert not list(corpus.glob("*.npy"))  # tokens only
    again = corpus_mod.export(data, corpus, log=lambda _: None)  # nothing new to add
    assert again["shards"] == c["shards"]

    out = tmp_path / "featurized"
    corpus_mod.featurize(corpus, out, target, LAYERS, max_batch_tokens=40, log=lambda _: None)
    src_index, src = load_dataset(data)
    index, seqs = load_dataset(out)
    assert index.shared() == src_index.shared()
    assert [s.uid for s in seqs] == [s.uid for s in src]
    for a, b in zip(seqs, src):
        assert torch.equal(a.tokens, b.tokens) and a.prompt_len == b.prompt_len
        assert torch.allclose(a.features.float(), b.features.float(), atol=2e-2, rtol=1e-2)
        assert torch.allclose(a.topk_logp.float(), b.topk_logp.float(), atol=2e-2)
        assert (a.topk_ids[:, 0] == b.topk_ids[:, 0]).float().mean() > 0.9
    greedy_match = [e["top1_match"] for e in index.shards]
    assert all(m is None or m > 0.9 for m in greedy_match)
    assert [e["seconds"] for e in index.shards] == [e["seconds"] for e in sorted(src_index.shards,
                                                                                 key=lambda e: e["first"])]

    calls = []
    real = corpus_mod.featurize_sequences
    corpus_mod.featurize_sequences = lambda *a, **k: (calls.append(1), real(*a, **k))
    try:
        (out / "shard-00001.safetensors").unlink()  # one shard lost: only it is redone
        corpus_mod.featurize(corpus, out, target, LAYERS, log=lambda _: None)
        assert calls == [1]
        with pytest.raises(GraftError, match="other settings: target_layer_ids"):
            corpus_mod.featurize(corpus, out, target, [1, 2], log=lambda _: None)
    finally:
        corpus_mod.featurize_sequences = real
    # generation goes on where the featurized data stops: nothing to redo, a grown set adds its new shards only
    made = []
    real_gen = drafter_data.generate_sequences
    drafter_data.generate_sequences = lambda *a, **k: (made.append(len(a[1])), real_gen(*a, **k))[1]
    try:
        tdir = data.parent / "target"
        build_dataset(out, data_config(tdir), target, tiny_tokenizer(), items(8), LAYERS, log=lambda _: None)
        assert made == []
        build_dataset(out, data_config(tdir, 8), target, tiny_tokenizer(), items(8), LAYERS, log=lambda _: None)
        assert made == [2]  # the last shard (prompts 6, 7) is remade with its new prompt
    finally:
        drafter_data.generate_sequences = real_gen
    one = corpus_mod.featurize(corpus, tmp_path / "layer2", target, [2], top_k=0, shards=1, log=lambda _: None)
    assert one.target_layer_ids == [2] and one.top_k == 0
    assert [e["file"] for e in one.shards] == [c["shards"][0]["file"]]  # the first shard only
    two = corpus_mod.featurize(corpus, tmp_path / "layer2", target, [2], top_k=0, shards=2, log=lambda _: None)
    assert [e["file"] for e in two.shards] == [e["file"] for e in c["shards"][:2]]
    with pytest.raises(GraftError, match="shards must be a positive"):
        corpus_mod.featurize(corpus, tmp_path / "layer2", target, [2], shards=0, log=lambda _: None)
    assert {e["featurize_dtype"] for e in index.shards} == {"float32"}
    # --dtype bfloat16: the same tokens featurized by the bf16 target, close to the float32 features, and said so
    bf16 = copy.deepcopy(target).to(torch.bfloat16)
    half = corpus_mod.featurize(corpus, tmp_path / "bf16", bf16, LAYERS, log=lambda _: None)
    assert {e["featurize_dtype"] for e in half.shards} == {"bfloat16"}
    _, hseqs = load_dataset(tmp_path / "bf16")
    for a, b in zip(hseqs, seqs):
        assert torch.equal(a.tokens, b.tokens) and a.features.dtype == torch.float16
        assert torch.allclose(a.features.float(), b.features.float(), atol=0.1, rtol=0.05)


def test_a_corpus_from_before_branches_featurizes_and_grows(tmp_path, data, target):  # noqa: F811
    """The shipped corpora were exported before `branches` / `branch_tokens` existed: their index lacks
    both, which read as the defaults (0, 32) for featurizing and for adding more shards."""
    corpus = tmp_path / "corpus"
    c = corpus_mod.export(data, corpus, log=lambda _: None)
    path = corpus / corpus_mod.INDEX
    old = json.loads(path.read_text())
    del old["branches"], old["branch_tokens"]
    old["shards"] = old["shards"][:1]
    path.write_text(json.dumps(old))
    assert corpus_mod.read_corpus(corpus)["branches"] == 0
    index = corpus_mod.featurize(corpus, tmp_path / "f", target, LAYERS, log=lambda _: None)
    assert index.branches == 0 and index.branch_tokens == 32 and len(index.shards) == 1
    assert len(corpus_mod.export(data, corpus, log=lambda _: None)["shards"]) == len(c["shards"])


def test_padding_does_not_change_features(tmp_path, data, target):  # noqa: F811
    """A right-padded batch gives each sequence the features of its own unpadded forward."""
    corpus = tmp_path / "c"
    c = corpus_mod.export(data, corpus, log=lambda _: None)
    seqs = corpus_mod.corpus_sequences(corpus, c["shards"][0])
    alone = corpus_mod.corpus_sequences(corpus, c["shards"][0])
    corpus_mod.featurize_sequences(target, seqs, LAYERS, 4, max_batch_tokens=10 ** 6)  # one padded batch
    for s in alone:
        corpus_mod.featurize_sequences(target, [s], LAYERS, 4)
    assert len({len(s.tokens) for s in seqs}) > 1  # the batch was padded
    for a, b in zip(seqs, alone):
        assert torch.allclose(a.features.float(), b.features.float(), atol=1e-3)
        assert torch.equal(a.topk_ids, b.topk_ids)


def test_corpus_refusals(tmp_path, data):
    with pytest.raises(GraftError, match="no drafter corpus"):
        corpus_mod.read_corpus(tmp_path)
    with pytest.raises(GraftError, match="no drafter data"):
        corpus_mod.export(tmp_path / "nothing", tmp_path / "c", log=lambda _: None)
    corpus = tmp_path / "c"
    corpus_mod.export(data, corpus, log=lambda _: None)
    raw = json.loads((corpus / "index.json").read_text())
    raw["top_k"] = 99
    (corpus / "index.json").write_text(json.dumps(raw))
    with pytest.raises(GraftError, match="other settings: top_k 99"):
        corpus_mod.export(data, corpus, log=lambda _: None)


def test_warm_start_from_a_drafter(tmp_path, data, target):  # noqa: F811
    """--init-drafter: the run starts from the given drafter's weights (not random ones) and refuses
    a drafter of another shape."""
    cfg = small_train_config(max_steps=4, draft_vocab=0)
    first = train(data, tmp_path / "a", cfg, log=lambda _: None)
    from graftlib.models.drafter import load_drafter, save_drafter
    from graftlib.training.drafter.dflash_init import warm_drafter
    from graftlib.training.drafter.dflash_train import Trainer

    start = warm_drafter(small_train_config(init_drafter=str(first), draft_vocab=0), target, LAYERS)
    saved, _ = load_drafter(str(first), target.config)
    assert all(torch.equal(p.float(), q.float()) for p, q in zip(start.state_dict().values(),
                                                                 saved.state_dict().values()))
    assert start.training and all(p.requires_grad for p in start.parameters())
    _, seqs = load_dataset(data)
    tr = Trainer(small_train_config(init_drafter=str(first), draft_vocab=0), target, seqs[:5], seqs[5:], LAYERS, [EOS])
    assert torch.equal(tr.drafter.fc.weight, start.fc.weight)
    # more layers: grown (grow_layers), computing exactly what the one-layer drafter computes
    grown = warm_drafter(small_train_config(init_drafter=str(first), draft_vocab=0, layers=2), target, LAYERS)
    save_drafter(grown, tmp_path / "two")
    assert grown.config.num_hidden_layers == 2 and grown.training
    b = Trainer(small_train_config(draft_vocab=0), target, seqs[:5], seqs[5:], LAYERS, [EOS])
    batch = b.pack(seqs[:2], [[seqs[0].prompt_len], [seqs[1].prompt_len + 1]])
    args = (b.embed(batch.ids).float(), batch.ctx.float(), 0, None, batch.mask, batch.ctx_pos, batch.q_pos)
    assert torch.allclose(grown(*args), start(*args), atol=1e-5)
    loss = grown(*args).square().sum()
    loss.backward()
    new = grown.layers[1]
    assert new.self_attn.o_proj.weight.grad.abs().sum() > 0 and new.mlp.down_proj.weight.grad.abs().sum() > 0
    with pytest.raises(GraftError, match="does not have this run's shape: layers 2 \\(asked 1\\)"):
        warm_drafter(small_train_config(init_drafter=str(tmp_path / "two"), draft_vocab=0), target, LAYERS)
    with pytest.raises(GraftError, match="two different starts"):
        small_train_config(init_drafter=str(first), init_from_target=True).check()
    second = train(data, tmp_path / "b", small_train_config(max_steps=4, eval_every=2, draft_vocab=0,
                                                            init_drafter=str(first)), log=lambda _: None)
    assert json.loads((second / "training.json").read_text())["config"]["init_drafter"] == str(first)
    # the learning curve's x axis: every evaluation records the blocks and labels seen so far
    points = curve_points(tmp_path / "b" / "metrics.jsonl")
    assert [p["step"] for p in points] == [0, 2, 4] and not any(p["tokens_estimated"] for p in points)
    assert 0 == points[0]["blocks_seen"] < points[1]["blocks_seen"] < points[2]["blocks_seen"] <= 4 * 32
    assert 0 == points[0]["tokens_seen"] < points[1]["tokens_seen"] < points[2]["tokens_seen"]
    # step 0 of the warm start scores the drafter it started from (the curve's first point)
    started = json.loads((first / "training.json").read_text())["final_eval"]
    assert points[0]["heldout_loss"] == pytest.approx(started["heldout_loss"], rel=1e-3)


@pytest.mark.parametrize("corpus", corpus_mod.shipped_corpora(), ids=lambda p: p.name)
def test_shipped_corpus_is_whole_and_holds_no_evaluation_prompt(corpus):
    """Each committed corpus: every shard's tokens present and consistent with its entry, and no uid of
    an evaluation prompt (or of SABA's validation split) among its responses."""
    from graftlib.data.prompts import GENERATED_TASKS, SHIPPED_TASKS, load_items

    c = corpus_mod.read_corpus(corpus)
    assert c["target"] == "smollm2-135m" and c["shards"]
    uids = []
    for entry in c["shards"]:
        seqs = corpus_mod.corpus_sequences(corpus, entry)
        assert len(seqs) == entry["n_seqs"] == len(entry["uids"])
        assert sum(s.response_len for s in seqs) == entry["response_tokens"]
        assert sum(s.prompt_len for s in seqs) == entry["prompt_tokens"]
        assert all(0 < s.prompt_len < len(s.tokens) for s in seqs)
        uids += entry["uids"]
    assert len(set(uids)) == len(uids)
    held = {i.uid for t in SHIPPED_TASKS if t != "mt-bench" for split in ("eval", "val") for i in load_items(t, split)}
    held |= {i.uid for i in load_items("mt-bench", "eval")}
    held |= {i.uid for t in GENERATED_TASKS for split in ("eval", "val") for i in load_items(t, split)}
    assert not held & set(uids)


def test_overlapping_data_directories_load_each_response_once(tmp_path, data):
    """Two data directories that answered some of the same prompts (the `drafter` and `tdes` pools
    share task items, and so do the shipped corpora): each uid is loaded once, from the first."""
    import shutil

    from graftlib.training.drafter.samples import load_data

    shutil.copytree(data, tmp_path / "again")
    _, once = load_dataset(data)
    indexes, seqs = load_data([data, tmp_path / "again"], LAYERS)
    assert len(indexes) == 2 and [s.uid for s in seqs] == [s.uid for s in once]
