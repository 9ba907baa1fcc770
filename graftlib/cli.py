"""The `graft` console command.

Each subcommand lives in the module that owns the concept and registers itself through an
`add_parser(subparsers)` function that sets `func` (a callable taking the parsed args). This
file only wires them together and turns `GraftError` into one clear line and exit status 2.
"""

import argparse
import importlib
import sys

from graftlib.errors import GraftError

# (subcommand module, in the order shown by --help)
COMMAND_MODULES = ("graftlib.generate", "graftlib.bench", "graftlib.costs", "graftlib.calibrate", "graftlib.replay", "graftlib.data", "graftlib.drafter_data",
                   "graftlib.drafter_train", "graftlib.traces", "graftlib.tdes", "graftlib.workbook")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graft", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
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
