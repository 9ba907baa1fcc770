"""EAGLE-3 training on tiny models: the training-time-test unroll equals the cached decode forward
(prefix, then a chain of drafts fed back), packed chains carry the right inputs, labels and top-k,
the loss decreases, checkpoints resume exactly, and the saved drafter (public EAGLE-3 layout, the
release's d2t / t2d convention, no embedding) loads strictly with `load_eagle3`."""

import json

import pytest
import torch
from resume import assert_resume_identical
from tiny import VOCAB, prompts_of, tiny_target, tiny_tokenizer, write_target_dir

from graftlib.core.errors import GraftError
from graftlib.models.drafter import init_weights
from graftlib.models.eagle3 import Eagle3Cache, Eagle3Config, Eagle3Drafter, load_eagle3, save_eagle3
from graftlib.training.drafter.data.batched import Capture
from graftlib.training.drafter.data.store import Sequence
from graftlib.training.drafter.data.target_data import DataConfig, build_dataset, generate_sequences
from graftlib.training.drafter.eagle3_train import (
    Eagle3TrainConfig,
    Eagle3Trainer,
    pack_chains,
    train,
    unroll,
)
from graftlib.training.drafter.samples import IGNORE

LAYERS = [0, 1, 2]  # low, mid, high of the 4-layer tiny target
H, TH = 48, 64

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", seed=0, initializer_range=0.1)


@pytest.fixture(scope="module")
def tiny_data(target):
    prompts = prompts_of([4, 9, 6, 12, 5, 8, 7, 10, 3, 11], seed=50)
    seqs = generate_sequences(target, prompts, Capture(LAYERS, 5), 30, [], batch_size=10)
    for i, s in enumerate(seqs):
        s.uid = f"tiny/{i}"
    return seqs[:8], seqs[8:]


def small_config(**kw) -> Eagle3TrainConfig:
    base = dict(draft_vocab=0, blocks_per_step=32, blocks_per_seq=8, lr=3e-3, warmup=0.1, minutes=None,
                max_steps=30, eval_blocks=16, heldout=0.3, eval_every=1000, log_every=1000, ttt_steps=3,
                eval_depth=5)
    base.update(kw)
    return Eagle3TrainConfig(**base)


def synthetic(n, seed=0, lo=14, hi=40):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = int(torch.randint(lo, hi, (1,), generator=g))
        p = int(torch.randint(2, length - 4, (1,), generator=g))
        out.append(Sequence(torch.randint(0, VOCAB, (length,), generator=g), p,
                            torch.randn(length - 1, 3 * TH, generator=g), f"syn/{i}"))
    return out


def test_unroll_equals_the_cached_chain_forward():
    cfg = Eagle3Config(hidden_size=H, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=12,
                       vocab_size=VOCAB, draft_vocab_size=VOCAB, target_hidden_size=TH, rope_theta=500.0)
    torch.manual_seed(3)
    drafter = Eagle3Drafter(cfg)
    init_weights(drafter, std=0.3)
    seqs = synthetic(3, seed=1)
    depth = 4
    anchors = [[seqs[0].prompt_len, seqs[0].prompt_len + 2, len(seqs[0].tokens) - 3],
               [len(seqs[1].tokens) - 2], [seqs[2].prompt_len + 1, seqs[2].prompt_len + 4]]
    batch = pack_chains(seqs, anchors, depth)
    assert batch.n_blocks == 6 and batch.index.shape == (3, 3)
    with torch.no_grad():
        outs = unroll(drafter, batch, depth)
        worst, chains = 0.0, 0
        for r, (s, row) in enumerate(zip(seqs, anchors)):
            for slot, a in enumerate(row):
                # the decode loop: features 0..a-1 beside tokens 1..a, then the chain fed back
                cache = Eagle3Cache()
                h = drafter(s.tokens[None, 1:a + 1], s.features[None, :a], torch.arange(a), cache)[:, -1:]
                worst = max(worst, (outs[0][r, slot] - h[0, 0]).abs().max().item())
                for j in range(1, depth):
                    if a + j >= len(s.tokens):
                        break
                    h = drafter(s.tokens[None, a + j:a + j + 1], h, torch.tensor([a - 1 + j]), cache)
                    worst = max(worst, (outs[j][r, slot] - h[0, 0]).abs().max().item())
                    chains += 1
                want = [int(s.tokens[a + 1 + j]) if a + 1 + j < len(s.tokens) else IGNORE for j in range(depth)]
                assert batch.labels[r, slot].tolist() == want
                chain = batch.chain_ids[r, slot, 1:].tolist()[:len(s.tokens) - a - 1]
                assert chain == s.tokens[a + 1:a + depth].tolist()
        assert chains >= 10 and worst < 1e-4, (chains, worst)
        assert (batch.labels[1, 1:] == IGNORE).all()  # padded anchors
        # not vacuous: the chain's own keys matter (attending to the prefix only differs)
        own_blind = unroll(drafter, batch, 2)
        batch.chain_ids[0, 0, 1] = (batch.chain_ids[0, 0, 1] + 1) % VOCAB
        changed = unroll(drafter, batch, 2)
        assert torch.equal(own_blind[0], changed[0]) and (own_blind[1][0, 0] - changed[1][0, 0]).abs().max() > 1e-3
        assert torch.equal(own_blind[1][0, 1:], changed[1][0, 1:])  # other chains do not see it


def test_packed_soft_targets_are_the_labels_rows(tiny_data):
    seqs = tiny_data[0][:2]
    a0, a1 = seqs[0].prompt_len + 1, seqs[1].prompt_len
    batch = pack_chains(seqs, [[a0], [a1]], 3)
    for j in range(3):
        p = a0 + 1 + j
        assert batch.labels[0, 0, j] == seqs[0].tokens[p]
        assert torch.equal(batch.soft_ids[0, 0, j], seqs[0].topk_ids[p - seqs[0].prompt_len].long())
    assert (batch.soft_ids[batch.labels < 0] == IGNORE).all()


def test_unrolled_loss_decreases_and_evaluates(target, tiny_data):
    train_seqs, held = tiny_data
    trainer = Eagle3Trainer(small_config(distill=0.5), target, train_seqs, held, LAYERS)
    losses = [trainer.step()["loss"] for _ in range(30)]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.8 * first, (first, last)
    ev = trainer.evaluate()
    assert len(ev["acc_by_depth"]) == 5 and 1 <= ev["offline_tau"] <= 6 and ev["heldout_loss"] > 0
    assert ev["heldout_ce"] > 0 and ev["heldout_ce"] != pytest.approx(ev["heldout_loss"],
                                                                      rel=1e-3)  # soft term mixed in
    assert trainer.drafter.training  # evaluation leaves the mode as it was


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_checkpoint_resume_is_identical(tmp_path, target, tiny_data, dropout):
    train_seqs, held = tiny_data
    cfg = small_config(max_steps=6, draft_vocab=20, feature_dropout=dropout)
    first, _ = assert_resume_identical(lambda: Eagle3Trainer(cfg, target, train_seqs, held, LAYERS), tmp_path / "ckpt")
    assert first.labels_seen > 0
    if dropout:  # the dropped features change the step (same start, same batch)
        plain = Eagle3Trainer(small_config(max_steps=6, draft_vocab=20), target, train_seqs, held, LAYERS)
        assert Eagle3Trainer(cfg, target, train_seqs, held, LAYERS).step()["loss"] != plain.step()["loss"]
    with pytest.raises(GraftError, match="other settings: ttt_steps"):
        Eagle3Trainer(small_config(max_steps=6, draft_vocab=20, ttt_steps=2, feature_dropout=dropout), target,
                      train_seqs, held, LAYERS).load_checkpoint(tmp_path / "ckpt")


def test_saved_drafter_loads_strictly_with_the_release_vocab_convention(tmp_path, target, tiny_data):
    train_seqs, held = tiny_data
    trainer = Eagle3Trainer(small_config(max_steps=2, draft_vocab=12), target, train_seqs, held, LAYERS)
    trainer.step()
    trainer.drafter.eval()
    path = save_eagle3(trainer.drafter, tmp_path / "e3")
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["draft_vocab_size"] == 12
    from safetensors.torch import load_file

    assert "embed_tokens.weight" not in load_file(path / "model.safetensors")
    with pytest.raises(GraftError, match="pass the target's"):
        load_eagle3(path)
    embed = target.get_input_embeddings().weight
    loaded = load_eagle3(path, target_embed=embed)
    # d2t holds offsets to sorted target ids, t2d marks exactly them (the release's buffers)
    ids = loaded.target_ids(torch.arange(12))
    assert torch.equal(ids, trainer.draft_ids) and (ids.diff() > 0).all()
    assert loaded.t2d.sum() == 12 and loaded.t2d[ids].all()
    seq = train_seqs[0]
    a = seq.prompt_len + 2
    with torch.no_grad():
        want = trainer.drafter.logits(trainer.drafter(seq.tokens[None, 1:a + 1], seq.features[None, :a].float(),
                                                      torch.arange(a), Eagle3Cache()))
        got = loaded.logits(loaded(seq.tokens[None, 1:a + 1], seq.features[None, :a].float(), torch.arange(a),
                                   Eagle3Cache()))
    assert torch.allclose(got, want, atol=1e-5)
    small = load_eagle3(save_eagle3(trainer.drafter, tmp_path / "bf16", torch.bfloat16), target_embed=embed)
    assert (path / "model.safetensors").stat().st_size > 1.8 * (tmp_path / "bf16" / "model.safetensors").stat().st_size
    assert torch.equal(small.d2t, loaded.d2t)


def write_data(tmp_path, target) -> None:
    """tmp_path/data: a `graft drafter-data` directory of six tiny alpaca-pool responses."""
    from graftlib.data.prompts import Item

    tdir = write_target_dir(tmp_path / "target", seed=0, initializer_range=0.1)
    items = [Item("alpaca", f"alpaca/{i}", f"say {i} things", f"say {i} things") for i in range(6)]
    cfg = DataConfig(target=str(tdir), n_prompts=6, shard_size=6, batch_size=6, max_prompt_tokens=40,
                     max_response_tokens=16, top_k=4)
    build_dataset(tmp_path / "data", cfg, target, tiny_tokenizer(), items, LAYERS, log=lambda _: None)


def test_train_writes_the_public_layout_and_its_record(tmp_path, target):
    write_data(tmp_path, target)
    final = train(tmp_path / "data", tmp_path / "run", small_config(max_steps=4, eval_every=2, draft_vocab=16),
                  log=lambda _: None, command="graft train-eagle3 ...")
    assert sorted(p.name for p in final.iterdir()) == ["config.json", "lineage.jsonl", "metrics.jsonl",
                                                       "model.safetensors", "training.json"]
    drafter = load_eagle3(final, target_embed=target.get_input_embeddings().weight)
    assert drafter.config.draft_vocab_size == 16 and drafter.config.target_hidden_size == target.config.hidden_size
    assert drafter.config.target_layer_ids == LAYERS
    record = json.loads((final / "training.json").read_text())
    assert record["steps"] == 4 and record["labels_seen"] > 0 and record["config"]["ttt_steps"] == 3
    assert record["command"] == "graft train-eagle3 ..." and record["threads"] >= 1
    evals = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals if e["kind"] == "eval"] == [2, 4]
    with pytest.raises(GraftError, match="pass --resume"):
        train(tmp_path / "data", tmp_path / "run", small_config(max_steps=4), log=lambda _: None)
    # evaluate-only on other data: the checkpoint's settings win over the command line's (lr here)
    path = train(tmp_path / "data", tmp_path / "run", small_config(lr=1.0, eval_blocks=8), log=lambda _: None,
                 eval_data=[tmp_path / "data"])
    ev = json.loads(path.read_text())
    assert path.name == "eval-data.json" and ev["step"] == 4 and ev["heldout_sequences"] == 6
    assert ev["eval_data"] and len(ev["acc_by_depth"]) == 5


def test_warm_start_continues_the_weights_and_the_lineage(tmp_path, target, tiny_data):
    """--init-drafter: the run starts from the parent's weights and draft vocabulary (its step-0 evaluation
    is the parent's drafter scored on this run's split), its lineage extends the parent's, and a parent that
    does not fit the run (draft vocabulary, head_init) is refused with a message naming the mismatch."""
    from graftlib.training.drafter import lineage
    from graftlib.training.drafter.eagle3_train import warm_drafter

    write_data(tmp_path, target)
    parent = train(tmp_path / "data", tmp_path / "stage1", small_config(max_steps=4, eval_every=2, draft_vocab=16),
                   log=lambda _: None)
    embed = target.get_input_embeddings().weight
    want = load_eagle3(parent, target_embed=embed).state_dict()
    warm = warm_drafter(small_config(draft_vocab=16, init_drafter=str(parent)), target, LAYERS)
    got = warm.state_dict()
    assert warm.embed_tokens is target.get_input_embeddings() and not warm.embed_tokens.weight.requires_grad
    assert all(torch.equal(got[k].to(want[k].dtype), want[k]) for k in want if k != "embed_tokens.weight")
    assert all(p.requires_grad for n, p in warm.named_parameters() if not n.startswith("embed_tokens"))
    child = train(tmp_path / "data", tmp_path / "stage2",
                  small_config(max_steps=2, eval_every=2, draft_vocab=16, init_drafter=str(parent)), log=lambda _: None)
    assert torch.equal(load_eagle3(child, target_embed=embed).d2t, want["d2t"])
    curve = lineage.read_lineage(child)
    assert [(r["stage"], r["stage_step"]) for r in curve] == [("stage1", 2), ("stage1", 4), ("stage2", 0),
                                                              ("stage2", 2)]
    assert [r["step"] for r in curve] == [2, 4, 4, 6]
    first = json.loads((tmp_path / "stage2" / "metrics.jsonl").read_text().splitlines()[0])
    last = json.loads((tmp_path / "stage1" / "metrics.jsonl").read_text().splitlines()[-1])
    assert first["step"] == 0 and first["kind"] == "eval" and last["kind"] == "eval"
    assert first["heldout_loss"] == pytest.approx(last["heldout_loss"], rel=1e-2)  # same weights (bf16), same split
    # max_steps 0: the parent scored on this run's split, nothing trained, the weights as they were
    scored = train(tmp_path / "data", tmp_path / "score", small_config(max_steps=0, draft_vocab=16,
                                                                         init_drafter=str(parent)), log=lambda _: None)
    assert (scored / "model.safetensors").read_bytes() == (parent / "model.safetensors").read_bytes()
    record = json.loads((scored / "training.json").read_text())
    evals = [json.loads(x) for x in (tmp_path / "score" / "metrics.jsonl").read_text().splitlines()]
    assert record["steps"] == 0 and [e["step"] for e in evals] == [0] and record["final_eval"] == evals[0]
    with pytest.raises(GraftError, match="max_steps 0 trains nothing"):
        train(tmp_path / "data", tmp_path / "nothing", small_config(max_steps=0, draft_vocab=16), log=lambda _: None)
    with pytest.raises(GraftError, match="draft vocabulary 16 \\(asked 8\\)"):
        warm_drafter(small_config(draft_vocab=8, init_drafter=str(parent)), target, LAYERS)
    with pytest.raises(GraftError, match="target layers \\[0, 1, 2\\] \\(asked \\[0, 1, 3\\]\\)"):
        warm_drafter(small_config(draft_vocab=16, init_drafter=str(parent)), target, [0, 1, 3])
    with pytest.raises(GraftError, match="head_init"):
        small_config(init_drafter=str(parent), head_init="random").check()
    with pytest.raises(GraftError, match="not a directory"):
        warm_drafter(small_config(init_drafter=str(tmp_path / "nowhere")), target, LAYERS)


def test_eval_grouping_fixes_the_heldout_anchors_whatever_the_training_grouping(target, tiny_data):
    """eval_blocks_per_seq: a run that trains with 4 anchors per row but evaluates grouped by 8 scores
    exactly the held-out anchors (and labels) of a run that trains with 8; without it they differ."""
    train_seqs, held = tiny_data

    def eval_labels(**kw):
        trainer = Eagle3Trainer(small_config(**kw), target, train_seqs, held, LAYERS)
        return [b.labels for b, _ in trainer.eval_set]

    base = eval_labels(blocks_per_seq=8)
    same = eval_labels(blocks_per_seq=4, eval_blocks_per_seq=8)
    apart = eval_labels(blocks_per_seq=4)
    assert len(base) == len(same) and all(torch.equal(a, b) for a, b in zip(base, same))
    assert not (len(base) == len(apart) and all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(base, apart)))
    with pytest.raises(GraftError, match="eval_blocks_per_seq"):
        small_config(eval_blocks_per_seq=0).check()


def test_cli_registers_train_eagle3():
    from graftlib.cli import build_parser

    a = build_parser().parse_args(["train-eagle3", "--data", "d", "--out", "o", "--minutes", "25", "--ttt-steps", "5",
                                   "--draft-vocab", "4096", "--distill", "0.5", "--clock", "cpu", "--resume",
                                   "--init-drafter", "embedded", "--eval-blocks-per-seq", "16"])
    assert a.minutes == 25 and a.ttt_steps == 5 and a.draft_vocab == 4096 and a.distill == 0.5 and a.resume
    assert a.eval_depth == 15 and a.step_weight == 0.8 and a.head_init == "target" and a.clock == "cpu"
    assert a.init_drafter == "embedded" and a.eval_blocks_per_seq == 16
    with pytest.raises(GraftError, match="clock"):
        small_config(clock="gpu").check()
    with pytest.raises(GraftError, match="three target layers"):
        from graftlib.training.drafter.eagle3_train import make_drafter

        make_drafter(small_config(), tiny_target(), [0, 2], torch.arange(VOCAB))


def test_evaluation_uses_greedy_heldout_responses_only(target, tiny_data):
    train_seqs, held = tiny_data
    assert all(s.greedy() for s in held)
    off = Sequence(held[0].tokens.clone(), held[0].prompt_len, held[0].features, "off/0", held[0].topk_ids,
                   held[0].topk_logp)
    off.tokens[off.prompt_len + 1] = int(off.topk_ids[1, 1])  # a sampled token: not the target's first choice
    assert not off.greedy()
    trainer = Eagle3Trainer(small_config(), target, train_seqs, [off, *held], LAYERS,
                            sampled_uids=frozenset({held[1].uid}))
    assert [s.uid for s in trainer.greedy_heldout] == [held[0].uid]


def test_shipped_drafter_loads_strictly_and_is_small():
    from graftlib.core.paths import ASSETS_DIR

    path = ASSETS_DIR / "drafters" / "smollm2-135m-eagle3"
    assert (path / "model.safetensors").stat().st_size < 21e6  # bf16, no embedding, 8k draft vocabulary
    drafter = load_eagle3(path, target_embed=torch.zeros(49152, 576))
    cfg = drafter.config
    assert (cfg.draft_vocab_size, cfg.hidden_size, cfg.target_layer_ids) == (8192, 576, [2, 15, 28])
    ids = drafter.target_ids(torch.arange(cfg.draft_vocab_size))
    assert (ids.diff() > 0).all() and drafter.t2d.sum() == cfg.draft_vocab_size and drafter.t2d[ids].all()
    record = json.loads((path / "training.json").read_text())
    assert record["config"]["ttt_steps"] == 7 and record["steps"] > 0 and record["final_eval"]["offline_tau"] > 1
    # the DFlash partner is scored on the same held-out sequences, and EAGLE-3 leads it at depth 1 (equal compute)
    reference = json.loads((path / "dflash-reference.json").read_text())
    assert reference["split"] == record["split"] and reference["steps"] == 0
    assert record["final_eval"]["chain_by_depth"][0] > reference["final_eval"]["chain_by_depth"][0]
