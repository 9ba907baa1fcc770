"""Command-line options shared by every command that decodes: the model pair and the method's inputs.

`add_model_args` (--target, --drafter, --device, --device-map) feeds `graftlib.models.load_pair`;
`add_method_args` (--tdes, --beta) feeds `graftlib.methods.registry.make_parts`. They live here,
below the commands of `graftlib.training` and `graftlib.lab`, so every command takes them from
one place.
"""

import argparse

from graftlib.models.drafter import EMBEDDED_DRAFTER
from graftlib.models.target import EMBEDDED_TARGET


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=EMBEDDED_TARGET, help="embedded name, model directory or cached HF id")
    p.add_argument("--drafter", default=EMBEDDED_DRAFTER, help="'embedded' or a DFlash checkpoint directory")
    p.add_argument("--device", default=None, help="cpu | cuda[:i] (default: cuda if available)")
    p.add_argument("--device-map", default=None, help="e.g. 'auto' to spread a large target over GPUs")


def add_method_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tdes", default=None,
                   help="TDES scorer (FILE.safetensors or DIR) for ddtree+tdes / graft (default: the shipped one)")
    p.add_argument("--beta", type=float, default=None, help="TDES weight beta in eq. (4) (default: the scorer's)")
