"""A bench's two result files (`bench/results/NAME.json` and `NAME.md`): the run's JSON written (or, with
`--render`, read back), its markdown made from it, and printed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_results(
    out: Path, name: str, render_only: bool, run: Callable[[], Any], markdown: Callable[[Any], str]
) -> Any:
    """Run the bench (`run`) and keep its result as `out/NAME.json`, or read that file back when `render_only`;
    then write `out/NAME.md` from it (`markdown`), print it, and return the result."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    if render_only:
        res = json.loads(path.read_text())
    else:
        res = run()
        path.write_text(json.dumps(res, indent=2) + "\n")
    text = markdown(res)
    (out / f"{name}.md").write_text(text)
    print(text)
    return res
