"""requirements.lock (what `make install` installs without resolving) agrees with pyproject.toml and
constraints.txt: a dependency added or re-pinned there without `make lock` fails here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tomlkit  # DVC's dependency (tomllib is 3.11's, and the project supports 3.10)
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("dev", "torchrec", "s3")  # what the Makefile installs: '.[dev,torchrec,s3]'

sys.path.insert(0, str(ROOT / "infra"))
from install_lock import loose, pins  # noqa: E402


def locked(lock: Path) -> dict[str, Version]:
    """The lock's pins by canonical name (a name pinned twice is an error)."""
    lines = pins(lock, frozenset())
    assert loose(lines) == [], f"{lock.name}: lines that are not name==version"
    out: dict[str, Version] = {}
    for line in lines:
        name, _, version = line.partition("==")
        key = canonicalize_name(name)
        assert key not in out, f"{lock.name}: {name} pinned twice"
        out[key] = Version(version)
    return out


def disagreements(lock: Path, pyproject: Path, constraints: Path) -> list[str]:
    """Each requirement of the project (its extras EXTRAS) the lock lacks or pins outside the range, and each pin of
    constraints.txt the lock pins otherwise."""
    have = locked(lock)
    project = tomlkit.parse(pyproject.read_text())["project"]
    wanted = [str(r) for r in project["dependencies"]]
    wanted += [str(r) for e in EXTRAS for r in project["optional-dependencies"][e]]
    found = []
    for text in wanted:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        version = have.get(canonicalize_name(req.name))
        if version is None:
            found.append(f"{req.name} is required ({text}) but not locked")
        elif not req.specifier.contains(version, prereleases=True):
            found.append(f"{req.name} is locked at {version}, outside {text}")
    for line in constraints.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        req = Requirement(text)
        version = have.get(canonicalize_name(req.name))
        if version is not None and not req.specifier.contains(version, prereleases=True):
            found.append(f"{req.name} is locked at {version}, constraints.txt says {req.specifier}")
    return found


def test_the_lock_holds_every_requirement_within_its_range_and_the_constraints_pins() -> None:
    assert disagreements(ROOT / "requirements.lock", ROOT / "pyproject.toml", ROOT / "constraints.txt") == []


def test_a_requirement_added_or_repinned_without_make_lock_is_found(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text("# header\npydantic==2.14.4\ntorch==2.13.0+cpu\n")
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\ndependencies = ["pydantic>=2.6", "torch>=2.3,<2.15", "rich>=13"]\n'
        "[project.optional-dependencies]\ndev = []\ntorchrec = []\ns3 = []\n"
    )
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("# pins\npydantic==2.15.0\ntorch==2.13.0\n")
    assert disagreements(lock, pyproject, constraints) == [
        "rich is required (rich>=13) but not locked",
        "pydantic is locked at 2.14.4, constraints.txt says ==2.15.0",
    ]


def test_install_lock_refuses_a_missing_lock_and_a_loose_line_before_pip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from install_lock import main

    assert main([str(tmp_path / "absent.lock")]) == 2
    assert capsys.readouterr().err.strip() == f"install_lock: no lock file {tmp_path / 'absent.lock'}"
    for line in ("rich>=13", "-e .", "rich", "foo==1.*", "pkg @ https://example.com/pkg-1.0.whl?x==1"):
        (tmp_path / "loose.lock").write_text(f"# header\nsix==1.17.0\n{line}\n")
        assert main([str(tmp_path / "loose.lock")]) == 2
        err = capsys.readouterr().err.strip()
        assert f"'{line}' is not name==version" in err and "\n" not in err


#: Lines that hold `==` and still pin nothing (a URL, VCS or local-path requirement, a wildcard, an arbitrary
#: equality, a second clause): `pip install --no-deps` would install whatever they name.
NOT_PINS = (
    "pkg @ https://example.com/pkg-1.0.whl?x==1",
    "pkg @ git+https://example.com/pkg.git@main?x==1",
    "./vendor/pkg?x==1",
    "file:///tmp/pkg.tar.gz?x==1",
    "foo==1.*",
    "foo===x",
    "foo>=0,==1.0",
    'foo==1.0; python_version > "3"',
    "foo[extra]==1.0",
    "foo==1.0 --hash=sha256:00",
)


@pytest.mark.parametrize("line", NOT_PINS)
def test_a_line_with_double_equals_that_pins_nothing_is_loose(line: str) -> None:
    assert loose([line]) == [line]


@pytest.mark.parametrize("line", ["six==1.17.0", "torch==2.13.0+cpu", "certifi==2026.10.19.post1", "a.b_c-d==1!2rc1"])
def test_a_pin_is_not_loose(line: str) -> None:
    assert loose([line]) == []
