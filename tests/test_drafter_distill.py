"""Drafter data v2 and distillation on tiny models: the stored top-k log-probs are the target's own
distribution at each response position, sampled responses are reproducible and greedy ones stay
exact, shards map their features from disk, prompts files round-trip, the soft loss is the forward
KL on the stored top-k, the WSD schedule holds its plateau until the decay, and records store
portable paths."""

import json
import math
from dataclasses import replace

import pytest
import torch
from tiny import prompts_of, tiny_target, tiny_tokenizer

from graftlib.core.errors import GraftError
from graftlib.core.paths import PACKAGE_DIR, portable
from graftlib.data.prompts import Item
from graftlib.methods.decoder import Decoder
from graftlib.training.drafter.blocks import pack_blocks
from graftlib.training.drafter.data import target_data as drafter_data
from graftlib.training.drafter.data.batched import Capture, Sampled
from graftlib.training.drafter.data.store import load_dataset, read_prompts, read_shard, write_prompts
from graftlib.training.drafter.data.target_data import DataConfig, build_dataset, generate_sequences, sampled
from graftlib.training.drafter.dflash_init import TrainConfig
from graftlib.training.drafter.dflash_train import Trainer
from graftlib.training.drafter.samples import IGNORE
from graftlib.training.drafter.trainer import lr_factor

LAYERS = [0, 2]
EOS = 5
K = 6

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", seed=0, initializer_range=0.1)


def test_topk_logprobs_are_the_targets_distribution(target):
    prompts = prompts_of([3, 11, 7, 20], seed=3)
    seqs = generate_sequences(target, prompts, Capture(LAYERS, K, torch.float32), 24, [EOS], batch_size=3)
    for s in seqs:
        assert s.topk_ids.shape == (s.response_len, K) and s.topk_logp.shape == (s.response_len, K)
        with torch.inference_mode():
            logits = target(s.tokens[None]).logits[0].float()
        # response token j is predicted at position prompt_len - 1 + j
        want = torch.log_softmax(logits[s.prompt_len - 1:len(s.tokens) - 1], -1).topk(K, dim=-1)
        assert torch.equal(s.topk_ids.long(), want.indices)
        assert torch.allclose(s.topk_logp.float(), want.values, atol=2e-3)
        # greedy: the generated token is the target's first choice
        assert torch.equal(s.tokens[s.prompt_len:], s.topk_ids[:, 0].long())


def test_sampled_rows_are_reproducible_and_greedy_rows_stay_exact(target):
    prompts = prompts_of([4, 9, 6, 12], seed=20)
    temps = [0.0, 1.0, 0.0, 1.0]

    def run(seed):
        return generate_sequences(target, prompts, Capture(LAYERS, K), 20, [], batch_size=4,
                                  sampled=Sampled(temps, generator=torch.Generator().manual_seed(seed)))

    a, b, c = run(0), run(0), run(1)
    assert all(torch.equal(x.tokens, y.tokens) for x, y in zip(a, b))
    assert any(not torch.equal(x.tokens, y.tokens) for x, y, t in zip(a, c, temps) if t > 0)
    ar = Decoder.for_method(target, None, "ar")
    for p, s, t in zip(prompts, a, temps):
        if t == 0:
            assert s.tokens[len(p):].tolist() == ar.decode(p, 20).tokens
    greedy_picks = torch.cat([s.tokens[s.prompt_len:] == s.topk_ids[:, 0] for s, t in zip(a, temps) if t > 0])
    assert not greedy_picks.all()  # sampling at T = 1 leaves the argmax somewhere
    assert sampled("x/1", 1.0) and not sampled("x/1", 0.0)
    share = sum(sampled(f"u/{i}", 0.3) for i in range(2000)) / 2000
    assert 0.25 < share < 0.35


def items(n):
    return [Item("alpaca", f"alpaca/{i}", f"say {i} things please", f"say {i} things please") for i in range(n)]


def test_shards_store_topk_and_map_features(tmp_path, target):
    cfg = DataConfig(target="tiny", n_prompts=6, shard_size=3, batch_size=3, max_prompt_tokens=40,
                     max_response_tokens=10, top_k=K, sample_share=0.5)
    index = build_dataset(tmp_path / "d", cfg, target, tiny_tokenizer(), items(6), LAYERS, log=lambda _: None)
    assert index.top_k == K and index.totals()["bytes"] > 0
    assert sum(s["sampled"] for s in index.shards) == sum(sampled(f"alpaca/{i}", 0.5) for i in range(6))
    _, seqs = load_dataset(tmp_path / "d")
    path = tmp_path / "d" / "shard-00000.safetensors"
    mapped, loaded = read_shard(path), read_shard(path, mmap=False)
    for a, b in zip(mapped, loaded):
        assert torch.equal(a.features, b.features) and torch.equal(a.topk_ids, b.topk_ids)
    assert seqs[0].topk_ids.shape == (seqs[0].response_len, K)
    cfg2 = DataConfig(**{**cfg.__dict__, "top_k": 4})
    with pytest.raises(GraftError, match="other settings: top_k"):
        build_dataset(tmp_path / "d", cfg2, target, tiny_tokenizer(), items(6), LAYERS, log=lambda _: None)
    # a shard whose features file is lost is made again
    (tmp_path / "d" / "shard-00001.features.npy").unlink()
    build_dataset(tmp_path / "d", cfg, target, tiny_tokenizer(), items(6), LAYERS, log=lambda _: None)
    _, again = load_dataset(tmp_path / "d")
    assert all(torch.equal(x.tokens, y.tokens) for x, y in zip(seqs, again))


def test_prompts_file_round_trip(tmp_path):
    its = items(5)
    for name in ("p.jsonl", "p.jsonl.gz"):
        write_prompts(tmp_path / name, its)
        assert read_prompts(tmp_path / name) == its
    (tmp_path / "bad.jsonl").write_text('{"task": "alpaca"}\n')
    with pytest.raises(GraftError, match="malformed"):
        read_prompts(tmp_path / "bad.jsonl")
    with pytest.raises(GraftError, match="not found"):
        read_prompts(tmp_path / "missing.jsonl")


def test_soft_loss_is_forward_kl_on_the_stored_topk(target):
    prompts = prompts_of([5, 8, 6, 9, 7, 10], seed=40)
    seqs = generate_sequences(target, prompts, Capture(LAYERS, K), 16, [], batch_size=6)
    for i, s in enumerate(seqs):
        s.uid = f"t/{i}"
    cfg = TrainConfig(block_size=4, mask_token_id=16, draft_vocab=0, blocks_per_step=8, blocks_per_seq=4,
                      minutes=None, max_steps=4, eval_blocks=8, tau_prompts=0, bf16=False, distill=1.0)
    trainer = Trainer(cfg, target, seqs[:5], seqs[5:], LAYERS, [])
    batch = pack_blocks(seqs[:2], [[seqs[0].prompt_len, seqs[0].prompt_len + 3], [seqs[1].prompt_len + 1]], 4, 16)
    # the packed soft targets are the stored rows of each label's position
    r, q = 0, 2  # row 0, block 0, depth 2: label tokens[a + 2]
    a = seqs[0].prompt_len
    assert batch.labels[r, q] == seqs[0].tokens[a + 2]
    assert torch.equal(batch.soft_ids[r, q], seqs[0].topk_ids[a + 2 - a].long())
    assert (batch.soft_ids[batch.labels < 0] == IGNORE).all()
    h = trainer.hidden(batch)
    loss, stats = trainer.loss(batch, h)
    assert stats["soft"] > 0
    sel = batch.labels >= 0
    logq = torch.log_softmax(torch.nn.functional.linear(h[sel], trainer.head()).float(), -1)
    p = torch.softmax(batch.soft_logp[sel].float(), -1)
    soft = -(p * logq.gather(1, batch.soft_ids[sel])).sum(-1)
    w = trainer.depth_weight[batch.depth].expand_as(batch.labels)[sel]
    assert torch.allclose(loss, (soft * w).sum() / w.sum(), atol=1e-5)
    # with a one-hot top-k on the label, the soft loss is the hard cross-entropy
    onehot = batch.soft_logp.clone().fill_(-1e4)
    onehot[..., 0] = 0.0
    ids = batch.soft_ids.clone()
    ids[..., 0] = batch.labels
    hard_trainer = Trainer(TrainConfig(**{**cfg.__dict__, "distill": 0.0}), target, seqs[:5], seqs[5:], LAYERS, [])
    hard_trainer.drafter.load_state_dict(trainer.drafter.state_dict())
    hard, hard_stats = hard_trainer.loss(batch, h)
    # the hard CE is reported whatever distill is: the held-out figure that compares runs
    assert stats["ce"] == pytest.approx(hard.item(), rel=1e-5) and hard_stats["ce"] == pytest.approx(hard.item(),
                                                                                                     rel=1e-5)
    assert stats["ce"] != pytest.approx(loss.item(), rel=1e-3)
    ev = trainer.evaluate()
    assert ev["heldout_ce"] != pytest.approx(ev["heldout_loss"], rel=1e-3)
    hard_ev = hard_trainer.evaluate()
    assert hard_ev["heldout_ce"] == pytest.approx(hard_ev["heldout_loss"], rel=1e-6)
    batch.soft_ids, batch.soft_logp = ids, onehot
    assert torch.allclose(trainer.loss(batch, h)[0], hard, atol=1e-4)
    batch.soft_ids = batch.soft_logp = None
    with pytest.raises(GraftError, match="top-k log-probs"):
        trainer.loss(batch, h)
    losses = [trainer.step()["loss"] for _ in range(4)]
    assert all(math.isfinite(x) for x in losses)  # finite while training on the soft loss


def test_wsd_holds_the_plateau_then_decays_once():
    f = [lr_factor(p / 100, 0.05, "wsd", 0.2) for p in range(101)]
    assert f[0] == 0 and f[5] == 1 and all(v == 1 for v in f[5:80]) and f[90] == pytest.approx(0.5) and f[100] == 0
    # a run resumed with twice the budget is still on the plateau where the first would decay
    assert lr_factor(0.45, 0.05, "wsd", 0.2) == 1 and lr_factor(0.9, 0.05, "wsd", 0.2) < 1
    assert lr_factor(0.5, 0.05, "cosine") < 1
    with pytest.raises(GraftError, match="schedule"):
        TrainConfig(schedule="step").check()


def test_portable_paths(tmp_path, monkeypatch):
    root = PACKAGE_DIR.parent
    assert portable(root / "runs" / "x") == "runs/x"
    assert portable("runs/x") == "runs/x"
    monkeypatch.setenv("GRAFT_HOME", str(tmp_path / "home"))
    assert portable(tmp_path / "home" / "data" / "y") == "$GRAFT_HOME/data/y"
    assert portable("/somewhere/else/z.json") == "z.json"
    record = json.dumps({"dirs": [portable(tmp_path / "home" / "d")]})
    assert str(tmp_path) not in record


def test_loop_tau_uses_greedy_heldout_responses_only(target):
    seqs = generate_sequences(target, prompts_of([5, 6, 7, 8], seed=60), Capture(LAYERS), 8, [], batch_size=4)
    for i, s in enumerate(seqs):
        s.uid = f"h/{i}"
    cfg = TrainConfig(block_size=4, mask_token_id=16, draft_vocab=0, blocks_per_step=4, blocks_per_seq=2,
                      minutes=None, max_steps=1, eval_blocks=4, tau_prompts=4, bf16=False)
    trainer = Trainer(cfg, target, seqs[:2], seqs[2:], LAYERS, [], sampled_uids=frozenset({"h/2"}))
    assert [s.uid for s in trainer.greedy_heldout] == ["h/3"]


def test_bf16_autocast_only_where_native(target):
    from graftlib.training.drafter.trainer import native_bf16

    assert native_bf16(torch.device("cuda")) and not native_bf16(torch.device("meta"))
    cpu = native_bf16(torch.device("cpu"))
    assert cpu == bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    seqs = generate_sequences(target, prompts_of([5, 6, 7], seed=70), Capture(LAYERS), 8, [], batch_size=3)
    for i, s in enumerate(seqs):
        s.uid = f"b/{i}"
    base = dict(block_size=4, mask_token_id=16, draft_vocab=0, blocks_per_step=4, blocks_per_seq=2, minutes=None,
                max_steps=1, eval_blocks=4, tau_prompts=0)
    assert Trainer(TrainConfig(**base), target, seqs[:2], seqs[2:], LAYERS, []).bf16 == cpu
    assert Trainer(TrainConfig(**base, bf16=True), target, seqs[:2], seqs[2:], LAYERS, []).bf16


def test_sampled_share_is_independent_of_the_heldout_split():
    from graftlib.training.drafter.data.store import Sequence
    from graftlib.training.drafter.samples import heldout_split

    seqs = [Sequence(torch.tensor([1, 2, 3]), 1, torch.zeros(2, 4), f"u/{i}") for i in range(4000)]
    _, held = heldout_split(seqs, 0.04)
    share = sum(sampled(s.uid, 0.1) for s in held) / len(held)
    assert 0.04 < share < 0.17, share  # ~ the sampled share, not 1.0


def test_loop_tau_prompts_spread_over_the_pools():
    from graftlib.training.drafter.data.store import Sequence
    from graftlib.training.drafter.samples import spread_by_pool

    uids = ["sharegpt/a", "sharegpt/b", "alpaca/1", "sharegpt/c", "regular/x", "gsm8k/9", "alpaca/2"]
    seqs = [Sequence(torch.tensor([1, 2, 3]), 1, torch.zeros(2, 4), u) for u in uids]
    picked = [s.uid for s in spread_by_pool(seqs, 6)]
    assert picked == ["alpaca/1", "gsm8k/9", "regular/x", "sharegpt/a", "alpaca/2", "sharegpt/b"]
    assert [s.uid for s in spread_by_pool(seqs, 100)][-1] == "sharegpt/c" and spread_by_pool([], 4) == []


def test_bf16_generation_is_recorded_per_shard(tmp_path, target):
    """--dtype bfloat16 generates with the target's weights in bf16: the shard says so, its top-k stays a
    log-distribution over the vocabulary, and a float32 shard of the same directory keeps its own dtype."""
    cfg = DataConfig(target="tiny", n_prompts=6, shard_size=3, batch_size=3, max_prompt_tokens=40,
                     max_response_tokens=10, top_k=K)
    build_dataset(tmp_path / "d", replace(cfg, n_prompts=3), target, tiny_tokenizer(), items(6), LAYERS,
                  log=lambda _: None)
    bf16 = tiny_target("llama", seed=0, initializer_range=0.1).to(torch.bfloat16)
    index = build_dataset(tmp_path / "d", replace(cfg, dtype="bfloat16"), bf16, tiny_tokenizer(), items(6), LAYERS,
                          log=lambda _: None)
    assert [s["dtype"] for s in sorted(index.shards, key=lambda s: s["first"])] == ["float32", "bfloat16"]
    _, seqs = load_dataset(tmp_path / "d")
    for s in seqs[3:]:
        assert s.features.dtype == torch.float16 and s.features.shape[0] == len(s.tokens) - 1
        probs = s.topk_logp.float().exp()
        assert (probs.sum(-1) <= 1.01).all() and (s.topk_logp[:, :-1] >= s.topk_logp[:, 1:]).all()
        assert s.greedy()  # greedy under its own (bf16) target
    with pytest.raises(GraftError, match="dtype 'float16' is not one of"):
        DataConfig(dtype="float16").check()


def test_branches_are_greedy_continuations_of_a_sampled_prefix(tmp_path, target, monkeypatch):
    """--branches: every prompt answered n times; each stored sequence is the prompt, a sampled prefix of
    1..branch_tokens tokens (stored as context: prompt_len grows by it) and then the target's greedy
    continuation of that context, with its top-k rows only over the greedy part."""
    from graftlib.data.prompts import format_prompt
    from graftlib.training.drafter.data.target_data import branch_prefix

    tok = tiny_tokenizer()
    cfg = DataConfig(target="tiny", n_prompts=3, shard_size=4, batch_size=3, max_prompt_tokens=40,
                     max_response_tokens=16, top_k=K, branches=3, branch_tokens=6, sample_temperature=1.5)
    index = build_dataset(tmp_path / "d", cfg, target, tok, items(5), LAYERS, log=lambda _: None)
    assert index.branches == 3 and sum(s["count"] for s in index.shards) == 9  # 3 prompts x 3 branches
    _, seqs = load_dataset(tmp_path / "d")
    assert len(seqs) + sum(s["dropped"] for s in index.shards) == 9 and len(seqs) >= 6
    ar = Decoder.for_method(target, None, "ar")
    sampled_off_greedy = 0
    for s in seqs:
        uid, j = s.uid.split("@branch")
        assert uid in {"alpaca/0", "alpaca/1", "alpaca/2"} and j in {"1", "2", "3"}
        prompt = format_prompt(Item("alpaca", uid, *[f"say {uid[7:]} things please"] * 2), tok, 40).input_ids
        k = branch_prefix(s.uid, 6)
        assert s.prompt_len == len(prompt) + k and s.tokens[:len(prompt)].tolist() == prompt
        assert s.features.shape[0] == len(s.tokens) - 1 and s.topk_ids.shape == (s.response_len, K)
        ctx = s.tokens[:s.prompt_len].tolist()
        assert ar.decode(ctx, s.response_len).tokens[:s.response_len] == s.tokens[s.prompt_len:].tolist()
        assert s.greedy()
        sampled_off_greedy += s.tokens[len(prompt):s.prompt_len].tolist() != ar.decode(prompt, k).tokens[:k]
    assert sampled_off_greedy > 0  # the prefixes are sampled, not the greedy response again
    # a dropped branch leaves no sequence: the shard's uids name the stored sequences, in order
    original = drafter_data.as_branch
    monkeypatch.setattr(drafter_data, "as_branch",
                        lambda seq, k: None if seq.uid.endswith("@branch1") else original(seq, k))
    index = build_dataset(tmp_path / "dropped", cfg, target, tok, items(5), LAYERS, log=lambda _: None)
    _, kept = load_dataset(tmp_path / "dropped")
    assert sum(s["dropped"] for s in index.shards) >= 3 and sum(len(s["uids"]) for s in index.shards) == len(kept)
    assert kept and all(not s.uid.endswith("@branch1") for s in kept)
    for s in kept:
        base = s.uid.split("@branch")[0]
        prompt = format_prompt(Item("alpaca", base, *[f"say {base[7:]} things please"] * 2), tok, 40).input_ids
        assert s.prompt_len == len(prompt) + branch_prefix(s.uid, 6), s.uid
    with pytest.raises(GraftError, match="branches and sample_share"):
        replace(cfg, sample_share=0.1).check()
    with pytest.raises(GraftError, match="branch_tokens"):
        replace(cfg, branch_tokens=16).check()
    with pytest.raises(GraftError, match="other settings: branches"):
        build_dataset(tmp_path / "d", replace(cfg, branches=2), target, tok, items(5), LAYERS, log=lambda _: None)


def test_a_prompts_branches_fall_on_one_side_of_the_split():
    from graftlib.training.drafter.data.store import Sequence
    from graftlib.training.drafter.samples import heldout_split

    seqs = [Sequence(torch.tensor([1, 2, 3]), 1, torch.zeros(2, 4), f"u/{i}@branch{j}")
            for i in range(500) for j in (1, 2, 3)]
    plain = [Sequence(torch.tensor([1, 2, 3]), 1, torch.zeros(2, 4), f"u/{i}") for i in range(500)]
    _, held = heldout_split(seqs, 0.1)
    _, held_plain = heldout_split(plain, 0.1)
    ids = sorted({s.uid.split("@")[0] for s in held})
    assert ids == sorted(s.uid for s in held_plain) and len(held) == 3 * len(ids) > 0


def test_a_token_tied_with_the_first_choice_is_greedy():
    """bf16 logits tie: a response token whose stored log-prob equals the first choice's counts as greedy
    (argmax and top-k may order a tie differently); a token below the first choice does not."""
    from graftlib.training.drafter.data.store import Sequence

    ids = torch.tensor([[7, 8, 9], [4, 5, 6]], dtype=torch.int32)
    logp = torch.tensor([[-0.5, -0.5, -2.0], [-0.1, -3.0, -4.0]], dtype=torch.float16)

    def seq(response):
        return Sequence(torch.tensor([1, 2, *response]), 2, torch.zeros(3, 4), "x/0", ids, logp)

    assert seq([7, 4]).greedy() and seq([8, 4]).greedy()  # 8 ties with 7
    assert not seq([9, 4]).greedy() and not seq([7, 5]).greedy()


def test_draws_are_made_for_the_sampling_rows_only(target, monkeypatch):
    """A step draws (softmax + multinomial) over the rows inside their sampled span and no others: the rows
    drawn in all add up to each sequence's sampled tokens, and the tokens after the span stay greedy."""
    prompts = prompts_of([4, 9, 6, 12, 5], seed=21)
    temps, spans = [1.0, 0.0, 1.0, 1.0, 0.0], [3, 20, 1, 5, 20]
    drawn = []
    real = torch.multinomial

    def counting(probs, *args, **kwargs):
        drawn.append(probs.shape[0])
        return real(probs, *args, **kwargs)

    monkeypatch.setattr(torch, "multinomial", counting)
    seqs = generate_sequences(target, prompts, Capture(LAYERS, K), 12, [], batch_size=2,
                              sampled=Sampled(temps, spans, torch.Generator().manual_seed(0)))
    assert sum(drawn) == sum(min(k, s.response_len) for s, t, k in zip(seqs, temps, spans) if t > 0)
    for s, t, k in zip(seqs, temps, spans):
        start = s.prompt_len + (k if t > 0 else 0)
        assert torch.equal(s.tokens[start:], s.topk_ids[start - s.prompt_len:, 0].long())


def test_a_prompt_given_several_times_is_prefilled_once(target, monkeypatch):
    """The branches of one prompt are admitted together: their prefill runs once and its rows are copied, and
    each copy decodes exactly as the prompt alone does (greedy here, so every copy is the AR decode)."""
    a, b, c = prompts_of([5, 9, 7], seed=22)
    prompts = [a, b, a, c, a, b]
    rows = []
    forward = target.model.forward

    def recording(*args, **kwargs):
        ids = kwargs["input_ids"]
        if ids.shape[1] > 1:
            rows.append(ids.shape[0])
        return forward(*args, **kwargs)

    monkeypatch.setattr(target.model, "forward", recording)
    seqs = generate_sequences(target, prompts, Capture(LAYERS, K, torch.float32), 10, [], batch_size=4)
    assert rows == [2, 1]  # admitted by length: a, a, a, c (two prefilled), then b, b (one); without sharing 4, 2
    monkeypatch.undo()
    ar = Decoder.for_method(target, None, "ar")
    for p, s in zip(prompts, seqs):
        assert s.tokens[len(p):].tolist() == ar.decode(p, 10).tokens
        assert s.features.shape[0] == len(s.tokens) - 1
    assert torch.equal(seqs[0].features, seqs[2].features) and torch.equal(seqs[0].topk_ids, seqs[4].topk_ids)
