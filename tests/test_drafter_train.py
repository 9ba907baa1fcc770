"""Drafter training on tiny models: data generation (features, tokens, resumable shards), the packed
block forward against single-block forwards, the optimizer loop, exact checkpoint resume, and the
saved reduced-vocabulary drafter decoding exactly through `Decoder`."""

import json
import os
import signal
from dataclasses import replace

import pytest
import torch
from resume import assert_resume_identical
from tiny import MASK_ID, prompts_of, tiny_drafter, tiny_target, tiny_tokenizer, write_target_dir

from graftlib.core.errors import GraftError
from graftlib.data.prompts import Item
from graftlib.lab.workbook.plots.training import plot_learning_curve
from graftlib.methods.decoder import Decoder
from graftlib.models.drafter import init_weights, load_drafter
from graftlib.training.drafter.blocks import pack_blocks
from graftlib.training.drafter.data import batched
from graftlib.training.drafter.data import target_data as drafter_data
from graftlib.training.drafter.data.batched import Capture
from graftlib.training.drafter.data.store import Sequence, load_dataset
from graftlib.training.drafter.data.target_data import DataConfig, build_dataset, generate_sequences
from graftlib.training.drafter.dflash_init import TrainConfig
from graftlib.training.drafter.dflash_train import (
    Trainer,
    ablation_summary,
    config_from_args,
    train,
    write_ablation,
)
from graftlib.training.drafter.lineage import read_lineage, stages
from graftlib.training.drafter.samples import IGNORE
from graftlib.training.drafter.training_run import eval_line, run_loop

LAYERS = [0, 2]
EOS = 5


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", seed=0, initializer_range=0.1)


def items(n):
    texts = ["what is two plus two?", "write a short poem.", "hello there, how are you?", "name three colors.",
             "why is the sky blue?", "count to five.", "say something nice!", "tell me a joke."]
    return [Item("alpaca", f"alpaca/{i}", texts[i % len(texts)] + " " * (i // len(texts)),
                 texts[i % len(texts)]) for i in range(n)]


def small_train_config(**kw) -> TrainConfig:
    base = dict(block_size=8, mask_token_id=MASK_ID, draft_vocab=0, blocks_per_step=32, blocks_per_seq=8,
                lr=3e-3, warmup=0.1, minutes=None, max_steps=30, eval_blocks=16, tau_prompts=0, heldout=0.3,
                eval_every=1000, log_every=1000)
    base.update(kw)
    return TrainConfig(**base)


# ------------------------------------------------------------------ data generation


def test_generation_matches_full_forward_and_ar(target):
    prompts = prompts_of([3, 17, 9, 30, 1, 12, 25])
    seqs = generate_sequences(target, prompts, Capture(LAYERS, dtype=torch.float32), 40, [EOS], batch_size=4)
    stops = 0
    ar = Decoder.for_method(target, None, "ar", eos_ids=[EOS])
    for p, s in zip(prompts, seqs):
        assert s.tokens[:len(p)].tolist() == p and s.prompt_len == len(p)
        assert s.features.shape == (len(s.tokens) - 1, 2 * target.config.hidden_size)
        with torch.inference_mode():
            out = target(s.tokens[None], output_hidden_states=True)
        full = torch.cat([out.hidden_states[i + 1] for i in LAYERS], -1)[0, :-1]
        assert torch.allclose(s.features, full, atol=1e-4), (s.features - full).abs().max()
        assert s.tokens[len(p):].tolist() == ar.decode(p, 40).tokens
        stops += int(s.tokens[-1]) == EOS
    assert 0 < stops < len(prompts)  # both stop rules, and finished rows pruned mid-batch


def test_continuous_batching_refills_rows_and_resizes_the_cache(target, monkeypatch):
    """Fourteen prompts through two rows, long and short mixed: finished rows are refilled, the cache
    grows at the front for a wider prompt and drops dead leading columns (both seen), and every
    sequence still equals its AR decode, its features a full forward's, its top-k the target's."""
    from graftlib.core.kvcache import BufferedLayer

    shifts = []
    real = BufferedLayer.shift_front
    monkeypatch.setattr(BufferedLayer, "shift_front", lambda self, d: (shifts.append(d), real(self, d))[1])
    monkeypatch.setattr(batched, "COMPACT_MIN", 8)
    prompts = prompts_of([2, 3, 2, 3, 2, 3, 2, 3, 40, 2, 3, 2, 45, 50], seed=81)
    seqs = generate_sequences(target, prompts, Capture(LAYERS, 4, torch.float32), 24, [EOS], batch_size=2)
    assert any(d > 0 for d in shifts) and any(d < 0 for d in shifts), shifts
    ar = Decoder.for_method(target, None, "ar", eos_ids=[EOS])
    for p, s in zip(prompts, seqs):
        assert s.tokens[:len(p)].tolist() == p and s.tokens[len(p):].tolist() == ar.decode(p, 24).tokens
        with torch.inference_mode():
            out = target(s.tokens[None], output_hidden_states=True)
        full = torch.cat([out.hidden_states[i + 1] for i in LAYERS], -1)[0, :-1]
        assert torch.allclose(s.features, full, atol=1e-4), (s.features - full).abs().max()
        want = torch.log_softmax(out.logits[0, len(p) - 1:-1].float(), -1).topk(4, dim=-1)
        assert torch.equal(s.topk_ids.long(), want.indices)


def test_shards_are_resumable(tmp_path, target, monkeypatch):
    tok = tiny_tokenizer()
    calls = []
    real = drafter_data.generate_sequences

    def counting(*a, **k):
        calls.append(len(a[1]))
        return real(*a, **k)

    monkeypatch.setattr(drafter_data, "generate_sequences", counting)
    cfg = DataConfig(target="tiny", n_prompts=5, shard_size=2, batch_size=2, max_prompt_tokens=40,
                     max_response_tokens=12)
    out = tmp_path / "data"
    build_dataset(out, cfg, target, tok, items(8), LAYERS, log=lambda _: None)
    assert calls == [2, 2, 1]
    index, seqs = load_dataset(out)
    assert [s.uid for s in seqs] == [f"alpaca/{i}" for i in range(5)] and index.target_layer_ids == LAYERS
    build_dataset(out, cfg, target, tok, items(8), LAYERS, log=lambda _: None)
    assert calls == [2, 2, 1]  # nothing left to do
    (out / "shard-00001.safetensors").unlink()  # a shard lost (interrupted before its index entry)
    build_dataset(out, cfg, target, tok, items(8), LAYERS, log=lambda _: None)
    assert calls == [2, 2, 1, 2]
    _, again = load_dataset(out)
    assert all(torch.equal(a.tokens, b.tokens) and torch.equal(a.features, b.features) for a, b in zip(seqs, again))
    cfg.n_prompts = 7  # grows the set: the partial last shard is redone, one more is added
    build_dataset(out, cfg, target, tok, items(8), LAYERS, log=lambda _: None)
    assert calls == [2, 2, 1, 2, 2, 1]
    index, seqs = load_dataset(out)
    assert len(seqs) == 7 and index.totals()["n_seqs"] == 7
    with pytest.raises(GraftError, match="other settings: target_layer_ids"):
        build_dataset(out, cfg, target, tok, items(8), [1, 2], log=lambda _: None)
    _, sub = load_dataset(out, layer_ids=[2])
    h = target.config.hidden_size
    assert all(torch.equal(a.features, b.features[:, h:]) for a, b in zip(sub, seqs))
    with pytest.raises(GraftError, match=r"target layers \[3\] are not in the data"):
        load_dataset(out, layer_ids=[3])


# ------------------------------------------------------------------ packing


def synthetic(n, seed=0, feat=128, lo=12, hi=40):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = int(torch.randint(lo, hi, (1,), generator=g))
        p = int(torch.randint(2, length - 3, (1,), generator=g))
        out.append(Sequence(torch.randint(0, 31, (length,), generator=g), p,
                            torch.randn(length - 1, feat, generator=g), f"syn/{i}"))
    return out


def packed_example(bs: int):
    """Three synthetic sequences, six blocks at their edges and inside, packed: (seqs, anchors, batch)."""
    seqs = synthetic(3, seed=1)
    anchors = [[seqs[0].prompt_len, seqs[0].prompt_len + 2, len(seqs[0].tokens) - 2],
               [len(seqs[1].tokens) - 3], [seqs[2].prompt_len + 1, seqs[2].prompt_len + 3]]
    return seqs, anchors, pack_blocks(seqs, anchors, bs, MASK_ID)


def test_packed_blocks_equal_single_block_forwards():
    bs = 6
    drafter = tiny_drafter(seed=3, block_size=bs)
    init_weights(drafter, std=0.2)
    embed = torch.nn.Embedding(32, 64)
    seqs, anchors, batch = packed_example(bs)
    assert batch.n_blocks == 6 and batch.ids.shape == (3, 3 * bs)
    with torch.no_grad():
        packed = drafter(embed(batch.ids), batch.ctx, 0, block_mask=batch.mask,
                         ctx_positions=batch.ctx_pos, q_positions=batch.q_pos)
        worst = 0.0
        for r, (s, row) in enumerate(zip(seqs, anchors)):
            for b, a in enumerate(row):
                block = torch.tensor([[int(s.tokens[a])] + [MASK_ID] * (bs - 1)])
                single = drafter(embed(block), s.features[None, :a], start=a)[0]
                got = packed[r, b * bs:(b + 1) * bs]
                worst = max(worst, (got - single).abs().max().item())
                want = [IGNORE] + [int(s.tokens[a + k]) if a + k < len(s.tokens) else IGNORE for k in range(1, bs)]
                assert batch.labels[r, b * bs:(b + 1) * bs].tolist() == want
            assert (batch.labels[r, len(row) * bs:] == IGNORE).all()  # padded blocks
        assert worst < 1e-5, worst
        # not vacuous: positions matter
        shifted = drafter(embed(batch.ids), batch.ctx, 0, block_mask=batch.mask,
                          ctx_positions=batch.ctx_pos, q_positions=batch.q_pos + 1)
        assert (shifted - packed).abs().max() > 1e-3


# ------------------------------------------------------------------ training loop


@pytest.fixture(scope="module")
def tiny_data(target):
    prompts = prompts_of([4, 9, 6, 12, 5, 8, 7, 10, 3, 11], seed=50)
    seqs = generate_sequences(target, prompts, Capture(LAYERS), 30, [], batch_size=10)
    for i, s in enumerate(seqs):
        s.uid = f"tiny/{i}"
    return seqs[:8], seqs[8:]


def test_loss_decreases(target, tiny_data):
    train_seqs, held = tiny_data
    trainer = Trainer(small_train_config(), target, train_seqs, held, LAYERS, [])
    losses = [trainer.step()["loss"] for _ in range(30)]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.8 * first, (first, last)
    ev = trainer.evaluate()
    assert len(ev["acc_by_depth"]) == 7 and 1 <= ev["offline_tau"] <= 8


def test_each_evaluation_also_scores_seen_text(target, tiny_data, monkeypatch):
    """The seen-text anchors come from the training sequences but the sampled ones, and every eval record
    carries their scores beside the held-out ones (the memorization gap); a sequence the drafter trained on
    for 60 steps scores better than held-out text."""
    train_seqs, held = tiny_data
    asked = []
    real = Trainer.eval_batches
    monkeypatch.setattr(Trainer, "eval_batches", lambda self, seqs=None, seed_offset=1: (
        asked.append(([s.uid for s in seqs] if seqs is not None else None, seed_offset)),
        real(self, seqs, seed_offset))[1])
    sampled = frozenset({train_seqs[0].uid})
    trainer = Trainer(small_train_config(max_steps=60), target, train_seqs, held, LAYERS, [], sampled_uids=sampled)
    assert asked == [(None, 1), ([s.uid for s in train_seqs[1:]], 2)]
    for _ in range(60):
        trainer.step()
    ev = trainer.evaluate()
    assert len(ev["seen_acc_by_depth"]) == len(ev["acc_by_depth"]) == 7 and ev["seen_offline_tau"] >= 1
    assert ev["seen_ce"] < ev["heldout_ce"]
    assert "seen text: hard CE" in eval_line(ev)
    pools = {s.uid.split("/")[0] for s in held}
    assert set(ev["by_pool"]) <= pools and set(ev["seen_by_pool"]) and "by pool" in eval_line(ev)
    assert sum(p["chains"] for p in ev["by_pool"].values()) > 0


def test_checkpoint_resume_is_identical(tmp_path, target, tiny_data):
    train_seqs, held = tiny_data
    cfg = small_train_config(max_steps=6, draft_vocab=20)
    assert_resume_identical(lambda: Trainer(cfg, target, train_seqs, held, LAYERS, []), tmp_path / "ckpt")
    with pytest.raises(GraftError, match="other settings: lr"):
        Trainer(small_train_config(max_steps=6, draft_vocab=20, lr=1e-3), target, train_seqs, held, LAYERS,
                []).load_checkpoint(tmp_path / "ckpt")


def test_feature_dropout_acts_on_training_steps_only_and_resumes_exactly(tmp_path, target, tiny_data):
    """Dropped context features change a step (same start, same batch) but never an evaluation; the dropout
    draws from torch's global generator, which the checkpoint carries, so a resumed run is the straight one."""
    train_seqs, held = tiny_data
    cfg = small_train_config(max_steps=6, draft_vocab=20, feature_dropout=0.3)
    assert_resume_identical(lambda: Trainer(cfg, target, train_seqs, held, LAYERS, []), tmp_path / "ckpt")
    plain = Trainer(replace(cfg, feature_dropout=0.0), target, train_seqs, held, LAYERS, [])
    dropped = Trainer(cfg, target, train_seqs, held, LAYERS, [])
    assert dropped.evaluate()["heldout_loss"] == plain.evaluate()["heldout_loss"]
    assert dropped.step()["loss"] != plain.step()["loss"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_the_loop_after_its_step_with_a_checkpoint(tmp_path, target, tiny_data, signum):
    """What `kill` (or Ctrl-C, also where a background shell ignores SIGINT) does to a training: the step
    running finishes, the checkpoint holds it, KeyboardInterrupt follows, the handlers are restored; and
    a gamma of its own weights the depths by exp(-(k - 1) / gamma)."""
    train_seqs, held = tiny_data
    cfg = small_train_config(max_steps=6, draft_vocab=20, gamma=2.0)
    trainer = Trainer(cfg, target, train_seqs, held, LAYERS, [])
    k = torch.arange(cfg.block_size, dtype=torch.float32)
    assert torch.allclose(trainer.depth_weight[1:], torch.exp(-(k[1:] - 1) / 2.0))
    step = trainer.step

    def step_then_signal():
        rec = step()
        if trainer.step_no == 3:
            os.kill(os.getpid(), signum)
        return rec

    trainer.step = step_then_signal
    before = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt):
        run_loop(trainer, tmp_path / "ckpt", tmp_path / "metrics.jsonl", {}, log=lambda _: None)
    assert signal.getsignal(signum) is before
    assert json.loads((tmp_path / "ckpt" / "state.json").read_text())["step"] == 3
    resumed = Trainer(cfg, target, train_seqs, held, LAYERS, [])
    resumed.load_checkpoint(tmp_path / "ckpt")
    for (name, a), b in zip(trainer.drafter.state_dict().items(), resumed.drafter.state_dict().values()):
        assert torch.equal(a, b), name
    with pytest.raises(GraftError, match="gamma must be > 0"):
        small_train_config(gamma=0.0).check()


def test_a_resumed_run_forgets_the_records_of_the_steps_after_its_checkpoint(tmp_path):
    """A run killed between checkpoints (kill -9, a session's end) leaves records of steps that the
    resumed run repeats: they are dropped at the resume, so its metrics.jsonl (and the learning curve
    and lineage read from it) holds each logged step and evaluation once, as an uninterrupted run's."""
    tdir = write_target_dir(tmp_path / "target", seed=0, initializer_range=0.1)
    target = tiny_target("llama", seed=0, initializer_range=0.1)
    cfg = DataConfig(target=str(tdir), n_prompts=8, shard_size=4, batch_size=4, max_prompt_tokens=40,
                     max_response_tokens=24)
    build_dataset(tmp_path / "data", cfg, target, tiny_tokenizer(), items(8), LAYERS, log=lambda _: None)
    tcfg = small_train_config(draft_vocab=12, max_steps=4, eval_every=4, log_every=1)
    train(tmp_path / "data", tmp_path / "run", tcfg, log=lambda _: None)
    metrics = tmp_path / "run" / "metrics.jsonl"
    with metrics.open("a") as f:  # what the killed run wrote after its step-4 checkpoint
        f.write(json.dumps({"kind": "train", "step": 5, "loss": 9.0}) + "\n")
        f.write(json.dumps({"kind": "eval", "step": 6, "heldout_loss": 9.0}) + "\n")
    logs = []
    train(tmp_path / "data", tmp_path / "run", replace(tcfg, max_steps=8), resume=True, log=logs.append)
    assert any("2 records of the steps after it dropped" in line for line in logs), logs
    recs = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in recs if r["kind"] == "train"] == list(range(1, 9))
    assert [r["step"] for r in recs if r["kind"] == "eval"] == [4, 8]
    assert all(r.get("loss") != 9.0 and r.get("heldout_loss") != 9.0 for r in recs)


def test_trained_reduced_vocab_drafter_saves_loads_and_decodes_exactly(tmp_path):
    tdir = write_target_dir(tmp_path / "target", seed=0, initializer_range=0.1)
    target = tiny_target("llama", seed=0, initializer_range=0.1)
    cfg = DataConfig(target=str(tdir), n_prompts=8, shard_size=4, batch_size=4, max_prompt_tokens=40,
                     max_response_tokens=24)
    build_dataset(tmp_path / "data", cfg, target, tiny_tokenizer(), items(8), LAYERS, log=lambda _: None)
    tcfg = small_train_config(draft_vocab=12, max_steps=8, eval_every=4, tau_prompts=2, tau_tokens=12)
    final = train(tmp_path / "data", tmp_path / "run", tcfg, log=lambda _: None)
    drafter, trained = load_drafter(str(final), target.config)
    assert trained and drafter.config.draft_vocab_size == 12 and drafter.d2t.shape == (12,)
    record = json.loads((final / "training.json").read_text())
    assert record["steps"] == 8 and record["draft_vocab_size"] == 12 and record["data"]["sequences"] == 8
    evals = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [e for e in evals if e["kind"] == "eval"]
    assert [e["step"] for e in evals] == [4, 8] and all(e["tau"] >= 1 for e in evals)
    logits = drafter.logits(torch.randn(3, 64), target.lm_head.weight)
    assert torch.isinf(logits).sum(-1).tolist() == [32 - 12] * 3
    ar = Decoder.for_method(target, drafter, "ar")
    for method, budget in (("dflash", 7), ("ddtree", 8)):
        dec = Decoder.for_method(target, drafter, method, budget)
        for p in prompts_of([5, 13], seed=7):
            assert dec.decode(p, 30).tokens == ar.decode(p, 30).tokens, (method, p)
    with pytest.raises(GraftError, match="pass --resume"):
        train(tmp_path / "data", tmp_path / "run", tcfg, log=lambda _: None)


def test_a_warm_started_run_carries_its_lineage(tmp_path):
    """drafter/ holds the run's metrics.jsonl and lineage.jsonl: the parent's stages, then this run's
    evaluations with step, labels and time cumulative (`graftlib.training.drafter.lineage`)."""
    tdir = write_target_dir(tmp_path / "target", seed=0, initializer_range=0.1)
    target = tiny_target("llama", seed=0, initializer_range=0.1)
    cfg = DataConfig(target=str(tdir), n_prompts=8, shard_size=4, batch_size=4, max_prompt_tokens=40,
                     max_response_tokens=24)
    build_dataset(tmp_path / "data", cfg, target, tiny_tokenizer(), items(8), LAYERS, log=lambda _: None)
    first = train(tmp_path / "data", tmp_path / "run-a", small_train_config(draft_vocab=12, max_steps=4, eval_every=2),
                  log=lambda _: None)
    assert (first / "metrics.jsonl").read_text() == (tmp_path / "run-a" / "metrics.jsonl").read_text()
    a = read_lineage(first)
    assert [(r["stage"], r["step"]) for r in a] == [("run-a", 2), ("run-a", 4)]
    second = train(tmp_path / "data", tmp_path / "run-b",
                   small_train_config(draft_vocab=12, max_steps=4, eval_every=2, init_drafter=str(first)),
                   log=lambda _: None)
    b = read_lineage(second)
    assert [(r["stage"], r["stage_step"], r["step"]) for r in b] == [
        ("run-a", 2, 2), ("run-a", 4, 4), ("run-b", 0, 4), ("run-b", 2, 6), ("run-b", 4, 8)]
    assert b[:2] == a  # the parent's records as they were
    for key in ("labels_seen", "elapsed_s"):  # (elapsed_s is rounded to 0.1 s: tiny runs may add nothing)
        values = [r[key] for r in b]
        assert values == sorted(values) and b[2][key] == a[-1][key] and b[-1][key] >= a[-1][key], key
    assert b[-1]["labels_seen"] > a[-1]["labels_seen"]
    assert stages(b) == [("run-a", 0), ("run-b", 2)]
    # max_steps 0: the parent scored on this run's split, its weights saved as they were
    scored = train(tmp_path / "data", tmp_path / "score",
                   small_train_config(draft_vocab=12, max_steps=0, init_drafter=str(first)), log=lambda _: None)
    assert (scored / "model.safetensors").read_bytes() == (first / "model.safetensors").read_bytes()
    record = json.loads((scored / "training.json").read_text())
    assert record["steps"] == 0 and record["final_eval"]["step"] == 0
    assert [r["stage_step"] for r in read_lineage(scored)][-1:] == [0] and len(read_lineage(scored)) == len(a) + 1
    # the learning curve marks where run-b begins, in every panel
    fig = plot_learning_curve({"shipped": second / "lineage.jsonl"}, "lineage")
    assert any("seen (training) text" in line.get_label() for line in fig.axes[0].lines)
    x = max(b[2]["labels_seen"], 1) / 1e6
    for ax in fig.axes[:3]:
        assert [t.get_text() for t in ax.texts] == ["run-b"]
        assert any(list(line.get_xdata()) == [x, x] and line.get_linestyle() == ":" for line in ax.lines)
        assert ax.get_xscale() == "log"
    # no line joins the two stages' points (each scores its own held-out split): run-a's loss line ends at its own
    loss = [line for line in fig.axes[0].lines if line.get_marker() == "o"]
    assert [len(line.get_xdata()) for line in loss] == [2, 3]
    # the parent is the warm start as it was when the run began: a drafter written over it meanwhile
    # (e.g. another one shipped as `embedded`) does not enter this run's lineage, also after a resume
    cfg_c = small_train_config(draft_vocab=12, max_steps=2, eval_every=2, init_drafter=str(first))
    train(tmp_path / "data", tmp_path / "run-c", cfg_c, log=lambda _: None)
    (first / "lineage.jsonl").write_text(json.dumps({**a[0], "stage": "shipped-meanwhile"}) + "\n")
    third = train(tmp_path / "data", tmp_path / "run-c", replace(cfg_c, max_steps=4), resume=True,
                  log=lambda _: None)
    assert [(r["stage"], r["stage_step"]) for r in read_lineage(third)] == [
        ("run-a", 2), ("run-a", 4), ("run-c", 0), ("run-c", 2), ("run-c", 4)]
    # a drafter directory without a lineage file is one stage of its metrics.jsonl
    (first / "lineage.jsonl").unlink()
    assert [r["stage"] for r in read_lineage(first)] == ["run-a", "run-a"]
    # nor a metrics.jsonl: its training.json's final evaluation, so that a warm start from it counts its training
    (first / "metrics.jsonl").unlink()
    record = json.loads((first / "training.json").read_text())
    assert [(r["stage"], r["step"], r["labels_seen"], r["elapsed_s"]) for r in read_lineage(first)] == [
        ("run-a", record["steps"], record["labels_seen"], record["train_s"])]


def test_cli_registers_both_commands():
    from graftlib.cli import build_parser

    a = build_parser().parse_args(["drafter-data", "--out", "d", "--n-prompts", "10", "--batch-size", "8"])
    assert a.n_prompts == 10 and a.batch_size == 8 and a.max_response_tokens == 384
    b = build_parser().parse_args(["train-drafter", "--data", "d", "--out", "o", "--minutes", "5", "--layers", "2",
                                   "--target-layer-ids", "2", "15", "--draft-vocab", "4096", "--resume",
                                   "--gamma", "3"])
    assert b.minutes == 5 and b.layers == 2 and b.target_layer_ids == [2, 15] and b.draft_vocab == 4096 and b.resume
    assert config_from_args(b).gamma == 3.0
    c = config_from_args(build_parser().parse_args(["train-drafter", "--data", "d", "--out", "o", "--weight-decay",
                                                    "0.1",
                                                    "--feature-dropout", "0.2"]))
    assert (c.weight_decay, c.feature_dropout) == (0.1, 0.2)
    assert (config_from_args(b).weight_decay, config_from_args(b).feature_dropout) == (0.01, 0.0)  # the defaults
    with pytest.raises(GraftError, match="feature_dropout must be in"):
        small_train_config(feature_dropout=1.0).check()


def test_training_reads_several_data_dirs_and_refuses_mixed_layers(tmp_path, target):
    tdir = write_target_dir(tmp_path / "target", seed=0, initializer_range=0.1)
    cfg = DataConfig(target=str(tdir), n_prompts=4, shard_size=4, batch_size=4, max_prompt_tokens=40,
                     max_response_tokens=12)
    build_dataset(tmp_path / "a", cfg, target, tiny_tokenizer(), items(4), LAYERS, log=lambda _: None)
    build_dataset(tmp_path / "b", cfg, target, tiny_tokenizer(), items(8)[4:], LAYERS, log=lambda _: None)
    final = train([tmp_path / "a", tmp_path / "b"], tmp_path / "run", small_train_config(max_steps=2),
                  log=lambda _: None)
    record = json.loads((final / "training.json").read_text())
    assert record["data"]["sequences"] == 8 and len(record["data"]["dirs"]) == 2
    build_dataset(tmp_path / "c", cfg, target, tiny_tokenizer(), items(4), [0, 1], log=lambda _: None)
    with pytest.raises(GraftError, match="does not match"):
        train([tmp_path / "a", tmp_path / "c"], tmp_path / "run2", small_train_config(max_steps=2),
              log=lambda _: None)


def test_ablation_summary_names_changes_and_skips_unfinished(tmp_path, target):
    tdir = write_target_dir(tmp_path / "target", seed=0, initializer_range=0.1)
    cfg = DataConfig(target=str(tdir), n_prompts=6, shard_size=6, batch_size=6, max_prompt_tokens=40,
                     max_response_tokens=12)
    build_dataset(tmp_path / "data", cfg, target, tiny_tokenizer(), items(6), LAYERS, log=lambda _: None)
    root = tmp_path / "ablation"
    train(tmp_path / "data", root / "base", small_train_config(max_steps=2), log=lambda _: None)
    train(tmp_path / "data", root / "layers2", small_train_config(max_steps=2, layers=2), log=lambda _: None)
    (root / "unfinished").mkdir()
    rows = write_ablation(root, tmp_path / "ablation.json")
    assert [r["run"] for r in rows] == ["base", "layers2"]
    assert rows[0]["changes"] == {} and rows[1]["changes"] == {"layers": 2}
    assert rows[1]["steps"] == 2 and 0 <= rows[1]["top1_d1"] <= 1 and rows[1]["offline_tau"] >= 1
    assert json.loads((tmp_path / "ablation.json").read_text())["runs"] == rows
    with pytest.raises(GraftError, match="baseline"):
        ablation_summary([root / "layers2"])


def test_flat_packing_trains_identically(target, tiny_data):
    """The accelerator path (FlatBlocks gathers) takes the same steps as the per-row packing."""
    train_seqs, held = tiny_data
    cfg = small_train_config(max_steps=3, draft_vocab=20)
    rows = Trainer(cfg, target, train_seqs, held, LAYERS, [], flat=False)
    flat = Trainer(cfg, target, train_seqs, held, LAYERS, [], flat=True)
    assert flat.flat is not None and rows.flat is None
    for _ in range(3):
        assert rows.step()["loss"] == flat.step()["loss"]
    assert rows.evaluate()["heldout_loss"] == flat.evaluate()["heldout_loss"]


def test_pipeline_generates_and_trains_in_one_process(tmp_path):
    """`graft drafter-pipeline` (the GPU run, here on the CPU): prompts file -> in-memory data -> drafter."""
    from graftlib.training.drafter.data.store import write_prompts
    from graftlib.training.drafter.pipeline import run

    tdir = write_target_dir(tmp_path / "target", initializer_range=0.1)
    write_prompts(tmp_path / "prompts.jsonl", items(12))
    data_cfg = DataConfig(target=str(tdir), n_prompts=12, shard_size=5, batch_size=3, max_prompt_tokens=40,
                          max_response_tokens=16, top_k=4, sample_share=0.25, target_layer_ids=LAYERS, max_minutes=5)
    cfg = small_train_config(max_steps=4, distill=0.5, heldout=0.25, tau_prompts=2, tau_tokens=8)
    finals = run(tmp_path / "out", data_cfg, cfg, prompts_file=tmp_path / "prompts.jsonl",
                 device="cpu", variants=["d1:0.5:1", "h1:0:1"], log=lambda _: None, command="test")
    assert sorted(finals) == ["d1", "h1"]
    final = finals["d1"]
    hard = json.loads((finals["h1"] / "training.json").read_text())
    assert hard["config"]["distill"] == 0 and hard["data"]["response_tokens"] > 0
    rec = json.loads((final / "training.json").read_text())
    data = json.loads((tmp_path / "out" / "data.json").read_text())
    assert rec["steps"] == 4 and rec["data"]["sequences"] == 12 and rec["data"]["in_memory"]
    assert [c["count"] for c in data["chunks"]] == [5, 5, 2]
    assert data["response_tokens"] == rec["data"]["response_tokens"]
    assert rec["final_eval"]["tau_exact"] == "2/2"  # equal to the target's own AR decode
    assert rec["final_eval"]["tau_matches_data"] == "2/2"  # the data came from the same fp32 target
    assert "(exact 2/2, matches data 2/2)" in eval_line(rec["final_eval"])
    assert (final / "model.safetensors").is_file() and rec["data"]["stored_layer_ids"] == LAYERS
    with pytest.raises(GraftError, match="NAME:DISTILL:LAYERS"):
        run(tmp_path / "bad", data_cfg, cfg, 5, variants=["d1:half:1"])
    with pytest.raises(GraftError, match="generates with the float32 target"):
        run(tmp_path / "bf16", replace(data_cfg, dtype="bfloat16"), cfg, 5)
    assert not (tmp_path / "bf16").exists()


def test_depth_stats_chain_reach_and_hit_rates_on_three_chains():
    """acc_by_depth counts hits at each depth whatever came before; chain_by_depth the chains whose leading
    run of hits reaches the depth; offline tau = 1 + the mean run (chains without a depth-1 label skipped)."""
    from graftlib.training.drafter.samples import IGNORE
    from graftlib.training.drafter.trainer import DepthStats

    labels = torch.tensor([[1, 2, 3], [1, 2, 3], [1, 2, 3], [IGNORE, 2, 3]])
    top = torch.tensor([[1, 2, 3], [1, 9, 3], [9, 2, 3], [1, 2, 3]])[..., None]  # [N, D, 1]
    stats = DepthStats(3, "cpu")
    stats.add(top, labels)
    r = stats.result()
    assert r["acc_by_depth"] == [round(2 / 3, 4), 0.75, 1.0]
    assert r["chain_by_depth"] == [round(2 / 3, 4), round(1 / 3, 4), round(1 / 3, 4)]  # runs 3, 1, 0
    assert abs(r["offline_tau"] - (1 + 4 / 3)) < 1e-6 and "by_pool" not in r
    # the same chains in two rows of two (pools a, b): each pool's own depth-1 rate, tau and chain count
    pooled = DepthStats(3, "cpu")
    pooled.add(top, labels, ["a", "b"])
    r2 = pooled.result()
    assert r2["by_pool"] == {"a": {"top1_d1": 1.0, "offline_tau": 3.0, "chains": 2},
                             "b": {"top1_d1": 0.0, "offline_tau": 1.0, "chains": 1}}
    assert {k: v for k, v in r2.items() if k != "by_pool"} == r
