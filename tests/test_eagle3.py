"""EAGLE-3 drafter: a tiny random checkpoint in the public layout (config.json + safetensors with the
release's tensor names) loads by path, strictly, and its forward, with and without its KV cache and
under a tree mask, matches an independent float64 re-implementation written from the architecture."""

import json
import math

import pytest
import torch
from safetensors.torch import save_file

from graftlib.core.errors import GraftError
from graftlib.models.eagle3 import Eagle3Cache, load_eagle3

H, TH, HEADS, KV, HD, FF, V, DV = 32, 24, 4, 2, 8, 48, 40, 16
CONFIG = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
          "target_hidden_size": TH, "intermediate_size": FF, "num_attention_heads": HEADS, "num_key_value_heads": KV,
          "head_dim": HD, "vocab_size": V, "draft_vocab_size": DV, "rms_norm_eps": 1e-5, "rope_theta": 500.0,
          "max_position_embeddings": 256, "hidden_act": "silu", "num_hidden_layers": 1, "tie_word_embeddings": False}


def random_state(seed=0, embed=True) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.3

    s = {"fc.weight": w(H, 3 * TH), "norm.weight": 1 + w(H), "lm_head.weight": w(DV, H),
         "midlayer.self_attn.q_proj.weight": w(HEADS * HD, 2 * H), "midlayer.self_attn.k_proj.weight": w(KV * HD,
                                                                                                         2 * H),
         "midlayer.self_attn.v_proj.weight": w(KV * HD, 2 * H), "midlayer.self_attn.o_proj.weight": w(H, HEADS * HD),
         "midlayer.mlp.gate_proj.weight": w(FF, H), "midlayer.mlp.up_proj.weight": w(FF, H),
         "midlayer.mlp.down_proj.weight": w(H, FF), "midlayer.hidden_norm.weight": 1 + w(H),
         "midlayer.input_layernorm.weight": 1 + w(H), "midlayer.post_attention_layernorm.weight": 1 + w(H),
         "d2t": torch.randint(0, V - DV, (DV,), generator=g), "t2d": torch.zeros(V, dtype=torch.bool)}
    if embed:
        s["embed_tokens.weight"] = w(V, H)
    return s


def write_ckpt(path, state, config=CONFIG):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in state.items()}, path / "model.safetensors")
    return path


def reference(s: dict, ids: torch.Tensor, feats: torch.Tensor, positions: list[int], allowed: torch.Tensor):
    """float64, from the architecture: fc -> [input_layernorm(emb), hidden_norm(h)] -> attention
    (RoPE, GQA, `allowed` [n, n]) -> residual on h -> post-attention norm -> SiLU MLP -> residual."""
    d = {k: v.double() for k, v in s.items() if v.is_floating_point()}

    def rms(x, wt):
        return wt * x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)

    h = feats.double() @ d["fc.weight"].T if feats.shape[-1] != H else feats.double()
    e = d["embed_tokens.weight"][ids]
    x = torch.cat([rms(e, d["midlayer.input_layernorm.weight"]), rms(h, d["midlayer.hidden_norm.weight"])], -1)
    n = x.shape[0]
    q = (x @ d["midlayer.self_attn.q_proj.weight"].T).view(n, HEADS, HD)
    k = (x @ d["midlayer.self_attn.k_proj.weight"].T).view(n, KV, HD)
    v = (x @ d["midlayer.self_attn.v_proj.weight"].T).view(n, KV, HD)
    inv = 1.0 / (500.0 ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD))
    ang = torch.tensor(positions, dtype=torch.float64)[:, None] * inv
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]

    def rot(t):
        return t * cos + torch.cat([-t[..., HD // 2:], t[..., :HD // 2]], -1) * sin

    q, k = rot(q), rot(k)
    k, v = k.repeat_interleave(HEADS // KV, 1), v.repeat_interleave(HEADS // KV, 1)
    att = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(HD)
    att = att.masked_fill(~allowed[None], float("-inf")).softmax(-1)
    o = torch.einsum("hqk,khd->qhd", att, v).reshape(n, HEADS * HD) @ d["midlayer.self_attn.o_proj.weight"].T
    h = h + o
    m = rms(h, d["midlayer.post_attention_layernorm.weight"])
    gate, up = m @ d["midlayer.mlp.gate_proj.weight"].T, m @ d["midlayer.mlp.up_proj.weight"].T
    mlp = torch.nn.functional.silu(gate) * up
    return h + mlp @ d["midlayer.mlp.down_proj.weight"].T


def test_forward_matches_float64_reference_with_cache_and_tree_mask(tmp_path):
    state = random_state(1)
    model = load_eagle3(write_ckpt(tmp_path / "e3", state))
    g = torch.Generator().manual_seed(2)
    n, split = 7, 4
    ids = torch.randint(0, V, (n,), generator=g)
    feats = torch.randn(n, 3 * TH, generator=g)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    want = reference(state, ids, feats, list(range(n)), causal)
    cache = Eagle3Cache()
    with torch.no_grad():
        a = model(ids[None, :split], feats[None, :split], torch.arange(split), cache)[0]
        b = model(ids[None, split:], feats[None, split:], torch.arange(split, n), cache)[0]
    got = torch.cat([a, b]).double()
    assert (got - want).abs().max() < 1e-4, (got - want).abs().max()
    assert cache.length == n
    # a depth step: the drafter's own outputs (hidden wide, no fc) as tree nodes under a tree mask
    nodes = torch.tensor([3, 9, 5])
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)  # nodes 1 and 2 are siblings
    own = got[[n - 1, n - 1, n - 1]].float()
    with torch.no_grad():
        step = model(nodes[None], own[None], torch.tensor([n, n + 1, n + 1]), cache, extra_mask=tree)[0]
    allowed = torch.zeros(n + 3, n + 3, dtype=torch.bool)
    allowed[:n, :n] = causal
    allowed[n:, :n] = True
    allowed[n:, n:] = tree
    # reference over the whole sequence: positions of the prefix, then the nodes'
    full_ids = torch.cat([ids, nodes])
    pre = torch.cat([feats.double() @ state["fc.weight"].double().T, own.double()])
    ref = reference(state, full_ids, pre, list(range(n)) + [n, n + 1, n + 1], allowed)[n:]
    assert (step.double() - ref).abs().max() < 1e-4
    logits = model.logits(step)
    assert logits.shape == (3, DV)
    top = logits.argmax(-1)
    assert torch.equal(model.target_ids(top), top + state["d2t"][top])


def test_loading_is_strict_and_names_the_problem(tmp_path):
    state = random_state(0)
    bad = dict(state)
    bad.pop("midlayer.mlp.up_proj.weight")
    with pytest.raises(GraftError, match=r"missing \['midlayer.mlp.up_proj.weight'\]"):
        load_eagle3(write_ckpt(tmp_path / "a", bad))
    with pytest.raises(GraftError, match="unexpected"):
        load_eagle3(write_ckpt(tmp_path / "b", {**state, "midlayer.extra.weight": torch.zeros(2)}))
    with pytest.raises(GraftError, match="mis-shaped"):
        load_eagle3(write_ckpt(tmp_path / "c", {**state, "fc.weight": torch.zeros(H, 2 * TH)}))
    no_embed = {k: v for k, v in state.items() if k != "embed_tokens.weight"}
    with pytest.raises(GraftError, match="pass the target's"):
        load_eagle3(write_ckpt(tmp_path / "d", no_embed))
    model = load_eagle3(tmp_path / "d", target_embed=state["embed_tokens.weight"])
    assert torch.equal(model.embed_tokens.weight, state["embed_tokens.weight"])
    with pytest.raises(GraftError, match="not an EAGLE-3"):
        load_eagle3(write_ckpt(tmp_path / "e", state, {**CONFIG, "architectures": ["DFlashDraftModel"]}))
    with pytest.raises(GraftError, match="not a directory"):
        load_eagle3(tmp_path / "nowhere")
