"""The largest entries of a py-spy collapsed-stack profile (`py-spy record -f raw`): own time
(the frame at the top of a stack) and inclusive time (any frame of a stack), in % of samples.

    python bench/scripts/collapsed_top.py profile.txt --top 30 [--thread-prefix 'process']
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path


def frames(stack: str) -> list[str]:
    """A stack's frames, outermost first, each `function (file:line)` without the line number."""
    return [frame.rsplit(":", 1)[0] + ")" if ":" in frame else frame for frame in stack.split(";")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in args.profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        chain = frames(stack)
        own[chain[-1]] += n
        for frame in set(chain):
            inclusive[frame] += n
    print(f"{total} samples\n\nown time:")
    for frame, n in own.most_common(args.top):
        print(f"{100 * n / total:6.1f}%  {frame}")
    print("\ninclusive:")
    for frame, n in inclusive.most_common(args.top):
        print(f"{100 * n / total:6.1f}%  {frame}")


if __name__ == "__main__":
    main()
