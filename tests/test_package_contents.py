"""What the installed package holds: what decoding and the notebooks need (drafters, scorers,
calibrations, cost profiles), not the drafter-training corpora, which live in the repository's
data/corpus and are read by the training commands from there."""

from graftlib.core.paths import ASSETS_DIR, PROJECT_DIR
from graftlib.training.drafter.data.corpus import CORPUS_ROOT, shipped_corpora


def test_the_package_ships_no_training_corpus():
    assert not (ASSETS_DIR / "corpus").exists()
    assert CORPUS_ROOT == PROJECT_DIR / "data" / "corpus" and not CORPUS_ROOT.is_relative_to(ASSETS_DIR)
    assert {p.name for p in shipped_corpora()} >= {"smollm2-135m", "smollm2-135m-tasks", "smollm2-135m-regular"}
    assert not list(ASSETS_DIR.rglob("*.tokens.safetensors"))


def test_the_package_assets_are_small():
    total = sum(p.stat().st_size for p in ASSETS_DIR.rglob("*") if p.is_file())
    assert total < 40 * 2 ** 20, f"graftlib/assets holds {total / 2 ** 20:.1f} MiB"
