"""The DFlash drafter's graftlib extensions (`draft_head`, `anchor_context`; module doc of
graftlib.models.drafter): the packed training forward equals the decode loop's single-block and cached
forwards, a warm start adds them without changing what the drafter computes and trains them, they save
and load by their config keys (a z-lab config without them loads as before), and a trained drafter with
both decodes exactly what greedy AR decodes."""

import json

import pytest
import torch
from test_drafter_train import EOS, LAYERS, items, packed_example, small_train_config, target  # noqa: F401  (fixture)
from tiny import MASK_ID, prompts_of, tiny_drafter, tiny_tokenizer, write_target_dir

from graftlib.core.errors import GraftError
from graftlib.methods.decoder import Decoder
from graftlib.models.drafter import DFlashConfig, init_weights, load_drafter, save_drafter
from graftlib.models.pair import fingerprint, identify
from graftlib.training.drafter.data.store import load_dataset
from graftlib.training.drafter.data.target_data import DataConfig, build_dataset
from graftlib.training.drafter.dflash_init import warm_drafter
from graftlib.training.drafter.dflash_train import Trainer, predecessors, train

pytestmark = pytest.mark.usefixtures("one_thread")


def test_packed_anchor_context_equals_single_and_cached_forwards():
    bs = 6
    drafter = tiny_drafter(seed=3, block_size=bs, anchor_context=True)
    init_weights(drafter, std=0.2)  # anchor_proj non-zero
    embed = torch.nn.Embedding(32, 64)
    seqs, anchors, batch = packed_example(bs)
    with torch.no_grad():
        packed = drafter(embed(batch.ids), batch.ctx, 0, block_mask=batch.mask,
                         ctx_positions=batch.ctx_pos, q_positions=batch.q_pos)
        worst = 0.0
        for r, (s, row) in enumerate(zip(seqs, anchors)):
            for b, a in enumerate(row):
                block = embed(torch.tensor([[int(s.tokens[a])] + [MASK_ID] * (bs - 1)]))
                single = drafter(block, s.features[None, :a], start=a)[0]
                worst = max(worst, (packed[r, b * bs:(b + 1) * bs] - single).abs().max().item())
                # the decode loop's calls: the cache holds [0, a - 2), the call brings the two newest rows
                cache = drafter.new_cache()
                drafter(block, s.features[None, :a - 2], start=a - 2, cache=cache)
                cached = drafter(block, s.features[None, a - 2:a], start=a, cache=cache)[0]
                worst = max(worst, (cached - single).abs().max().item())
        assert worst < 1e-5, worst
        # not vacuous: the path changes the output
        drafter.anchor_proj.weight.zero_()
        plain = drafter(embed(batch.ids), batch.ctx, 0, block_mask=batch.mask,
                        ctx_positions=batch.ctx_pos, q_positions=batch.q_pos)
        assert (plain - packed).abs().max() > 1e-2


def test_config_keys_round_trip_and_zlab_configs_load_without_them(tmp_path):
    cfg = tiny_drafter(draft_head=True, anchor_context=True, draft_vocab_size=12).config
    raw = cfg.to_dict()
    assert raw["dflash_config"]["draft_head"] is True and raw["dflash_config"]["anchor_context"] is True
    assert DFlashConfig.from_dict(raw) == cfg
    plain = tiny_drafter().config.to_dict()
    assert "draft_head" not in plain["dflash_config"] and "anchor_context" not in plain["dflash_config"]
    assert not DFlashConfig.from_dict(plain).draft_head


def assert_decodes_exactly(target, drafter, runs) -> None:  # noqa: F811  (a model, not the fixture)
    """Each (method, budget) of `runs` decodes two prompts exactly as greedy AR does."""
    ar = Decoder.for_method(target, drafter, "ar")
    for method, budget in runs:
        dec = Decoder.for_method(target, drafter, method, budget)
        for p in prompts_of([5, 13], seed=7):
            assert dec.decode(p, 30).tokens == ar.decode(p, 30).tokens, (method, p)


@pytest.fixture(scope="module")
def data(tmp_path_factory, target):  # noqa: F811
    target.generation_config.eos_token_id = EOS
    root = tmp_path_factory.mktemp("ext")
    tdir = write_target_dir(root / "target", seed=0, initializer_range=0.1)
    cfg = DataConfig(target=str(tdir), n_prompts=8, shard_size=4, batch_size=4, max_prompt_tokens=40,
                     max_response_tokens=24)
    build_dataset(root / "data", cfg, target, tiny_tokenizer(), items(8), LAYERS, log=lambda _: None)
    return root / "data"


def test_warm_start_adds_the_parts_at_their_start_and_trains_them(tmp_path, data, target):  # noqa: F811
    first = train(data, tmp_path / "a", small_train_config(draft_vocab=12, max_steps=4), log=lambda _: None)
    start, _ = load_drafter(str(first), target.config)
    grown = warm_drafter(small_train_config(draft_vocab=12, init_drafter=str(first), draft_head=True,
                                            anchor_context=True), target, LAYERS)
    assert grown.config.draft_head and grown.config.anchor_context and grown.training
    assert torch.equal(grown.lm_head.weight, target.lm_head.weight[grown.d2t])  # the target's rows
    assert not grown.anchor_proj.weight.any()
    _, seqs = load_dataset(data)
    tr = Trainer(small_train_config(draft_vocab=12), target, seqs[:5], seqs[5:], LAYERS, [EOS])
    batch = tr.pack(seqs[:2], [[seqs[0].prompt_len], [seqs[1].prompt_len + 1]])
    args = (tr.embed(batch.ids).float(), batch.ctx.float(), 0, None, batch.mask, batch.ctx_pos, batch.q_pos)
    h = grown(*args)
    assert torch.allclose(h, start.float()(*args), atol=1e-5)  # the same function
    assert torch.allclose(grown.draft_logits(h, grown.head_weight(target.lm_head.weight)),
                          start.draft_logits(h, start.head_weight(target.lm_head.weight)), atol=1e-5)
    h.square().sum().backward()
    assert grown.anchor_proj.weight.grad.abs().sum() > 0
    with pytest.raises(GraftError, match="own draft head True \\(asked False\\)"):
        saved = tmp_path / "grown"
        save_drafter(grown, saved)
        warm_drafter(small_train_config(draft_vocab=12, init_drafter=str(saved), anchor_context=True), target, LAYERS)
    # trained: both parts move, the shipped layout loads strictly and decodes exactly
    cfg = small_train_config(draft_vocab=12, max_steps=6, init_drafter=str(first), draft_head=True,
                             anchor_context=True)
    final = train(data, tmp_path / "b", cfg, log=lambda _: None)
    assert json.loads((final / "config.json").read_text())["dflash_config"]["draft_head"] is True
    drafter, trained = load_drafter(str(final), target.config)
    assert trained and drafter.anchor_proj.weight.any()
    assert not torch.equal(drafter.lm_head.weight, target.lm_head.weight[drafter.d2t].to(drafter.lm_head.weight.dtype))
    assert torch.equal(drafter.head_weight(target.lm_head.weight), drafter.lm_head.weight)  # decoding uses its own
    assert_decodes_exactly(target, drafter, (("dflash", 7), ("ddtree", 8)))


def test_dflash2_parts_warm_start_as_the_same_function_and_train(tmp_path, data, target):  # noqa: F811
    """DFlash 2's convolutions and selector added to a trained drafter compute its unary function, then train:
    the selector's loss falls, both parts move, the shipped drafter loads as a DFlash 2 checkpoint and its
    selector methods decode exactly."""
    first = train(data, tmp_path / "a", small_train_config(draft_vocab=12, max_steps=4), log=lambda _: None)
    start, _ = load_drafter(str(first), target.config)
    parts = dict(conv_kernel_size=2, selector_rank=8, selector_top_k=4)
    grown = warm_drafter(small_train_config(draft_vocab=12, init_drafter=str(first), **parts), target, LAYERS)
    assert grown.config.architecture == "DFlash2DraftModel" and grown.config.selector_top_k == 4
    _, seqs = load_dataset(data)
    tr = Trainer(small_train_config(draft_vocab=12), target, seqs[:5], seqs[5:], LAYERS, [EOS])
    batch = tr.pack(seqs[:2], [[seqs[0].prompt_len], [seqs[1].prompt_len + 1]])
    args = (tr.embed(batch.ids).float(), batch.ctx.float(), 0, None, batch.mask, batch.ctx_pos, batch.q_pos)
    assert torch.allclose(grown(*args), start.float()(*args), atol=1e-5)  # identity convolutions
    prev = predecessors(batch)
    depth = batch.depth.expand_as(prev)
    assert torch.equal(prev[depth == 1], batch.ids[:, ::tr.drafter.block_size].reshape(-1))  # the anchors
    later = (depth >= 2) & (batch.labels >= 0)
    assert torch.equal(prev[later], batch.labels.roll(1, -1)[later])  # the true token before
    cfg = small_train_config(draft_vocab=12, max_steps=20, init_drafter=str(first), eval_every=20, log_every=1,
                             tau_prompts=2,
                             tau_tokens=12, **parts)
    final = train(data, tmp_path / "b", cfg, log=lambda _: None)
    lines = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    sel_ce = [x["sel_ce"] for x in lines if x["kind"] == "train" and "sel_ce" in x]
    assert sel_ce and sel_ce[-1] < sel_ce[0]
    ev = [x for x in lines if x["kind"] == "eval"][-1]
    assert 1 <= ev["sel_offline_tau"] <= 8 and ev["sel_tau"] >= 1
    drafter, trained = load_drafter(str(final), target.config)
    assert trained and drafter.candidate_selector.successor_codebook.abs().sum() > 0
    assert drafter.layers[0].mlp_conv.kernel_projection.weight.any()  # moved off the identity
    assert_decodes_exactly(target, drafter, (("dflash2", 7), ("ddtree+sel", 8)))


def test_a_selector_trained_alone_keeps_the_drafts_and_the_pair_identity(tmp_path, data, target):  # noqa: F811
    """`parts_only`: the warm start's weights stay as they were, so its drafts and its pair identity (which leaves
    the selector out) do too, and the artifacts fitted on them stay valid; the selector itself trains."""
    first = train(data, tmp_path / "a", small_train_config(draft_vocab=12, max_steps=4), log=lambda _: None)
    cfg = small_train_config(draft_vocab=12, max_steps=6, init_drafter=str(first), selector_rank=8, selector_top_k=4,
                             parts_only=True)
    final = train(data, tmp_path / "b", cfg, log=lambda _: None)
    start, _ = load_drafter(str(first), target.config)
    drafter, _ = load_drafter(str(final), target.config)
    state = drafter.state_dict()
    assert all(torch.equal(state[k], v) for k, v in start.state_dict().items())
    assert identify(target, drafter).drafter_fingerprint == identify(target, start).drafter_fingerprint
    assert fingerprint(drafter) != fingerprint(start)
    with pytest.raises(GraftError, match="parts_only trains DFlash 2's parts of a warm start"):
        small_train_config(parts_only=True, selector_rank=8).check()
