"""Result records: append-only JSONL files that survive interruption.

Each benchmark decode appends one JSON object on its own line, flushed and fsynced before the
next one starts, so an interrupted sweep loses at most the decode in flight. Readers skip a
torn last line. `setting_id` hashes everything that changes a measurement (models, device,
dtype, max_new_tokens, ...), so a re-run with the same parameters finds its finished records
and resumes, and records of other settings in the same file are left alone.
"""

import hashlib
import json
import os
from pathlib import Path


def setting_id(**setting) -> str:
    blob = json.dumps(setting, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def read_records(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    out = []
    with path.open() as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn line from an interrupted write
    return out


def _line(record: dict) -> str:
    """A record as its file holds it: one JSON object, keys sorted, on its own line."""
    return json.dumps(record, sort_keys=True) + "\n"


def keep_records(path: str | Path, keep) -> int:
    """Rewrite `path` with only the records for which `keep(record)` is true (`write_text_atomic`); returns how many
    were dropped (0: the file is left as it is)."""
    path = Path(path)
    records = read_records(path)
    kept = [r for r in records if keep(r)]
    if len(kept) == len(records):
        return 0
    write_text_atomic(path, "".join(_line(r) for r in kept))
    return len(records) - len(kept)


def append_record(path: str | Path, record: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = _line(record)
    with path.open("a+b") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() > 0:  # heal a torn last line so the new record starts on its own line
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write(line.encode())
        f.flush()
        os.fsync(f.fileno())


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` via a `.partial` file and a rename, so readers never see half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text)
    tmp.replace(path)


def write_json_atomic(path: str | Path, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1) + "\n")


def read_json_index(path: str | Path, fmt, what: str) -> dict | None:
    """A shard directory's JSON index (None if absent); GraftError if malformed or of another format."""
    from graftlib.core.errors import GraftError, require

    path = Path(path)
    if not path.is_file():
        return None
    try:
        index = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise GraftError(f"{what} index {path} is malformed: {e}") from None
    require(isinstance(index, dict) and index.get("format") == fmt,
            f"{what} index {path} has format {index.get('format') if isinstance(index, dict) else None}, "
            f"expected {fmt}")
    return index


def read_json_object(path: str | Path, what: str, hint: str = "") -> dict:
    """A JSON object file; `GraftError` naming `what`, the file and the problem (missing: + `hint`)."""
    from graftlib.core.errors import GraftError, require

    path = Path(path)
    require(path.is_file(), f"{what} file not found: {path}" + (f" ({hint})" if hint else ""))
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise GraftError(f"{what} file {path} is not valid JSON: {e}") from None
    require(isinstance(d, dict), f"{what} file {path}: expected a JSON object, got {type(d).__name__}")
    return d
