"""Where a py-spy profile's samples go: the top functions by own and by inclusive weight.

py-spy (a bench tool, not a dependency: `pip install py-spy` into any venv) records a running
server; this reads its speedscope JSON and prints text that fits in a results note. Samples
whose stack is start-up (imports, the argument parser, `tune_gc`) are left out, so a profile
of a whole sweep shows the serving process only.

    py-spy record --nonblocking -r 50 -f speedscope -o profile.json -- agentos serve ...
    .venv/bin/python bench/scripts/speedscope_top.py profile.json --top 30
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

_START_UP = {"_find_and_load", "build_parser", "tune_gc"}


def _where(frame: dict[str, Any]) -> str:
    path = str(frame.get("file", ""))
    short = path.split("site-packages/")[-1].split("src/")[-1].split("lib/python3.11/")[-1]
    return f"{frame['name']} ({short})"


def summarize(profile: dict[str, Any]) -> tuple[float, Counter[str], Counter[str]]:
    """Total weight, then own and inclusive weight per function, start-up left out."""
    frames = profile["shared"]["frames"]
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0.0
    for thread in profile["profiles"]:
        for stack, weight in zip(thread["samples"], thread["weights"], strict=True):
            names = [_where(frames[i]) for i in stack]
            if any(frames[i]["name"] in _START_UP for i in stack):
                continue
            total += weight
            if names:
                own[names[-1]] += weight
            for name in set(names):
                inclusive[name] += weight
    return total, own, inclusive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    total, own, inclusive = summarize(json.loads(args.profile.read_text()))
    print(f"samples' weight (start-up left out): {total:.2f} s")
    for title, counts in (("own", own), ("inclusive", inclusive)):
        print(f"\n{title}:")
        for name, weight in counts.most_common(args.top):
            print(f"{100 * weight / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
