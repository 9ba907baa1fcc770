"""Committed records: the per-decode records behind the evidence figures, compact, so every figure redraws.

An evidence run's results folder (bench and replay JSONL files) packs into one gzip JSONL per file
under the figures' `records/` folder (`pack`): each setting once (a line `{"setting_id", "setting"}`),
then the records without it and without their token ids, except AR's (a resumed bench walks along
AR's tokens and judges new decodes against them), and replay records without theirs. Everything a
figure or claim reads stays: rounds, round shapes, accepted lengths, verdicts, timings, the modeled
figures, warm-up counts. `unpack` writes the files back with their settings, so a notebook pointed at
the restored folder (its `results_dir`) finds every decode done (`run_bench` and `replay_prompts`
resume by setting, prompt and run) and redraws without decoding, and an interrupted evidence run
resumes from them. `graft records pack|unpack` are the commands.
"""

import gzip
import json
from pathlib import Path

from graftlib.core.errors import require
from graftlib.core.records import read_records

SUFFIX = ".jsonl.gz"


def compact(rec: dict) -> dict:
    """A record as committed: no setting (its id stays), no token ids but AR's, none in replay records."""
    out = {k: v for k, v in rec.items() if k != "setting"}
    if out.get("method") not in ("ar", None) and "tokens" in out:
        out.pop("tokens")
        out["turns"] = [{k: v for k, v in t.items() if k != "tokens"} for t in out.get("turns", [])] or None
        if out["turns"] is None:
            out.pop("turns")
    if isinstance(out.get("records"), list):  # a replay line: its rounds' accepted tokens are not read back
        out["records"] = [{**r, "tokens": []} for r in out["records"]]
    return out


def pack_file(src: Path, dst: Path) -> dict:
    """`src` (JSONL records) as `dst` (gzip JSONL, module doc); {"records", "settings", "bytes"}."""
    records = read_records(src)
    settings = {r["setting_id"]: r["setting"] for r in records if "setting" in r and "setting_id" in r}
    dst.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"setting_id": sid, "setting": setting}, sort_keys=True)
             for sid, setting in sorted(settings.items())]
    lines += [json.dumps(compact(r), sort_keys=True) for r in records]
    tmp = dst.with_suffix(".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        f.write(("\n".join(lines) + "\n").encode())  # mtime 0: the same records pack to the same bytes
    tmp.replace(dst)
    return {"records": len(records), "settings": len(settings), "bytes": dst.stat().st_size}


def unpack_file(src: Path, dst: Path) -> int:
    """`src` (a packed file) back to JSONL at `dst`, settings re-inserted; the number of records."""
    settings, records = {}, []
    with gzip.open(src, "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if set(r) == {"setting_id", "setting"}:
                settings[r["setting_id"]] = r["setting"]
            else:
                records.append(r)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            if r.get("setting_id") in settings:
                r = {**r, "setting": settings[r["setting_id"]]}
            f.write(json.dumps(r) + "\n")
    tmp.replace(dst)
    return len(records)


def pack(results_dir: str | Path, out_dir: str | Path) -> dict[str, dict]:
    """Every JSONL file of `results_dir` (not its subfolders) packed into `out_dir`: {file name: `pack_file`'s}."""
    files = sorted(Path(results_dir).glob("*.jsonl"))
    require(files, f"no JSONL records in {results_dir} to pack")
    return {f.name: pack_file(f, Path(out_dir) / (f.stem + SUFFIX)) for f in files}


def unpack(archive_dir: str | Path, results_dir: str | Path) -> dict[str, int]:
    """Every packed file of `archive_dir` written back into `results_dir`: {file name: records}."""
    files = sorted(Path(archive_dir).glob("*" + SUFFIX))
    require(files, f"no packed records ({SUFFIX}) in {archive_dir}")
    return {f.name: unpack_file(f, Path(results_dir) / (f.name.removesuffix(SUFFIX) + ".jsonl")) for f in files}


def restore(archive_dir: str | Path, results_dir: str | Path) -> dict[str, int]:
    """`unpack` of the packed files whose JSONL is not yet in `results_dir` (a local file, which holds at least
    what was packed from it, is kept): {file name: records}; {} where `archive_dir` has none."""
    files = sorted(Path(archive_dir).glob("*" + SUFFIX))
    out = {}
    for f in files:
        dst = Path(results_dir) / (f.name.removesuffix(SUFFIX) + ".jsonl")
        if not dst.exists():
            out[f.name] = unpack_file(f, dst)
    return out


def add_parser(sub) -> None:
    p = sub.add_parser("records", help="pack an evidence run's records to commit beside its figures, or unpack them")
    p.add_argument("action", choices=["pack", "unpack"])
    p.add_argument("--results", required=True, help="the results folder (pack: read; unpack: written)")
    p.add_argument("--archive", required=True, help="the packed records' folder, e.g. figures/records")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.action == "pack":
        stats = pack(args.results, args.archive)
        total = sum(s["bytes"] for s in stats.values())
        for name, s in stats.items():
            print(f"{name:<40} {s['records']:>6} records {s['settings']:>3} settings {s['bytes'] / 1024:>8.1f} KiB")
        print(f"{len(stats)} files, {total / 1024:.1f} KiB in {args.archive}")
    else:
        counts = unpack(args.archive, args.results)
        print(f"{sum(counts.values())} records in {len(counts)} files written to {args.results}")
    return 0
