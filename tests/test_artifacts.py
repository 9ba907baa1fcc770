"""Artifacts name the pair and hardware they were fitted for, and using them elsewhere fails or warns.

Fingerprints do not depend on dtype; the shipped scorers and calibration name the embedded pair
and this project's 2-core CPU, and run silent for that pair on that machine (a warning where the
hardware differs); a tiny random pair gets a GraftError naming both pairs and `graft prepare`; a
calibration of the same pair from another machine warns with the command; a hand-made artifact
(no pair) is not checked.
"""

import json
import warnings
from dataclasses import replace

import pytest
import torch
from tiny import tiny_drafter, tiny_target

from graftlib.core.errors import GraftError
from graftlib.core.hardware import hardware_id
from graftlib.inputs.artifacts import ShippedAssets, artifact_inputs
from graftlib.methods.decoder import Decoder
from graftlib.methods.fitted import HardwareMismatchWarning, prepare_command
from graftlib.methods.registry import MethodInputs
from graftlib.methods.saba_params import DEFAULT_PATH, SabaParams, default_params
from graftlib.methods.tdes import DEFAULT_PATH as TDES_PATH
from graftlib.methods.tdes import TDESNet, TDESScorer, scorer_config
from graftlib.models.pair import Pair, fingerprint, identify

FITTED = [("ddtree+tdes", 8), ("ddtree+saba", 16), ("graft", 16), ("caddtree", 16)]


def test_fingerprint_ignores_dtype_and_names_the_weights():
    a, b = tiny_target("qwen3", seed=1), tiny_target("qwen3", seed=2)
    assert fingerprint(a) == fingerprint(tiny_target("qwen3", seed=1).to(torch.bfloat16))
    assert fingerprint(a) != fingerprint(b)
    d = tiny_drafter(seed=1)
    assert identify(a, d).same(identify(a.to(torch.bfloat16), tiny_drafter(seed=1).to(torch.bfloat16)))
    assert not identify(a, d).same(identify(a, tiny_drafter(seed=2)))


def test_hardware_id_names_threads_and_chip():
    hw = hardware_id("cpu")
    assert hw.startswith(f"cpu:{torch.get_num_threads()}-threads:") and len(hw.split(":", 2)[2]) > 0


def test_shipped_artifacts_name_the_embedded_pair_and_run_silent_here(embedded_pair):
    p = embedded_pair
    ident = p.identity()
    # fitted together (`make artifacts`) on one 2-thread CPU; which chip this workplace's machine has varies
    fitted = SabaParams.load(DEFAULT_PATH).meta["hardware"]
    assert fitted.startswith("cpu:2-threads:")
    for config in (scorer_config(TDES_PATH), scorer_config(ShippedAssets().tdes("gsm8k")),
                   SabaParams.load(DEFAULT_PATH).meta):
        assert config["pair"] == ident.to_dict() and config["hardware"] == fitted
    here = hardware_id(p.device)
    for method, budget in FITTED:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            Decoder.for_method(p.target, p.drafter, method, budget, eos_ids=p.eos_ids, pair=ident)
        hw = [w for w in caught if issubclass(w.category, HardwareMismatchWarning)]
        # silent on the machine the calibration was fitted on; elsewhere SABA's methods warn, TDES alone does not
        expect = here != fitted and method != "ddtree+tdes"
        assert bool(hw) == expect, (here, method, [str(w.message) for w in caught])


@pytest.fixture(scope="module")
def tiny(one_thread):
    target, drafter = tiny_target("qwen3", seed=1), tiny_drafter(seed=1)
    return Pair(target, None, drafter, False, "/models/tiny-qwen3", "/drafters/tiny-dflash")


@pytest.mark.parametrize("method,budget", FITTED)
def test_another_pairs_artifacts_are_refused(tiny, method, budget, monkeypatch):
    monkeypatch.delenv("GRAFT_SABA_PARAMS", raising=False)
    monkeypatch.delenv("GRAFT_TDES", raising=False)
    with pytest.raises(GraftError) as e:
        Decoder.for_method(tiny.target, tiny.drafter, method, budget, pair=tiny.identity())
    msg = str(e.value)
    assert "smollm2-135m" in msg and "/models/tiny-qwen3" in msg and "not for this pair" in msg
    assert "graft prepare --target /models/tiny-qwen3 --drafter /drafters/tiny-dflash" in msg
    assert "--artifacts artifacts/tiny-qwen3--tiny-dflash" in msg
    with pytest.raises(GraftError, match="not for this pair"):  # without a Pair: the models' fingerprints
        Decoder.for_method(tiny.target, tiny.drafter, method, budget)


def test_same_pair_other_hardware_warns_for_saba_only(tiny, tmp_path):
    ident = tiny.identity()
    elsewhere = replace(SabaParams(), meta={"pair": ident.to_dict(), "hardware": "cuda:Some GPU"})
    with pytest.warns(HardwareMismatchWarning, match="fitted on cuda:Some GPU") as caught:
        Decoder.for_method(tiny.target, tiny.drafter, "ddtree+saba", 8, pair=ident, inputs=MethodInputs(saba=elsewhere))
    assert prepare_command(ident, hardware_id("cpu")) in str(caught[0].message)
    here = replace(elsewhere, meta={"pair": ident.to_dict(), "hardware": hardware_id(tiny.target.device)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Decoder.for_method(tiny.target, tiny.drafter, "ddtree+saba", 8, pair=ident, inputs=MethodInputs(saba=here))
        # a scorer of this pair from another machine is this pair's scorer: no warning
        net = TDESNet(tiny.target.get_input_embeddings().weight, 4, tiny.drafter.block_size - 1)
        path = TDESScorer.from_net(net, 0.5, {"pair": ident.to_dict(), "hardware": "cuda:Some GPU"}).save(
            tmp_path / "s.safetensors", net)
        Decoder.for_method(tiny.target, tiny.drafter, "ddtree+tdes", 8, pair=ident, inputs=MethodInputs(tdes=str(path)))
        Decoder.for_method(tiny.target, tiny.drafter, "ddtree+saba", 8,
                           inputs=MethodInputs(saba=SabaParams()))  # records no pair


def test_artifact_inputs(tmp_path):
    assert artifact_inputs(None, "x.safetensors") == ("x.safetensors", None)
    with pytest.raises(GraftError, match="does not exist"):
        artifact_inputs(tmp_path / "none")
    with pytest.raises(GraftError, match="holds neither"):
        artifact_inputs(tmp_path)
    default_params().save(tmp_path / "saba.json")
    tdes, saba = artifact_inputs(tmp_path)
    assert tdes is None and saba.id == default_params().id
    bad = json.loads((tmp_path / "saba.json").read_text())
    bad["meta"]["pair"] = {"target": "x"}
    (tmp_path / "saba.json").write_text(json.dumps(bad))
    with pytest.raises(GraftError, match="'pair' must be an object"):
        Decoder.for_method(tiny_target("qwen3"), tiny_drafter(), "ddtree+saba", 8,
                           inputs=MethodInputs(saba=artifact_inputs(tmp_path)[1]))


def test_a_calibration_fitted_in_another_dtype_warns_like_another_machines(tiny):
    """The hardware string carries a dtype that is not the device's default, so a float32 calibration
    used by a bfloat16 pair on the same CPU warns, and one fitted in bfloat16 there does not."""
    ident = tiny.identity()
    assert hardware_id("cpu", torch.float32) == hardware_id("cpu") and hardware_id("cpu",
                                                                                   torch.bfloat16).endswith(":bfloat16")
    fp32 = replace(SabaParams(), meta={"pair": ident.to_dict(), "hardware": hardware_id("cpu")})
    target16, drafter16 = tiny.target.to(torch.bfloat16), tiny.drafter.to(torch.bfloat16)
    try:
        with pytest.warns(HardwareMismatchWarning, match="this run is on cpu:.*:bfloat16"):
            Decoder.for_method(target16, drafter16, "ddtree+saba", 8, pair=ident, inputs=MethodInputs(saba=fp32))
        bf16 = replace(fp32, meta={**fp32.meta, "hardware": hardware_id("cpu", torch.bfloat16)})
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            Decoder.for_method(target16, drafter16, "ddtree+saba", 8, pair=ident, inputs=MethodInputs(saba=bf16))
    finally:
        tiny.target.float(), tiny.drafter.float()
