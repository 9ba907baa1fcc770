"""The `graft` console command (`python -m graftlib` too).

Each subcommand lives in the module that owns the concept and registers itself through an
`add_parser(subparsers)` function that sets `func` (a callable taking the parsed args). This file only
wires them together (imported statically, so the layering test sees them) and turns `GraftError` into one
clear line and exit status 2. A new command: an `add_parser` in its module, and the module listed here.
"""

import argparse
import sys

from graftlib.core.errors import GraftError
from graftlib.data import command
from graftlib.lab.report import archive, paper_costs
from graftlib.lab.run import bench, device_check, generate, predictor_fit, strength
from graftlib.lab.run.costs import cost_curves, host_overhead, machine_costs, modeled_check
from graftlib.lab.workbook import readme_results, runner
from graftlib.training import prepare, ship
from graftlib.training.drafter import dflash_train, eagle3_train, pipeline
from graftlib.training.drafter.data import corpus, target_data
from graftlib.training.graft import calibrate, replay, tdes_train, traces

# subcommand modules, in the order shown by --help
COMMAND_MODULES = (generate, bench, archive, modeled_check, cost_curves, machine_costs, paper_costs, strength,
                   host_overhead, device_check, prepare, ship, calibrate, replay, predictor_fit, command, target_data,
                   corpus, dflash_train, pipeline, eagle3_train, traces, tdes_train, runner, readme_results)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graft", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except GraftError as e:
        print(f"graft {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"graft {args.command}: interrupted (completed records are kept)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
