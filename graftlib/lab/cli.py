"""The `graft` console command.

Each subcommand lives in the module that owns the concept and registers itself through an
`add_parser(subparsers)` function that sets `func` (a callable taking the parsed args). This
file only wires them together (imported statically, so the layering test sees them) and turns `GraftError` into one clear line and exit status 2.
"""

import argparse
import sys

from graftlib.core.errors import GraftError
from graftlib.data import prompts
from graftlib.lab import (
    archive,
    bench,
    costs,
    device_check,
    generate,
    host_overhead,
    machine_costs,
    modeled_report,
    paper_costs,
    strength,
    workbook,
)
from graftlib.training import (
    calibrate,
    corpus,
    drafter_data,
    drafter_pipeline,
    drafter_train,
    eagle3_train,
    prepare,
    replay,
    ship,
    tdes_train,
    traces,
)

# subcommand modules, in the order shown by --help
COMMAND_MODULES = (generate, bench, archive, modeled_report, costs, machine_costs, paper_costs, strength, host_overhead, device_check, prepare, ship, calibrate,
                   replay,
                   prompts, drafter_data, corpus, drafter_train, drafter_pipeline, eagle3_train, traces, tdes_train, workbook)


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
