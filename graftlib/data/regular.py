"""A generated prompt set of highly regular text: counting, repetition, enumerations, tables, patterns.

Why. A drafter learns what its data shows. The shipped prompt sets (benchmarks and ShareGPT) hold
little text whose continuation is a copy or a count of the context, and a drafter trained on them
accepts about one token a round on "hello, hello, hello, ..." although the target's next tokens are
trivially predictable there. This set gives both a training pool of such text
(`prompts.pool("regular")`) and held-out prompts to measure it (`prompts.load_items("regular")`,
`graft bench --task regular`).

Construction (deterministic, no files, no network): `TEMPLATES` are functions of a `random.Random`
that return one user message; `_generate` draws `N_DRAWS` messages round-robin over the templates
with `random.Random(SEED)`, keeps each distinct message once (by `prompts.content_hash`), then the
order is shuffled like every other set (`random.Random(0)`) and split: eval = the first `EVAL_COUNT`,
val = the next `VAL_COUNT`, train = the rest. No message is in two splits (distinct by hash), which
tests check. The messages are in the target's own words only through its responses: the set stores
prompts, never answers.

Invariant: adding a template or changing a parameter range changes the set (and its uids); the
uids are `regular/<template name>-<index of first draw>`, stable for a given `SEED` and template list.
"""

from __future__ import annotations

import random
from collections.abc import Callable

SEED = 20261202
N_DRAWS = 4000
EVAL_COUNT = 48
VAL_COUNT = 16

WORDS = ("hello", "yes", "banana", "ok", "spam", "echo", "tick", "blue", "data", "go", "ping", "la", "moo", "cat",
         "thanks", "apple", "zero", "beep", "hi", "test")
PHRASES = ("I will not talk in class.", "All work and no play.", "The quick brown fox jumps over the lazy dog.",
           "Hello, world!", "Practice makes perfect.", "Keep calm and carry on.", "Row, row, row your boat.",
           "Good morning!", "This is a test.", "One step at a time.")
THINGS = ("even numbers", "odd numbers", "multiples of 3", "multiples of 5", "square numbers", "powers of 2",
          "multiples of 10", "multiples of 7")
SEPARATORS = (("commas", ", "), ("spaces", " "), ("dashes", " - "), ("new lines", "\n"))
LANG_ITEMS = ("days of the week", "months of the year", "planets of the solar system", "letters of the alphabet",
              "colors of the rainbow", "numbers from one to twenty in words")


def _count(r: random.Random) -> str:
    a = r.choice((0, 1, 1, 1, 5, 10, 20, 50, 100))
    b = a + r.randint(15, 80)
    sep = r.choice(SEPARATORS)[0]
    return r.choice((f"Count from {a} to {b}, separated by {sep}.", f"Write the numbers from {a} to {b}.",
                     f"Please list every integer from {a} through {b}, separated by {sep}."))


def _countdown(r: random.Random) -> str:
    b = r.randint(20, 90)
    return r.choice((f"Count down from {b} to 1.", f"Write the numbers from {b} down to 0, separated by commas."))


def _repeat_word(r: random.Random) -> str:
    w, n = r.choice(WORDS), r.randint(8, 40)
    return r.choice((f"Write the word '{w}' {n} times.", f"Repeat the word \"{w}\" {n} times, separated by commas.",
                     f"Say {w} {n} times."))


def _repeat_phrase(r: random.Random) -> str:
    p, n = r.choice(PHRASES), r.randint(5, 15)
    return r.choice((f"Repeat the sentence '{p}' {n} times, one per line.", f"Write \"{p}\" {n} times.",
                     f"Copy this line {n} times: {p}"))


def _sequence(r: random.Random) -> str:
    t, n = r.choice(THINGS), r.randint(10, 40)
    return r.choice((f"List the first {n} {t}.", f"Write the first {n} {t}, separated by commas.",
                     f"What are the first {n} {t}? List them all."))


def _times_table(r: random.Random) -> str:
    k, m = r.randint(2, 19), r.choice((10, 12, 15, 20))
    return r.choice((f"Write the multiplication table of {k} from 1 to {m}.",
                     f"Print the {k} times table up to {k} x {m}, one line per product.",
                     f"Write out {k} x 1 through {k} x {m} with their results."))


def _enumerate(r: random.Random) -> str:
    a, b = r.sample(LANG_ITEMS, 2)
    return r.choice((f"List the {a}.", f"List the {a}, then the {b}.", f"Write the {a} in reverse order.",
                     f"Write the {a} as a numbered list."))


def _alphabet(r: random.Random) -> str:
    case, sep = r.choice(("uppercase", "lowercase")), r.choice(SEPARATORS)[0]
    return r.choice((f"Write the English alphabet in {case}, separated by {sep}.",
                     f"Write each letter of the alphabet in {case} followed by its position, like 'A = 1'.",
                     (f"Spell the word '{r.choice(WORDS + ('encyclopedia', 'supercalifragilistic'))}' letter by "
                     f"letter, separated by dashes.")))


def _lines(r: random.Random) -> str:
    n, w = r.randint(10, 30), r.choice(("Item", "Step", "Line", "Task", "Row", "Chapter"))
    return r.choice((f"Write {n} lines of the form '{w} k: done', for k from 1 to {n}.",
                     f"Make a numbered list from 1 to {n} where each entry is '{w} number <k>'.",
                     f"Write a markdown table with columns 'n' and 'n squared' for n from 1 to {n}."))


def _code(r: random.Random) -> str:
    n, name = r.randint(5, 20), r.choice(("user", "item", "node", "city", "file", "task"))
    return r.choice(((f"Write a JSON array of {n} objects with fields \"id\" and \"name\", where id goes from 1 to "
                     f"{n} and name is \"{name}<id>\"."),
                     f"Write a Python list of the integers from 1 to {n * 3}.",
                     f"Write {n} Python assignments of the form {name}_k = k for k from 1 to {n}.",
                     f"Write a CSV file with a header 'id,{name}' and {n} rows, where row k is 'k,{name}k'.",
                     (f"Write an HTML unordered list with {n} items labelled '{name.title()} 1' to "
                     f"'{name.title()} {n}'.")))


TEMPLATES: dict[str, Callable[[random.Random], str]] = {
    "count": _count, "countdown": _countdown, "repeat-word": _repeat_word, "repeat-phrase": _repeat_phrase,
    "sequence": _sequence, "times-table": _times_table, "enumerate": _enumerate, "alphabet": _alphabet,
    "lines": _lines, "code": _code,
}


def generate(hash_of: Callable[[str], str]) -> list[tuple[str, str]]:
    """(uid suffix, message) of every distinct generated message, in draw order (module doc)."""
    r = random.Random(SEED)
    names = list(TEMPLATES)
    seen: set[str] = set()
    out = []
    for i in range(N_DRAWS):
        name = names[i % len(names)]
        text = TEMPLATES[name](r)
        h = hash_of(text)
        if h not in seen:
            seen.add(h)
            out.append((f"{name}-{i}", text))
    return out
