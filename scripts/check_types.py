"""Type-check bertjax/ with mypy and hold each file to its recorded count of errors.

    python scripts/check_types.py            # fails when a file has more errors than recorded
    python scripts/check_types.py --update   # records the counts after errors are fixed

The record, scripts/type_baseline.json, maps each file with errors to how many it has. It may
only shrink: a file over its count (or a file not in it that has errors) fails the check, with
the errors that file has now; a file under its count passes and is named, so that `--update`
records the lower count. `--update` refuses to raise a count unless `--allow-growth` is given
(for re-recording after a merge that moved code between files). mypy's settings are in
pyproject.toml ([tool.mypy]); its cache (.mypy_cache) makes a second run take about a second.
"""

import argparse
import collections
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "scripts" / "type_baseline.json"
ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+(?::\d+)?: error: ")
UPDATE = "python scripts/check_types.py --update"


def run_mypy() -> list[str]:
    """mypy's error lines for the files pyproject.toml names (bertjax/)."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-pretty", "--no-error-summary",
                           "--hide-error-context"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 2: mypy itself failed (a bad setting, a crash)
        raise SystemExit(f"mypy failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    return [line for line in done.stdout.splitlines() if ERROR.match(line)]


def count(lines: list[str]) -> dict[str, int]:
    """Errors per file, by the path mypy prints (relative to the repository root)."""
    return dict(sorted(collections.Counter(ERROR.match(line)["path"] for line in lines).items()))


def compare(now: dict[str, int], baseline: dict[str, int]) -> tuple[dict, dict]:
    """(files over their recorded count, files under it): {path: (now, recorded)}."""
    over = {path: (n, baseline.get(path, 0)) for path, n in now.items()
            if n > baseline.get(path, 0)}
    under = {path: (now.get(path, 0), n) for path, n in baseline.items()
             if now.get(path, 0) < n}
    return over, under


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true",
                        help="record today's counts in scripts/type_baseline.json")
    parser.add_argument("--allow-growth", action="store_true",
                        help="with --update: record counts that grew too")
    args = parser.parse_args(argv)
    lines = run_mypy()
    now = count(lines)
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    over, under = compare(now, baseline)
    total = sum(now.values())
    if args.update:
        if over and not args.allow_growth:
            print("not recorded: these files have more type errors than recorded (fix them, "
                  "or pass --allow-growth after a merge that moved code between files):")
            for path, (n, recorded) in over.items():
                print(f"  {path}: {n} errors, {recorded} recorded")
            return 1
        BASELINE.write_text(json.dumps(now, indent=1) + "\n")
        print(f"recorded {total} type errors in {len(now)} files in {BASELINE.relative_to(ROOT)}")
        return 0
    for path, (n, recorded) in under.items():
        print(f"{path}: {n} type errors, {recorded} recorded: run `{UPDATE}` to lower the count")
    if over:
        print(f"type errors grew in {len(over)} file(s); fix them (mypy's settings: "
              "pyproject.toml [tool.mypy]):")
        for path, (n, recorded) in over.items():
            print(f"  {path}: {n} errors, {recorded} recorded")
            for line in lines:
                if line.startswith(f"{path}:"):
                    print(f"    {line}")
        return 1
    print(f"types: {total} errors in {len(now)} files, none over scripts/type_baseline.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
