"""Write kvbake's table of vLLM's serve options (each spelling's canonical long name and arity) from the recordings."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = ROOT / "tests" / "data"
TABLE = ROOT / "kvbake" / "data" / "vllm_serve_options.json"
PATTERN = "vllm_cli_options_*.json"
ARITIES = ("flag", "value", "optional", "one-or-more", "any")
USAGE = """examples:
  python scripts/vllm_options_table.py           # write kvbake/data/vllm_serve_options.json
  python scripts/vllm_options_table.py --check   # say whether the committed table is current (exit 1 when not)

The recordings are tests/data/vllm_cli_options_<version>.json (scripts/record_vllm_cli.py makes them)."""


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def read_recordings(folder: Path = RECORDINGS) -> dict[str, dict]:
    """Every recording's options by vLLM version, oldest first."""
    found = {}
    for path in folder.glob(PATTERN):
        document = json.loads(path.read_text(encoding="utf-8"))
        found[document["vllm_version"]] = document["options"]
    if not found:
        raise SystemExit(f"vllm_options_table: no {PATTERN} in {folder}")
    return dict(sorted(found.items(), key=lambda item: version_key(item[0])))


def effect(spec: dict) -> tuple:
    """What an option does to the parsed arguments: spellings with the same effect are one option."""
    return spec["dest"], spec["action"], spec.get("sets"), spec["arity"]


def preferred_spelling(spellings: list[str], spec: dict) -> str | None:
    """The long spelling named after the option's dest (`--no-<dest>` for the spelling that sets a boolean off), else
    the only long spelling; None when neither decides."""
    dashed = spec["dest"].replace("_", "-")
    named = f"--no-{dashed}" if spec.get("sets") is False else f"--{dashed}"
    if named in spellings:
        return named
    longs = [spelling for spelling in spellings if spelling.startswith("--")]
    return longs[0] if len(longs) == 1 else None


def canonical_names(options: dict[str, dict], version: str) -> dict[str, str]:
    """Each spelling of one recording, by its canonical long name."""
    groups: dict[tuple, list[str]] = {}
    for spelling, spec in sorted(options.items()):
        groups.setdefault(effect(spec), []).append(spelling)
    names = {}
    for spellings in groups.values():
        chosen = preferred_spelling(spellings, options[spellings[0]])
        if chosen is None:
            raise SystemExit(f"vllm_options_table: vLLM {version}: no canonical long name among {', '.join(spellings)}")
        names.update({spelling: chosen for spelling in spellings})
    return names


def version_rows(options: dict[str, dict], version: str) -> dict[str, list[str]]:
    """Each spelling of one recording: [canonical long name, arity]."""
    names = canonical_names(options, version)
    rows = {}
    for spelling, spec in options.items():
        if spec["arity"] not in ARITIES:
            raise SystemExit(f"vllm_options_table: vLLM {version}: {spelling} has arity {spec['arity']!r}, "
                             f"which kvbake's parser does not read ({', '.join(ARITIES)})")
        rows[spelling] = [names[spelling], spec["arity"]]
    return rows


def build_table(recordings: dict[str, dict]) -> dict:
    """The union of every recording's spellings; where recordings disagree, the newest decides and the table says so."""
    rows: dict[str, list[str]] = {}
    seen: dict[str, dict[str, list[str]]] = {}
    for version, options in recordings.items():
        for spelling, row in version_rows(options, version).items():
            seen.setdefault(spelling, {})[version] = row
            rows[spelling] = row
    disagreements = [{"spelling": spelling, **{version: row for version, row in by_version.items()}}
                     for spelling, by_version in sorted(seen.items())
                     if len({tuple(row) for row in by_version.values()}) > 1]
    return {"format": 1,
            "what": "every spelling of vLLM's serve options: [its canonical long name, its arity]; the union of the "
                    "recorded parsers, the newest recording deciding where they disagree (listed under disagreements)",
            "generated_by": "python scripts/vllm_options_table.py", "recordings": list(recordings),
            "disagreements": disagreements, "options": dict(sorted(rows.items()))}


def table_text(table: dict) -> str:
    """The table as JSON, one option a line."""
    head = json.dumps({key: value for key, value in table.items() if key != "options"}, indent=1)
    rows = [f"  {json.dumps(spelling)}: {json.dumps(row)}" for spelling, row in table["options"].items()]
    return head[:-2] + ',\n "options": {\n' + ",\n".join(rows) + "\n }\n}\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare the committed table with the recordings; write nothing")
    options = parser.parse_args(argv)
    text = table_text(build_table(read_recordings()))
    shown = TABLE.relative_to(ROOT)
    if options.check:
        current = TABLE.exists() and TABLE.read_text(encoding="utf-8") == text
        print(f"{shown} is {'current' if current else 'stale: run python scripts/vllm_options_table.py'}")
        return 0 if current else 1
    TABLE.parent.mkdir(exist_ok=True)
    TABLE.write_text(text, encoding="utf-8")
    print(f"wrote {shown}: {len(json.loads(text)['options'])} spellings")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
