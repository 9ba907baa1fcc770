"""Bad user input gives one clear GraftError (one line naming the problem), never a traceback."""

import importlib.util
import json

import pytest
from tiny import (
    MAX_POS,
    drafter_config,
    target_config,
    tiny_drafter,
    tiny_target,
    write_drafter_dir,
    write_target_dir,
)

from graftlib.core.errors import GraftError
from graftlib.methods.decoder import Decoder
from graftlib.methods.registry import MAX_BUDGET
from graftlib.models.drafter import DFlashConfig, check_pair, load_drafter
from graftlib.models.target import load_target

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair():
    return tiny_target("llama"), tiny_drafter()


def raises(fn, *needles):
    with pytest.raises(GraftError) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg, f"not one line: {msg!r}"
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    return msg


# ------------------------------------------------------------------ paths

def test_missing_target_path():
    raises(lambda: load_target("/nonexistent", device="cpu"), "'/nonexistent' not found")
    raises(lambda: load_target("./no/such/model", device="cpu"), "not found")


def test_target_path_problems(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"x")
    raises(lambda: load_target(str(tmp_path / "f.bin"), device="cpu"), "is a file")
    (tmp_path / "empty").mkdir()
    raises(lambda: load_target(str(tmp_path / "empty"), device="cpu"), "has no config.json")
    d = write_target_dir(tmp_path / "noweights")
    (d / "model.safetensors").unlink()
    raises(lambda: load_target(str(d), device="cpu"), "cannot load target", "model.safetensors")


def test_bad_device():
    raises(lambda: load_target("/nonexistent", device="tpu"), "'tpu'")


def test_target_dir_without_tokenizer(tmp_path):
    d = write_target_dir(tmp_path / "t", tokenizer=False)
    raises(lambda: load_target(str(d), device="cpu"), "tokenizer")


def test_target_dir_loads(tmp_path):
    model, tok = load_target(str(write_target_dir(tmp_path / "t", "qwen3")), device="cpu")
    assert model.config.vocab_size == 32 and tok.encode("ab", add_special_tokens=False) == [0, 1]


def test_drafter_path_problems(tmp_path):
    cfg = target_config()
    raises(lambda: load_drafter(str(tmp_path / "missing"), cfg), "does not exist")
    (tmp_path / "f").write_text("x")
    raises(lambda: load_drafter(str(tmp_path / "f"), cfg), "is a file")
    (tmp_path / "empty").mkdir()
    raises(lambda: load_drafter(str(tmp_path / "empty"), cfg), "no config.json")


# ------------------------------------------------------------------ drafter / target pairing

@pytest.mark.parametrize("draft_kw,target_kw,needles", [
    ({"hidden_size": 32, "head_dim": 8}, {}, ["drafter/target mismatch", "hidden_size 32", "hidden_size 64"]),
    ({"vocab_size": 50}, {}, ["drafter/target mismatch", "vocab_size 50", "vocab_size 32"]),
    ({"target_layer_ids": [1, 7]}, {}, ["target_layer_ids [7]", "4-layer target"]),
    ({"target_layer_ids": [0, 2]}, {"num_hidden_layers": 2}, ["target_layer_ids [2]", "2-layer target"]),
    ({"mask_token_id": 32}, {}, ["mask_token_id 32", "[0, 32)"]),
    ({"mask_token_id": -1}, {}, ["mask_token_id -1"]),
    ({"mask_token_id": None}, {}, ["mask_token_id None"]),
    ({"block_size": 1}, {}, ["block_size 1", ">= 2"]),
])
def test_pair_mismatch(tmp_path, draft_kw, target_kw, needles):
    dcfg = drafter_config(**draft_kw)
    tcfg = target_config(**target_kw)
    raises(lambda: check_pair(dcfg, tcfg), *needles)
    # and through load_drafter from a checkpoint directory (config only)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text(json.dumps(dcfg.to_dict()))
    raises(lambda: load_drafter(str(tmp_path / "d"), tcfg), *needles)


def test_pair_ok():
    check_pair(drafter_config(), target_config())
    assert DFlashConfig.from_dict(drafter_config().to_dict()) == drafter_config()


# ------------------------------------------------------------------ methods and budgets

@pytest.mark.parametrize("method,budget,needles", [
    ("ddtree", 0, ["budget must be a positive integer", "0"]),
    ("ddtree", -4, ["budget must be a positive integer", "-4"]),
    ("dflash", 0, ["budget must be a positive integer"]),
    ("ddtree", 2.5, ["budget must be a positive integer", "2.5"]),
    ("ddtree", MAX_BUDGET + 1, [f"budget {MAX_BUDGET + 1} too large", f"at most {MAX_BUDGET}"]),
    ("dflash", 8, ["dflash budget 8 too large", "block_size - 1 = 7"]),
    ("beam", 4, ["unknown method 'beam'", "ar, dflash, ddtree"]),
    ("", 4, ["unknown method ''"]),
])
def test_bad_method_or_budget(pair, method, budget, needles):
    target, drafter = pair
    raises(lambda: Decoder.for_method(target, drafter, method, budget), *needles)


def test_budget_limits_accepted(pair):
    target, drafter = pair
    Decoder.for_method(target, drafter, "ddtree", MAX_BUDGET)
    Decoder.for_method(target, drafter, "ddtree", 1)
    Decoder.for_method(target, drafter, "dflash", 7)
    Decoder.for_method(target, drafter, "ar", 0)  # AR ignores the budget


def test_speculative_needs_drafter(pair):
    raises(lambda: Decoder.for_method(pair[0], None, "ddtree", 8), "need a drafter")


# ------------------------------------------------------------------ prompts

def test_empty_prompt(pair):
    for method in ("ar", "ddtree"):
        dec = Decoder.for_method(*pair, method, 8)
        raises(lambda dec=dec: dec.decode([], 5), "empty prompt")


def test_max_new_tokens_positive(pair):
    raises(lambda: Decoder.for_method(*pair, "ddtree", 8).decode([1, 2], 0), "max_new_tokens must be >= 1")


def test_over_long_prompt(pair):
    target, drafter = pair
    ar = Decoder.for_method(target, None, "ar")  # no drafter: no draft slack
    spec = Decoder.for_method(target, drafter, "ddtree", 8)
    prompt = [3] * 500
    msg = raises(lambda: ar.decode(prompt, 13), "prompt too long", "500 prompt tokens",
                 f"{MAX_POS} positions")
    assert "13 new" in msg
    assert len(ar.decode(prompt, 12).tokens) == 12  # 500 + 12 = 512 fits exactly
    # speculative decoding keeps block_size (8) positions of slack for the last tree
    raises(lambda: spec.decode(prompt, 5), "prompt too long", "8 draft slack")
    assert len(spec.decode(prompt, 4).tokens) == 4
    raises(lambda: ar.decode([1] * (MAX_POS + 1), 1), "prompt too long")


# ------------------------------------------------------------------ CLI

HAVE_GENERATE = importlib.util.find_spec("graftlib.lab.run.generate") is not None


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    return str(write_target_dir(root / "target", "qwen3")), str(write_drafter_dir(root / "drafter"))


def cli(capsys, *argv):
    from graftlib.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.skipif(not HAVE_GENERATE, reason="graftlib.lab.run.generate (graft generate) not present")
@pytest.mark.parametrize("argv,needle", [
    (["--target", "/nonexistent"], "target '/nonexistent' not found"),
    (["--method", "beam"], "unknown method 'beam'"),
    (["--prompt", "   "], "empty prompt"),
    (["--drafter", "/no/such/drafter"], "drafter path /no/such/drafter does not exist"),
    (["--budget", "0"], "budget must be a positive integer"),
    (["--budget", str(MAX_BUDGET + 1)], "too large"),
    (["--method", "dflash", "--budget", "8"], "dflash budget 8 too large"),
    (["--max-new-tokens", "600"], "prompt too long"),
])
def test_cli_generate_errors(capsys, model_dirs, argv, needle):
    target, drafter = model_dirs
    base = {"--target": target, "--drafter": drafter, "--prompt": "hello there", "--device": "cpu"}
    for k, v in zip(argv[::2], argv[1::2]):
        base[k] = v
    code, out, err = cli(capsys, "generate", *[x for kv in base.items() for x in kv])
    assert code == 2, (out, err)
    lines = [ln for ln in err.splitlines() if ln.startswith("graft generate: error:")]
    assert len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err


@pytest.mark.skipif(not HAVE_GENERATE, reason="graftlib.lab.run.generate (graft generate) not present")
def test_cli_generate_runs_exactly(capsys, model_dirs):
    target, drafter = model_dirs
    texts = []
    for method, budget in (("ar", "1"), ("ddtree", "16"), ("dflash", "5")):
        code, out, err = cli(capsys, "generate", "--target", target, "--drafter", drafter,
                             "--prompt", "hello there", "--method", method, "--budget", budget,
                             "--max-new-tokens", "23", "--device", "cpu")
        assert code == 0, err
        assert f"method={method}" in out and "new_tokens=" in out
        texts.append(out.splitlines()[0])
    assert texts[0] == texts[1] == texts[2] and texts[0]
