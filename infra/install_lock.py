"""Install a locked requirement set (`requirements.lock`, written by `make lock`) into this Python's environment,
in parallel: `make install` calls it after torch.

The lock pins every package the project needs, so no resolution is left to do: each package is installed with
`--no-deps`, and the set is split into JOBS groups that separate pip processes install side by side. On the
2-core machines of CI pip alone used one core for a minute (46 s for the resolver's install, 39 s for the lock in
one process, 24 s in two, measured). The groups are disjoint and every package is a wheel with its own files, so
the processes never write the same file. Then `pip check` must find the environment consistent (the one known
note, TorchRec asking for `fbgemm-gpu` where the CPU build `fbgemm-gpu-cpu` stands in, is allowed).

    python infra/install_lock.py requirements.lock [--jobs 2]

Exit 0 when everything installed and checks; otherwise 1, with the failing pip's last lines on stderr (the
Makefile then falls back to pip's resolver with constraints.txt).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

#: `pip check`'s lines that are expected: TorchRec's metadata asks for the CUDA build, the CPU build stands in.
KNOWN_CHECK_NOTES = ("torchrec 1.9.2 requires fbgemm-gpu, which is not installed.",)
PIP = [sys.executable, "-m", "pip"]
#: A pin: a project name (PEP 508) `==` one public version with an optional local part (PEP 440), nothing else: no
#: wildcard (`1.*`), no arbitrary equality (`===`), no second clause (`>=0,==1.0`), no URL, VCS or path requirement
#: (`pkg @ https://...?x==1`, `git+https://...`, `./pkg`), no marker, extra or option.
PIN = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
    r"==(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?"
    r"(?:\+[A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*)?"
)


def pins(lock: Path, skip: frozenset[str]) -> list[str]:
    """The lock's `name==version` lines, less comments and the packages in `skip` (installed before it)."""
    out = []
    for raw in lock.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and line.split("==", 1)[0].lower() not in skip:
            out.append(line)
    return out


def loose(lines: list[str]) -> list[str]:
    """The lines that are not one `name==version` pin (`PIN`): a range, a bare name, an option such as `-e .`, a
    wildcard, an arbitrary equality, a URL, VCS or local-path requirement (whatever `==` it holds)."""
    return [line for line in lines if PIN.fullmatch(line) is None]


def install(groups: list[list[str]], workdir: Path) -> list[str]:
    """Each group by its own `pip install --no-deps` process, all at once; the failures' last lines."""
    procs = []
    for i, group in enumerate(groups):
        req = workdir / f"group-{i}.txt"
        req.write_text("\n".join(group) + "\n")
        cmd = [*PIP, "install", "-q", "--no-compile", "--no-deps", "-r", str(req)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    failures = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            failures.append("\n".join(out.strip().splitlines()[-5:]))
    return failures


def check() -> list[str]:
    """`pip check`'s problems, less the known notes."""
    res = subprocess.run([*PIP, "check"], capture_output=True, text=True)
    return [ln for ln in res.stdout.splitlines() if ln.strip() and ln.strip() not in KNOWN_CHECK_NOTES]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lock", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip", action="append", default=["torch"], help="a package installed before (repeat)")
    args = parser.parse_args(argv)
    if not args.lock.is_file():
        print(f"install_lock: no lock file {args.lock}", file=sys.stderr)
        return 2
    wanted = pins(args.lock, frozenset(s.lower() for s in args.skip))
    unpinned = loose(wanted)
    if unpinned:
        print(f"install_lock: {args.lock}: '{unpinned[0]}' is not name==version (make lock writes it)", file=sys.stderr)
        return 2
    jobs = max(1, args.jobs)
    groups = [wanted[i::jobs] for i in range(jobs)]
    with tempfile.TemporaryDirectory() as tmp:
        failures = install([g for g in groups if g], Path(tmp))
    if failures:
        print(f"install_lock: {args.lock} did not install:\n" + "\n".join(failures), file=sys.stderr)
        return 1
    problems = check()
    if problems:
        print(f"install_lock: {args.lock} left the environment inconsistent: " + "; ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
