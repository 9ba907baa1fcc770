"""DFlash drafter: z-lab checkpoint compatibility (written by hand here), pairing checks, and the
drafter math against an independent re-implementation, uncached and cached."""

import json
import math

import pytest
import torch
from safetensors.torch import save_file
from tiny import target_config, tiny_drafter

from graftlib.core.errors import GraftError
from graftlib.models.drafter import (
    DFlashConfig,
    DraftCache,
    check_pair,
    default_target_layer_ids,
    load_drafter,
    save_drafter,
)

H, I, NH, NKV, HD, V = 64, 128, 4, 2, 16, 32


pytestmark = pytest.mark.usefixtures("one_thread")


def zlab_state(n_layers: int, n_target_ids: int = 2, seed: int = 0, dtype=torch.float32) -> dict:
    """Random tensors under exactly the z-lab DFlashDraftModel names (no prefix, no embed / lm_head)."""
    g = torch.Generator().manual_seed(seed)

    def w(*shape, scale=0.3):
        return (torch.randn(*shape, generator=g) * scale).to(dtype)

    def norm(n):
        return (1.0 + 0.2 * torch.randn(n, generator=g)).to(dtype)

    sd = {"fc.weight": w(H, n_target_ids * H, scale=0.1), "hidden_norm.weight": norm(H),
          "norm.weight": norm(H)}
    for i in range(n_layers):
        p = f"layers.{i}."
        sd |= {
            p + "input_layernorm.weight": norm(H), p + "post_attention_layernorm.weight": norm(H),
            p + "self_attn.q_proj.weight": w(NH * HD, H), p + "self_attn.k_proj.weight": w(NKV * HD, H),
            p + "self_attn.v_proj.weight": w(NKV * HD, H),
            p + "self_attn.o_proj.weight": w(H, NH * HD, scale=0.1),
            p + "self_attn.q_norm.weight": norm(HD), p + "self_attn.k_norm.weight": norm(HD),
            p + "mlp.gate_proj.weight": w(I, H, scale=0.1), p + "mlp.up_proj.weight": w(I, H, scale=0.1),
            p + "mlp.down_proj.weight": w(H, I, scale=0.1),
        }
    return sd


def zlab_config(n_layers: int, nested: bool = False, block_size: int = 8, mask: int = 31,
                layer_ids=(0, 2), theta: float = 1e6, hidden: int = H, vocab: int = V) -> dict:
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "model_type": "qwen3",
        "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu",
        "hidden_size": hidden, "intermediate_size": I, "num_hidden_layers": n_layers,
        "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
        "rms_norm_eps": 1e-6, "vocab_size": vocab, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
        "num_target_layers": 4,
        "dflash_config": {"mask_token_id": mask, "target_layer_ids": list(layer_ids)},
    }
    if nested:
        cfg["dflash_config"]["block_size"] = block_size
        cfg["rope_parameters"] = {"rope_theta": theta, "rope_type": "default"}
        cfg["layer_types"] = ["full_attention"] * n_layers
    else:
        cfg["block_size"] = block_size
        cfg["rope_theta"] = theta
        cfg["rope_scaling"] = None
    return cfg


def write_ckpt(path, cfg: dict, state: dict | None):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    if state is not None:
        save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


TARGET = target_config("qwen3")  # hidden 64, vocab 32, 4 layers


# ------------------------------------------------------------------ loading

@pytest.mark.parametrize("n_layers", [1, 2])
def test_load_zlab_flat_layout(tmp_path, n_layers):
    state = zlab_state(n_layers)
    path = write_ckpt(tmp_path / "d", zlab_config(n_layers, block_size=8, theta=1e6), state)
    drafter, trained = load_drafter(str(path), TARGET)
    assert trained
    cfg = drafter.config
    assert (cfg.block_size, cfg.mask_token_id, cfg.target_layer_ids) == (8, 31, [0, 2])
    assert cfg.rope_theta == 1e6 and cfg.num_hidden_layers == n_layers and len(drafter.layers) == n_layers
    assert cfg.num_target_layers == 4 and cfg.head_dim == HD and cfg.rms_norm_eps == 1e-6
    loaded = drafter.state_dict()
    assert set(loaded) == set(state)
    for k, v in state.items():
        assert torch.equal(loaded[k], v), k


def test_load_zlab_bf16_checkpoint_casts(tmp_path):
    state = zlab_state(1, dtype=torch.bfloat16)
    path = write_ckpt(tmp_path / "d", zlab_config(1), state)
    drafter, _ = load_drafter(str(path), TARGET, dtype=torch.float32)
    for k, v in drafter.state_dict().items():
        assert v.dtype == torch.float32 and torch.equal(v, state[k].float()), k


def test_load_zlab_nested_layout(tmp_path):
    state = zlab_state(1)
    path = write_ckpt(tmp_path / "d", zlab_config(1, nested=True, block_size=4, theta=5e5), state)
    drafter, trained = load_drafter(str(path), TARGET)
    assert trained and drafter.block_size == 4 and drafter.config.rope_theta == 5e5
    assert drafter.config.layer_types == ["full_attention"]
    for k, v in state.items():
        assert torch.equal(drafter.state_dict()[k], v), k


def test_config_without_weights_gives_untrained_seeded_drafter(tmp_path):
    path = write_ckpt(tmp_path / "d", zlab_config(1), None)
    a, trained = load_drafter(str(path), TARGET, seed=3)
    b, _ = load_drafter(str(path), TARGET, seed=3)
    assert not trained
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_default_target_layer_ids():
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    assert default_target_layer_ids(30, 1) == [15]
    raw = zlab_config(5)
    del raw["dflash_config"]["target_layer_ids"]
    raw["num_target_layers"] = 36
    assert DFlashConfig.from_dict(raw).target_layer_ids == [1, 9, 17, 25, 33]


@pytest.mark.parametrize("change,names", [
    ("missing", ["layers.0.mlp.up_proj.weight", "hidden_norm.weight"]),
    ("unexpected", ["embed_tokens.weight", "layers.0.self_attn.rotary_emb.inv_freq"]),
    ("misshaped", ["fc.weight"]),
])
def test_bad_tensors_are_named(tmp_path, change, names):
    state = zlab_state(1)
    if change == "missing":
        for n in names:
            del state[n]
    elif change == "unexpected":
        for n in names:
            state[n] = torch.zeros(4)
    else:
        state["fc.weight"] = torch.zeros(H, 3 * H)
    path = write_ckpt(tmp_path / "d", zlab_config(1), state)
    with pytest.raises(GraftError) as e:
        load_drafter(str(path), TARGET)
    msg = str(e.value)
    assert change.replace("misshaped", "mis-shaped") in msg
    for n in names:
        assert n in msg
    if change == "misshaped":
        assert "(64, 192)" in msg and "(64, 128)" in msg


def test_several_problems_in_one_error(tmp_path):
    state = zlab_state(1)
    del state["norm.weight"]
    state["lm_head.weight"] = torch.zeros(V, H)
    path = write_ckpt(tmp_path / "d", zlab_config(1), state)
    with pytest.raises(GraftError, match=r"missing: norm\.weight; unexpected: lm_head\.weight"):
        load_drafter(str(path), TARGET)


@pytest.mark.parametrize("kwargs,target_kw,needle", [
    ({"hidden": 96}, {}, "hidden_size 96 != target hidden_size 64"),
    ({"vocab": 40}, {}, "vocab_size 40 != target vocab_size 32"),
    ({"layer_ids": (0, 4)}, {}, "target_layer_ids [4] out of range for a 4-layer target"),
    ({"layer_ids": (-1, 2)}, {}, "target_layer_ids [-1] out of range"),
    ({"mask": 32}, {}, "mask_token_id 32 out of range [0, 32)"),
    ({}, {"hidden_size": 128, "head_dim": 32}, "hidden_size 64 != target hidden_size 128"),
])
def test_pair_mismatch(tmp_path, kwargs, target_kw, needle):
    path = write_ckpt(tmp_path / "d", zlab_config(1, **kwargs), None)
    with pytest.raises(GraftError) as e:
        load_drafter(str(path), target_config("qwen3", **target_kw))
    assert needle in str(e.value) and "drafter/target mismatch" in str(e.value)


def test_check_pair_accepts_matching():
    check_pair(DFlashConfig.from_dict(zlab_config(1)), TARGET)


def test_unsupported_architecture_and_rope(tmp_path):
    raw = zlab_config(1)
    raw["architectures"] = ["EagleModel"]
    with pytest.raises(GraftError, match="EagleModel"):
        load_drafter(str(write_ckpt(tmp_path / "a", raw, None)), TARGET)
    raw = zlab_config(1, nested=True)
    raw["rope_parameters"]["rope_type"] = "yarn"
    with pytest.raises(GraftError, match="yarn"):
        load_drafter(str(write_ckpt(tmp_path / "b", raw, None)), TARGET)


def test_malformed_config(tmp_path):
    raw = zlab_config(1)
    del raw["hidden_size"]
    with pytest.raises(GraftError, match="malformed.*hidden_size"):
        load_drafter(str(write_ckpt(tmp_path / "a", raw, None)), TARGET)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text("{not json")
    with pytest.raises(GraftError, match="malformed"):
        load_drafter(str(tmp_path / "b"), TARGET)


def test_save_drafter_round_trip(tmp_path):
    d = tiny_drafter(seed=4, num_hidden_layers=2, block_size=6, rope_theta=777.0)
    save_drafter(d, tmp_path / "out")
    raw = json.loads((tmp_path / "out" / "config.json").read_text())
    # the z-lab layout
    assert raw["architectures"] == ["DFlashDraftModel"] and raw["model_type"] == "qwen3"
    assert raw["block_size"] == 6 and raw["num_target_layers"] == 4
    assert raw["dflash_config"] == {"mask_token_id": 31, "target_layer_ids": [0, 2]}
    from safetensors.torch import load_file
    names = set(load_file(str(tmp_path / "out" / "model.safetensors")))
    assert names == set(zlab_state(2))
    e, trained = load_drafter(str(tmp_path / "out"), TARGET)
    assert trained and e.config == d.config
    for (k, a), (k2, b) in zip(d.state_dict().items(), e.state_dict().items()):
        assert k == k2 and torch.equal(a, b), k


# ------------------------------------------------------------------ math

def rms(x, w, eps=1e-6):
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def rope(x, pos, theta):
    """x [n, heads, hd] rotated at integer positions pos [n] (rotate-half convention)."""
    hd = x.shape[-1]
    inv = torch.tensor([theta ** (-2 * i / hd) for i in range(hd // 2)], dtype=torch.float64)
    ang = pos[:, None].double() * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def reference_drafter(sd: dict, n_layers: int, noise, feats, theta: float):
    """Straightforward float64 DFlash forward, no cache: block queries, keys/values over cat(ctx, block)."""
    sd = {k: v.double() for k, v in sd.items()}
    x, f = noise[0].double(), feats[0].double()
    c, q = f.shape[0], x.shape[0]
    ctx = rms(f @ sd["fc.weight"].T, sd["hidden_norm.weight"])
    kpos, qpos = torch.arange(c + q), torch.arange(c, c + q)
    group = NH // NKV
    h = x
    for i in range(n_layers):
        p = f"layers.{i}."
        a = rms(h, sd[p + "input_layernorm.weight"])
        Q = rms((a @ sd[p + "self_attn.q_proj.weight"].T).view(q, NH, HD), sd[p + "self_attn.q_norm.weight"])
        kv_in = torch.cat([ctx, a], 0)
        K = (kv_in @ sd[p + "self_attn.k_proj.weight"].T).view(c + q, NKV, HD)
        K = rms(K, sd[p + "self_attn.k_norm.weight"])
        Vv = (kv_in @ sd[p + "self_attn.v_proj.weight"].T).view(c + q, NKV, HD)
        Q, K = rope(Q, qpos, theta), rope(K, kpos, theta)
        heads = []
        for hh in range(NH):
            kv = hh // group
            att = torch.softmax(Q[:, hh] @ K[:, kv].T / math.sqrt(HD), dim=-1)  # [q, c+q], no mask
            heads.append(att @ Vv[:, kv])
        h = h + torch.cat(heads, -1) @ sd[p + "self_attn.o_proj.weight"].T
        m = rms(h, sd[p + "post_attention_layernorm.weight"])
        gate = m @ sd[p + "mlp.gate_proj.weight"].T
        up = m @ sd[p + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ sd[p + "mlp.down_proj.weight"].T
    return rms(h, sd["norm.weight"])


def inputs(c: int, q: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, q, H, generator=g), torch.randn(1, c, 2 * H, generator=g)


@pytest.mark.parametrize("n_layers,nested,theta", [(1, False, 1e4), (2, False, 1e6), (1, True, 50.0)])
def test_forward_matches_reference(tmp_path, n_layers, nested, theta):
    state = zlab_state(n_layers, seed=n_layers)
    path = write_ckpt(tmp_path / "d", zlab_config(n_layers, nested=nested, theta=theta), state)
    drafter, _ = load_drafter(str(path), TARGET)
    noise, feats = inputs(c=11, q=8)
    got = drafter(noise, feats, start=11)[0]
    want = reference_drafter(state, n_layers, noise, feats, theta)
    assert torch.allclose(got.double(), want, atol=2e-5, rtol=1e-5), (got.double() - want).abs().max()
    # the test is sensitive to RoPE: a different theta gives a clearly different result
    other = reference_drafter(state, n_layers, noise, feats, theta * 7)
    assert (other - want).abs().max() > 1e-3


def test_forward_is_bidirectional_in_block():
    d = tiny_drafter(seed=2)
    noise, feats = inputs(c=5, q=6)
    base = d(noise, feats, start=5)
    noise2 = noise.clone()
    noise2[0, -1] += 1.0  # changing the last block position changes the first one's output
    assert (d(noise2, feats, start=5)[0, 0] - base[0, 0]).abs().max() > 1e-4


@pytest.mark.parametrize("splits", [(7, 13), (1, 2, 13), (4, 9, 10, 13)])
def test_cached_incremental_equals_uncached(tmp_path, splits):
    state = zlab_state(2, seed=9)
    drafter, _ = load_drafter(str(write_ckpt(tmp_path / "d", zlab_config(2), state)), TARGET)
    c = splits[-1]
    _, feats = inputs(c=c, q=1, seed=5)
    cache = DraftCache.empty(2)
    prev = 0
    for j, s in enumerate(splits):
        noise, _ = inputs(c=1, q=8, seed=20 + j)
        got = drafter(noise, feats[:, prev:s], start=s, cache=cache)
        full = drafter(noise, feats[:, :s], start=s)
        assert torch.allclose(got, full, atol=1e-5, rtol=1e-5), (s, (got - full).abs().max())
        # the cache covers exactly the context (block K/V discarded)
        assert cache.ctx_len == s
        assert all(k.shape == (1, NKV, s, HD) and v.shape == (1, NKV, s, HD)
                   for k, v in zip(cache.keys, cache.values))
        prev = s
    want = reference_drafter(state, 2, noise, feats, 1e6)
    assert torch.allclose(got.double(), want, atol=2e-5, rtol=1e-5)


def test_logits_use_target_head():
    d = tiny_drafter(seed=1)
    g = torch.Generator().manual_seed(0)
    hidden, head = torch.randn(3, H, generator=g), torch.randn(V, H, generator=g)
    assert torch.allclose(d.logits(hidden, head), hidden @ head.T, atol=1e-6)


def test_a_pair_swaps_its_drafter_keeping_the_target(tmp_path):
    """`Pair.with_drafter`: the same target object (not reloaded), the named drafter, its own weights id; the
    embedded names resolve to the shipped directories."""
    from tiny import tiny_target

    from graftlib.models.drafter import EMBEDDED_DFLASH2, EMBEDDED_DFLASH2_DIR, resolve_drafter, save_drafter
    from graftlib.models.pair import Pair

    target = tiny_target("qwen3")
    pair = Pair(target, None, tiny_drafter(seed=0), False, "tiny", "a")
    save_drafter(tiny_drafter(seed=1, selector_rank=4, selector_top_k=3), tmp_path / "d2")
    other = pair.with_drafter(str(tmp_path / "d2"))
    assert other.target is target and other.drafter_name == str(tmp_path / "d2") and other.drafter_trained
    assert other.drafter.candidate_selector is not None
    assert other.describe()["drafter_id"] != pair.describe()["drafter_id"]
    assert resolve_drafter(EMBEDDED_DFLASH2) == EMBEDDED_DFLASH2_DIR and EMBEDDED_DFLASH2_DIR.is_dir()
