"""DFlash 2 drafters (`graftlib.models.dflash2`, loaded by `graftlib.models.drafter`): a tiny random checkpoint
in the public layout against the outputs a public implementation recorded on it (tests/fixtures/dflash2/record.py:
z-lab's DFlash2DraftModel from `dflash==0.1.0`), the convolution's block-boundary rule, the identity warm start,
and the config's round trip and errors."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from graftlib.core.errors import GraftError
from graftlib.models.dflash2 import BlockConv, block_conv
from graftlib.models.drafter import DFlashConfig, DFlashDrafter, init_weights, load_drafter, save_drafter

HERE = Path(__file__).parent / "fixtures" / "dflash2"
TARGET = SimpleNamespace(hidden_size=64, vocab_size=128, num_hidden_layers=4)


@pytest.fixture(scope="module")
def recorded():
    return load_file(HERE / "recorded.safetensors")


@pytest.fixture(scope="module")
def drafter():
    model, trained = load_drafter(str(HERE / "checkpoint"), TARGET)
    assert trained and model.config.architecture == "DFlash2DraftModel"
    return model


def test_a_public_checkpoint_loads_and_drafts_what_the_public_implementation_recorded(drafter, recorded):
    cfg = drafter.config
    assert (cfg.conv_kernel_size, cfg.conv_group_size, cfg.selector_rank, cfg.selector_top_k) == (2, 16, 12, 4)
    assert cfg.is_causal is False and drafter.layers[1].self_attn.sliding_window == 6
    with torch.no_grad():
        hidden = drafter(recorded["noise_embedding"], recorded["target_hidden"], start=5)
        logits = drafter.logits(hidden[0, 1:], recorded["head"])
        path, cand = drafter.candidate_selector.walk(hidden[0, 1:], logits, int(recorded["anchor"]))
    assert (hidden - recorded["hidden"]).abs().max() < 2e-5  # the two-sided window and both convolutions
    assert (logits - recorded["logits"][0]).abs().max() < 2e-5
    assert path.tolist() == recorded["path"][0].tolist()
    assert [sorted(c) for c in cand.tolist()] == [sorted(c) for c in recorded["candidates"][0].tolist()]


def test_the_convolution_never_reaches_across_a_block_boundary(drafter, recorded):
    conv = drafter.layers[0].attention_conv
    with torch.no_grad():
        packed = conv.prepare(recorded["conv_input"])[0]  # two blocks side by side, as training packs them
    assert (packed - recorded["conv_per_block"]).abs().max() < 1e-5  # = each block alone (the public decode)
    x = torch.randn(1, 16, 32)
    delta = torch.randn(1, 16, 2, 2)
    base = torch.randn(2, 32)
    whole = block_conv(x, delta, base, block_size=8, group_size=16)
    x2 = x.clone()
    x2[:, 7] += 100.0  # the last position of block 0 moves: block 1 must not see it
    assert torch.equal(block_conv(x2, delta, base, 8, 16)[:, 8:], whole[:, 8:])
    assert not torch.equal(block_conv(x2, delta, base, 16, 16)[:, 8:], whole[:, 8:])  # one block of 16 does


def test_identity_convolutions_compute_the_plain_drafters_function():
    plain_cfg = DFlashConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=16, vocab_size=128, block_size=8, mask_token_id=5,
                             target_layer_ids=[1, 2], num_target_layers=4)
    torch.manual_seed(0)
    plain = DFlashDrafter(plain_cfg)
    init_weights(plain)
    conv_cfg = DFlashConfig(**{**plain_cfg.__dict__, "conv_kernel_size": 2, "selector_rank": 8})
    grown = DFlashDrafter(conv_cfg)
    init_weights(grown)
    missing = grown.load_state_dict(plain.state_dict(), strict=False).missing_keys
    assert missing and all("_conv." in k or k.startswith("candidate_selector.") for k in missing)
    assert isinstance(grown.layers[0].mlp_conv, BlockConv)
    noise, ctx = torch.randn(1, 8, 64), torch.randn(1, 3, 128)
    with torch.no_grad():
        assert torch.allclose(grown(noise, ctx, start=3), plain(noise, ctx, start=3), atol=1e-6)


def test_a_dflash2_config_round_trips_and_a_bad_one_is_named(drafter, tmp_path):
    save_drafter(drafter, tmp_path / "d2")
    raw = json.loads((tmp_path / "d2" / "config.json").read_text())
    assert raw["architectures"] == ["DFlash2DraftModel"] and raw["is_causal"] is False
    assert {k: raw["dflash_config"][k] for k in ("conv_kernel_size", "conv_group_size", "selector_rank",
                                                   "selector_top_k")} == {"conv_kernel_size": 2, "conv_group_size": 16,
                                                                          "selector_rank": 12, "selector_top_k": 4}
    again, _ = load_drafter(str(tmp_path / "d2"), TARGET)
    assert again.config == drafter.config
    bad = tmp_path / "bad"
    shutil.copytree(HERE / "checkpoint", bad)
    raw = json.loads((bad / "config.json").read_text())
    for key in ("conv_kernel_size", "selector_rank"):
        raw["dflash_config"].pop(key)
    (bad / "config.json").write_text(json.dumps(raw))
    with pytest.raises(GraftError, match="names neither conv_kernel_size nor selector_rank"):
        load_drafter(str(bad), TARGET)
    raw["dflash_config"]["selector_rank"] = 12
    (bad / "config.json").write_text(json.dumps(raw))
    with pytest.raises(GraftError, match=r"unexpected: layers\.0\.attention_conv\.base_kernel"):
        load_drafter(str(bad), TARGET)


def test_a_packed_selector_keeps_every_row_a_draft_reads():
    """`pack_selector` keeps the selector's tensors, its successor rows cut to the draft vocabulary's target ids;
    `unpack_selector` puts those rows back and zeroes the rest (never read: candidates are drafted tokens)."""
    from graftlib.models.dflash2 import pack_selector, unpack_selector

    g = torch.Generator().manual_seed(0)
    state = {"candidate_selector.predecessor_codebook": torch.randn(50, 4, generator=g),
             "candidate_selector.successor_codebook": torch.randn(50, 4, generator=g),
             "candidate_selector.hidden_projection.weight": torch.randn(4, 8, generator=g),
             "layers.0.mlp.down_proj.weight": torch.randn(8, 8, generator=g)}
    d2t = torch.tensor([3, 7, 11, 42])
    packed = pack_selector(state, d2t)
    assert set(packed) == {k for k in state if k.startswith("candidate_selector.")}
    assert packed["candidate_selector.successor_codebook"].shape == (4, 4)
    full = unpack_selector(packed, d2t, 50)
    B = full["candidate_selector.successor_codebook"]
    assert torch.equal(B[d2t], state["candidate_selector.successor_codebook"][d2t])
    mask = torch.ones(50, dtype=torch.bool)
    mask[d2t] = False
    assert not B[mask].any()
    assert torch.equal(full["candidate_selector.predecessor_codebook"],
                       state["candidate_selector.predecessor_codebook"])
