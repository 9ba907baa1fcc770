"""Exactness of the AR-drafted methods on the embedded target: real prompts, greedy AR's tokens.

`eagle3` and `opt-tree` with a random-init SmolLM2-sized EAGLE-3 drafter (layers [2, 15, 28], an
8,192-id draft vocabulary, the target's embedding) written in the release's layout and loaded by
path, as `--eagle3 PATH` does: exactness must not depend on the drafter's quality. Any difference
from AR must be a genuine top-2 near-tie of the target's logits (graftlib.core.exactness).
"""

from dataclasses import replace

import pytest
from tiny import eagle3_config, random_eagle3, write_eagle3_dir

from graftlib.core.exactness import check_exact
from graftlib.methods.decoder import Decoder, drafter_for

pytestmark = pytest.mark.slow
PROMPTS = ["Give three tips for staying healthy.",
           "Write a python function to find the first repeated character in a given string."]
MAX_NEW = 16


def test_embedded_target_with_a_random_eagle3_drafter(embedded_pair, tmp_path):
    p = embedded_pair
    cfg = eagle3_config(p.target.config, draft_vocab=8192, layer_ids=(2, 15, 28), hidden_size=576,
                        intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3, head_dim=64)
    write_eagle3_dir(tmp_path / "e3", random_eagle3(cfg, p.target.config, std=0.05))
    pair = replace(p, eagle3_path=str(tmp_path / "e3"), _eagle3=None)
    ar = Decoder.for_method(p.target, None, "ar", eos_ids=p.eos_ids)
    prompts = [p.prompt_ids(text) for text in PROMPTS]
    refs = [ar.decode(ids, MAX_NEW).tokens for ids in prompts]
    for method, budget in (("eagle3", 32), ("opt-tree", 32)):
        dec = Decoder.for_method(p.target, drafter_for(pair, method), method, budget, eos_ids=p.eos_ids)
        for ids, ref in zip(prompts, refs):
            res = dec.decode(ids, MAX_NEW)
            check_exact(p.target, ids, ref, res.tokens)
            assert all(1 <= r.nodes <= budget for r in res.rounds)
        if method == "eagle3":
            assert {len(r.t_draft_steps) for r in res.rounds} == {8}
