"""The judge's worker processes speak one JSON request per line on stdin and answer one JSON line each on a private
copy of stdout (`judge_compute`, `judge_comm`): whatever else a native library prints goes to stderr."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import IO, Any


def private_reply() -> IO[str]:
    """The protocol's own copy of stdout; file descriptor 1 and `sys.stdout` then go to stderr."""
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return reply


def answer_lines(stdin: IO[str], reply: IO[str], answer: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """`answer` each non-empty request line, one reply line each, until stdin closes."""
    for line in stdin:
        if line.strip():
            reply.write(json.dumps(answer(json.loads(line))) + "\n")
            reply.flush()
