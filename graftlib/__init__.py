"""graftlib: exact speculative decoding with DFlash drafters and DDTree / GRAFT draft trees.

Layers, lowest first; a module imports only from its own layer or lower ones, and no import
cycle exists (`tests/test_layers.py` reads every import with `ast` and checks both):
  core      the exact core: trees, builders, verify, KV cache, timing, the decode loop
  models    target, DFlash drafter, the pair, the chat template
  data      offline prompt sets, splits and pools
  methods   the method registry (name -> builder + controller), TDES scorer, SABA controller, CaDDTree,
            and the check that a fitted scorer or calibration is this pair's
  inputs    what a run is given beside the method: command-line options, artifact folders, cost profiles
  training  drafter data and training, traces, TDES training, replay, SABA fitting and calibration
  lab       report (records -> tables and claims), run (benches, sweeps, commands), workbook (notebooks)
The `graft` command (`graftlib.cli`) sits above them all.
This module is the public face above them all. Importing it is cheap: the names below are
loaded on first use.
"""

from graftlib.core.version import __version__

LAYERS = ("core", "models", "data", "methods", "inputs", "training", "lab")
__all__ = [
    "LAYERS",
    "METHODS",
    "DecodeResult",
    "Decoder",
    "GraftError",
    "MethodInputs",
    "Pair",
    "__version__",
    "load_pair",
    "make_parts",
]


def __getattr__(name: str):
    """The public names (`__all__`), imported on first use."""
    if name not in __all__:
        raise AttributeError(f"module 'graftlib' has no attribute {name!r}")
    from graftlib.core import decode, errors
    from graftlib.methods import decoder, registry
    from graftlib.models import pair

    face = {"DecodeResult": decode.DecodeResult, "Decoder": decoder.Decoder, "GraftError": errors.GraftError,
            "METHODS": registry.METHODS, "MethodInputs": registry.MethodInputs, "Pair": pair.Pair,
            "load_pair": pair.load_pair, "make_parts": registry.make_parts}
    return face[name]
