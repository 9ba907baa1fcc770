"""User-facing errors.

Every check of user input (paths, model/drafter pairing, budgets, prompts, datasets, method
names, notebook parameters) raises `GraftError` with one line that names the problem and, when
there is one, the fix. The CLI prints that line and exits 2; notebooks let it surface in the
first cell. Internal invariants use plain `assert`/`RuntimeError`, never `GraftError`.
"""


class GraftError(ValueError):
    """A problem with the user's input or environment, explained in one line."""


def require(ok: bool, message: str) -> None:
    """Raise `GraftError(message)` unless `ok`."""
    if not ok:
        raise GraftError(message)
