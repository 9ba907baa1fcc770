"""Command-line options shared by every command that decodes: the model pair and the method's inputs.

`add_model_args` (--target, --drafter, --device, --device-map) feeds `graftlib.models.load_pair`, and
`add_ar_drafter_arg` (--eagle3) its EAGLE-3 drafter, for commands that run AR-drafted methods;
`add_method_args` (--tdes, --beta, --artifacts, --saba, --cost-profile) feeds `graftlib.methods.registry.make_parts`
through `method_inputs` (the scorer path and the SABA calibration); `add_sampling_args`
(--temperature, --top-p, --seed) gives `sampling_from_args`, the decode's `Sampling` (T = 0: greedy). They live here,
below the commands of `graftlib.training` and `graftlib.lab`, so every command takes them from
one place.
"""

import argparse

from graftlib.core.paths import portable
from graftlib.core.sampling import Sampling
from graftlib.inputs.artifacts import artifact_inputs
from graftlib.inputs.cost_profile import CostProfile, with_costs
from graftlib.methods.registry import MethodInputs
from graftlib.methods.saba_params import SabaParams, default_params
from graftlib.models.drafter import EMBEDDED_DRAFTER
from graftlib.models.eagle3 import EMBEDDED_EAGLE3_DIR
from graftlib.models.target import DTYPES, EMBEDDED_TARGET


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=EMBEDDED_TARGET, help="embedded name, model directory or cached HF id")
    p.add_argument("--drafter", default=EMBEDDED_DRAFTER, help="'embedded', 'embedded-dflash2' (its drafts with a "
                                                               "DFlash 2 "
                   "selector) or a DFlash / DFlash 2 checkpoint directory")
    p.add_argument("--device", default=None, help="cpu | cuda[:i] (default: cuda if available)")
    p.add_argument("--device-map", default=None, help="e.g. 'auto' to spread a large target over GPUs")
    p.add_argument("--dtype", default=None, choices=list(DTYPES),
                   help="the pair's dtype (default: float32 on a CPU, bfloat16 on CUDA); a greedy decode in "
                   "bfloat16 / float16 may leave AR's tokens at certified near-ties only (graftlib.core.exactness)")


def add_ar_drafter_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--eagle3", default=None, metavar="PATH",
                   help="EAGLE-3 drafter directory for eagle3 / opt-tree (default: the embedded target's, "
                   f"{portable(EMBEDDED_EAGLE3_DIR)})")


def add_method_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tdes", default=None,
                   help="TDES scorer (FILE.safetensors or DIR) for ddtree+tdes / graft (default: the shipped one)")
    p.add_argument("--beta", type=float, default=None, help="TDES weight beta in eq. (4) (default: the scorer's)")
    p.add_argument("--artifacts", default=None, metavar="DIR",
                   help="a `graft prepare` folder: its TDES scorer and SABA calibration, fitted for this pair "
                   "(default: the shipped ones, fitted for the embedded pair on a 2-core CPU)")
    p.add_argument("--saba", default=None, metavar="FILE",
                   help="SABA calibration JSON for ddtree+saba / graft / caddtree (default: --artifacts's, else the "
                   "shipped one; the paper's grid: graftlib/assets/saba/paper-a100.json)")
    p.add_argument("--predictor", default=None, metavar="FILE",
                   help="budget predictor JSON for graft+pred (`graft fit-predictor`; default: the shipped one, "
                   "graftlib/assets/predictors/default.json)")
    p.add_argument("--cost-profile", default=None, metavar="FILE",
                   help="cost profile JSON (e.g. graftlib/assets/costs/paper-a100.json): the adaptive methods decide "
                   "with its costs (`cost_profile.with_costs`) and the modeled columns are priced by it (default: "
                   "the shipped CPU profile, the shipped calibration's own costs)")


def method_inputs(args: argparse.Namespace) -> MethodInputs:
    """The methods' inputs (TDES scorer path and beta, SABA calibration, budget predictor) from --tdes / --beta /
    --artifacts / --saba / --predictor (None each: the shipped ones), the calibration deciding under --cost-profile
    when one is given."""
    tdes, saba = artifact_inputs(args.artifacts, args.tdes)
    if args.saba:
        saba = SabaParams.load(args.saba)
    if args.cost_profile:
        saba = with_costs(saba or default_params(), CostProfile.load(args.cost_profile))
    return MethodInputs(tdes, getattr(args, "beta", None), saba, getattr(args, "predictor", None))


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    d = Sampling()
    p.add_argument("--temperature", type=float, default=d.temperature,
                   help="sampling temperature (default 0: greedy, every method exact against AR)")
    p.add_argument("--top-p", type=float, default=d.top_p, help=f"nucleus sampling mass at T > 0 (default {d.top_p})")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the decode's generator at T > 0 (default "
                                                            f"{d.seed})")


def sampling_from_args(args: argparse.Namespace) -> Sampling:
    return Sampling(args.temperature, args.top_p, seed=args.seed).check()
