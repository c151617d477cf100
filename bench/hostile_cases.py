"""Re-run the hostile-user case tables of issue 9 and of the gate (issue 15 item 5, issue 18 items 2, 3, 4, 13:
bench/hostile_gate_cases.py): every defect, the command, and whether it holds.

    .venv/bin/python bench/hostile_cases.py            # prints a markdown table and the counts

Everything runs in-process on the simulator backend in a temporary directory (a few seconds). A case "holds"
when the command now behaves as the issue asks (one-line exit 2 with nothing written, or the documented
recovery working).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from unittest import mock

from dreamshard.cli.app import invoke as cli
from dreamshard.documents import load_inventory, save_inventory, save_plan
from dreamshard.evaluation import compare_sharders, evaluate_plan
from dreamshard.inventory.synth import synth_inventory
from dreamshard.profiling import make_oracle
from dreamshard.sharders import get_sharder
from dreamshard.store import get_current, get_pointer, open_store
from dreamshard.store.inventories import push_inventory
from dreamshard.values import Topology

RESULTS: list[tuple[str, str, str, bool, str]] = []


def one_line_2(r: tuple[int, str, str], *needles: str) -> bool:
    """`cli(...)`'s (exit code, stdout, stderr): exit 2, one line on stderr naming every needle, no traceback on
    either stream (every hostile case module judges refusals with this one)."""
    lines = r[2].strip().splitlines()
    return r[0] == 2 and len(lines) == 1 and "Traceback" not in r[1] + r[2] and all(n in lines[0] for n in needles)


def snap(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()} if d.exists() else {}


def case(defect: str, what: str, command: str) -> Callable[[Callable[[], bool | tuple[bool, str]]], None]:
    def run(fn: Callable[[], bool | tuple[bool, str]]) -> None:
        try:
            got = fn()
            ok, note = (got, "") if isinstance(got, bool) else got
        except Exception as e:  # a traceback is a failed case
            ok, note = False, f"{type(e).__name__}: {e}"
        RESULTS.append((defect, what, command, ok, note))

    return run


def main_cases(d: Path) -> None:  # noqa: C901 - one flat list of cases reads best
    inv = synth_inventory(12, 0, name="inv")
    topo = Topology(num_devices=2, memory_per_device_gb=1.0, batch_size=512)
    good = get_sharder("lookup_greedy").shard(inv, topo).model_copy(update={"sharder": "dreamshard"})
    worse = get_sharder("size_greedy").shard(inv, topo).model_copy(update={"sharder": "dreamshard"})
    fair = get_sharder("random", seed=1).shard(inv, topo).model_copy(update={"sharder": "dreamshard"})
    baselines = ["round_robin", "size_greedy", "dim_greedy", "torchrec"]
    cmp = compare_sharders(inv, topo, baselines, make_oracle("simulator"), rounds=5, extra_plans=[good, worse, fair])
    paramsf = d / "gate-params.yaml"  # the gate's rules for these cases: those baselines, simulated costs allowed
    paramsf.write_text(f"publish:\n  baselines: [{', '.join(baselines)}]\n  allow_simulated: true\n")
    invf = save_inventory(inv, d / "inv.yaml")
    goodf, worsef = save_plan(good, d / "good.json"), save_plan(worse, d / "worse.json")
    cmpf = d / "cmp.json"
    cmpf.write_text(cmp.model_dump_json())
    store = d / "store"
    gate = ["--store", str(store), "--comparison", str(cmpf), "--params", str(paramsf)]

    def forged(update: dict[str, object]) -> Path:
        p = d / "forged.json"
        p.write_text(json.dumps({**json.loads(goodf.read_text()), **update}))
        return p

    forgeries = {
        "empty placement": {"placement": {}, "memory_per_device_gb": [0.0, 0.0]},
        "missing table": {"placement": dict(list(good.placement.items())[1:])},
        "extra table": {"placement": {**good.placement, "ghost": 0}},
        "arbitrary fingerprint": {"inventory_fingerprint": "ab" * 32},
        "forged memory": {"memory_per_device_gb": [0.001, 0.001]},
    }
    for what, update in forgeries.items():
        for with_i in (False, True):

            @case(
                "1",
                f"publish {'with' if with_i else 'without'} -i: {what}",
                f"plans publish forged.json {'-i inv.yaml ' if with_i else ''}--comparison cmp.json",
            )
            def _(update: dict[str, object] = update, with_i: bool = with_i) -> bool:
                before = snap(store)
                r = cli(["plans", "publish", str(forged(update)), *gate, *(["-i", str(invf)] if with_i else [])])
                return one_line_2(r) and snap(store) == before

    @case("1", "publish with -i: forged measured costs", "plans publish forged.json -i inv.yaml --comparison cmp.json")
    def _() -> tuple[bool, str]:
        p = d / "forged-measured.json"
        data = json.loads(worsef.read_text())
        data["measured"] = {
            "per_device": [{"fwd_compute": 0.001, "fwd_comm": 0, "bwd_comm": 0, "bwd_compute": 0}] * 2,
            "overall_ms": 0.001,
        }
        p.write_text(json.dumps(data))
        r = cli(["plans", "publish", str(p), *gate, "-i", str(invf)])
        return r[0] == 1 and "does not beat" in r[2], r[2].strip()[:80]

    for what, other in (
        ("another inventory", (synth_inventory(11, 0, name="inv"), topo)),
        ("another device count", (inv, topo.model_copy(update={"num_devices": 4}))),
    ):

        @case("2", f"--comparison from {what}", "plans publish worse.json -i inv.yaml --comparison other.json")
        def _(other: tuple = other) -> bool:
            c = compare_sharders(other[0], other[1], baselines, make_oracle("simulator"), rounds=5)
            (d / "other.json").write_text(c.model_dump_json())
            fresh = d / "store2"  # (worse.json was decided in `store` above: one decision per plan id)
            r = cli(
                [
                    "plans",
                    "publish",
                    str(worsef),
                    "--store",
                    str(fresh),
                    "--comparison",
                    str(d / "other.json"),
                    "-i",
                    str(invf),
                    "--params",
                    str(paramsf),
                ]
            )
            return one_line_2(r) and not fresh.exists()

    alias = {
        "plan -o INVENTORY": ["plan", "-i", str(invf), "-d", "2", "-m", "1", "-s", "size_greedy", "-o", str(invf)],
        "evaluate -o INVENTORY": [
            "evaluate",
            "-i",
            str(invf),
            "-p",
            str(goodf),
            "--backend",
            "simulator",
            "-o",
            str(invf),
        ],
        "compare --out INVENTORY": [
            "compare",
            "-i",
            str(invf),
            "-d",
            "2",
            "-m",
            "1",
            "--backend",
            "simulator",
            "--out",
            str(invf),
        ],
        "plan --torchrec-out INVENTORY": [
            "plan",
            "-i",
            str(invf),
            "-d",
            "2",
            "-m",
            "1",
            "-s",
            "size_greedy",
            "-o",
            str(d / "p.json"),
            "--torchrec-out",
            str(invf),
        ],
        "torchrec export -o INVENTORY": ["torchrec", "export", str(goodf), "-i", str(invf), "-o", str(invf)],
        "torchrec import -o INVENTORY": ["torchrec", "import", str(goodf), "-i", str(invf), "-m", "1", "-o", str(invf)],
        "profile -o INVENTORY (hard link)": [
            "profile",
            "-i",
            str(invf),
            "-d",
            "2",
            "-m",
            "1",
            "--backend",
            "simulator",
            "-o",
            str(d / "hard.yaml"),
        ],
    }
    os.link(invf, d / "hard.yaml")
    for what, argv in alias.items():

        @case("3", f"output aliases input: {what}", " ".join(argv[:1]) + " ... " + what)
        def _(argv: list[str] = argv) -> bool:
            before = invf.read_bytes()
            return one_line_2(cli(argv)) and invf.read_bytes() == before and not (d / "p.json").exists()

    @case("4", "profile -o on a file without trailing newline keeps its last record", "profile ... -o m.jsonl (twice)")
    def _() -> bool:
        m = d / "m.jsonl"
        base = [
            "profile",
            "-i",
            str(invf),
            "-d",
            "2",
            "-m",
            "1",
            "--backend",
            "simulator",
            "-o",
            str(m),
            "--no-progress",
        ]
        cli([*base, "-k", "1"])
        lines = m.read_text().splitlines()
        m.write_text("\n".join(lines))
        cli([*base, "-k", "2"])
        return m.read_text().splitlines()[: len(lines)] == lines

    # -- 5: corrupt current.json
    cli(["plans", "publish", str(goodf), *gate, "-i", str(invf)])
    other_inv = synth_inventory(6, 1, name="other")
    other_plan = get_sharder("lookup_greedy").shard(other_inv, topo).model_copy(update={"sharder": "dreamshard"})
    ocmp = compare_sharders(
        other_inv, topo, ["round_robin", "torchrec"], make_oracle("simulator"), rounds=5, extra_plans=[other_plan]
    )
    oinvf, oplanf = save_inventory(other_inv, d / "oinv.yaml"), save_plan(other_plan, d / "oplan.json")
    (d / "o-params.yaml").write_text("publish:\n  baselines: [round_robin, torchrec]\n")
    (d / "ocmp.json").write_text(ocmp.model_dump_json())
    (store / "plans" / "inv" / "current.json").write_text("{corrupt")
    s = ["--store", str(store)]

    @case("5", "publish with a corrupt pointer leaves no orphan files", "plans publish fair.json ... (corrupt current)")
    def _() -> bool:
        before = snap(store)
        r = cli(["plans", "publish", str(save_plan(fair, d / "fair.json")), *gate, "-i", str(invf)])
        return one_line_2(r) and snap(store) == before

    @case("5", "publish for another inventory still works", "plans publish oplan.json -i oinv.yaml ...")
    def _() -> bool:
        return (
            cli(
                [
                    "plans",
                    "publish",
                    str(oplanf),
                    *s,
                    "--comparison",
                    str(d / "ocmp.json"),
                    "-i",
                    str(oinvf),
                    "--allow-simulated",
                    "--sharders",
                    "round_robin,torchrec",
                    "--params",
                    str(d / "o-params.yaml"),
                ]
            )[0]
            == 0
        )

    @case("5", "show current of another inventory still works", "plans show current --inventory other")
    def _() -> bool:
        return cli(["plans", "show", "current", *s, "--inventory", "other"])[0] == 0

    @case("5", "plans list (all inventories) still works", "plans list")
    def _() -> bool:
        return cli(["plans", "list", *s])[0] == 0

    @case("5", "the error names the repair command", "plans show current --inventory inv")
    def _() -> bool:
        r = cli(["plans", "show", "current", *s, "--inventory", "inv"])
        return one_line_2(r) and "plans rollback --inventory inv --to PLAN_ID" in r[2]

    @case("5", "rollback --to repairs the pointer", "plans rollback --inventory inv --to GOOD")
    def _() -> bool:
        return (
            cli(["plans", "rollback", *s, "--inventory", "inv", "--to", good.plan_id])[0] == 0
            and get_current(open_store(str(store)), "inv").plan_id == good.plan_id
        )

    @case("5", "plans fsck lists orphans", "plans fsck")
    def _() -> bool:
        stray = store / "plans" / "inv" / inv.fingerprint() / "x.json.record"
        stray.write_text("{}")
        r = cli(["plans", "fsck", *s])
        stray.unlink()
        return r[0] == 1 and "x.json.record" in r[1]

    # -- 6: inventory push
    ostore = open_store(str(store))
    push_inventory(ostore, inv)
    ver = store / "inventories" / "inv" / f"{inv.fingerprint()}.yaml"
    ptr = store / "inventories" / "inv" / "current.json"
    for what, target, damage in (
        ("corrupt stored pointer", ptr, "{x"),
        ("corrupt stored inventory", ver, "[1,"),
        ("invalid stored version is rewritten", ver, "name: inv\ntables: []\n"),
    ):

        @case("6", f"inventory push: {what}", "inventory push inv.yaml --store store")
        def _(target: Path = target, damage: str = damage) -> bool:
            target.write_text(damage)
            push_inventory(ostore, load_inventory(invf))
            from dreamshard.store.inventories import get_current_inventory

            got = get_current_inventory(ostore, "inv")
            return got is not None and got[0].fingerprint() == inv.fingerprint()

    # -- 7: secrets in URLs
    repo = d / "repo"
    repo.mkdir()
    from dreamshard.pipeline.dvc import run_dvc

    run_dvc(["init", "--no-scm", "-q"], repo)
    for what, argv in (
        (
            "remote s3 --endpoint http://KEY:SECRET@host",
            [
                "remote",
                "s3",
                "--name",
                "x",
                "--url",
                "s3://b/p",
                "--endpoint",
                "http://AKIAKEY:S3CRET@host",
                "--repo",
                str(repo),
            ],
        ),
        (
            "--endpoint-url with query-string credentials",
            [
                "plans",
                "list",
                "--store",
                "s3://b/p",
                "--endpoint-url",
                "http://h:1/?AWSAccessKeyId=AKIAKEY&Signature=S3CRET",
            ],
        ),
    ):

        @case("7", what, " ".join(argv[:2]) + " ...")
        def _(argv: list[str] = argv) -> bool:
            r = cli(argv)
            return one_line_2(r) and "S3CRET" not in r[1] + r[2] and "AKIAKEY" not in r[1] + r[2]

    # -- 8: plans list
    cli(["plans", "publish", str(worsef), *gate, "-i", str(invf)])  # rejected, stored
    rej = store / "plans" / "inv" / inv.fingerprint() / "rejected" / f"{worse.plan_id}.json"

    @case("8", "plans list verifies checksums (tampered plan reported)", "plans list")
    def _() -> bool:
        rej.write_text(rej.read_text().replace('"sharder": "dreamshard"', '"sharder": "dreamsharp"'))
        r = cli(["plans", "list", *s])
        return r[0] == 1 and "CORRUPT" in r[1] and "checksum mismatch" in r[2]

    @case("8", "one unreadable plan does not fail the listing", "plans list --json")
    def _() -> bool:
        rej.write_bytes(b"\xff\xfe")
        (rej.parent / (rej.name + ".sha256")).write_text(hashlib.sha256(b"\xff\xfe").hexdigest() + "  x\n")
        r = cli(["plans", "list", *s, "--json"])
        rows = json.loads(r[1])
        return r[0] == 1 and any(x["plan_id"] == good.plan_id and not x["problem"] for x in rows)

    # -- 9: huge numbers
    for cmd, extra in (
        ("plan", ["-s", "size_greedy", "-o", str(d / "p9.json")]),
        ("compare", ["--backend", "simulator"]),
        ("profile", ["--backend", "simulator", "-o", str(d / "m9.jsonl")]),
    ):

        @case("9", f"{cmd} --memory-gb 1e300", f"{cmd} -i inv.yaml -d 2 -m 1e300")
        def _(cmd: str = cmd, extra: list[str] = extra) -> bool:
            before = snap(d)
            return one_line_2(cli([cmd, "-i", str(invf), "-d", "2", "-m", "1e300", *extra])) and snap(d) == before

    # -- 10: read-only store (root ignores mode bits: simulate the read-only mount)
    @case("10", "plans rollback on a read-only store", "plans rollback --inventory inv (read-only)")
    def _() -> bool:
        real_open = open

        def ro(file, mode="r", *a, **k):  # type: ignore[no-untyped-def]
            if any(c in mode for c in "wa+x") and str(store) in str(file):
                raise PermissionError(13, "Permission denied", str(file))
            return real_open(file, mode, *a, **k)

        with mock.patch("builtins.open", ro):
            r = cli(["plans", "rollback", *s, "--inventory", "other", "--to", other_plan.plan_id])
        return one_line_2(r)

    # -- 11: model card
    src = Path(__import__("dreamshard").__file__).parent / "pretrained"
    for hidden in (10**9, -5):

        @case("11", f"model.json cost_spec.hidden = {hidden}", "plan --sharder dreamshard --model m/")
        def _(hidden: int = hidden) -> bool:
            m = d / f"model{hidden}"
            shutil.copytree(src, m)
            card = json.loads((m / "model.json").read_text())
            card["cost_spec"]["hidden"] = hidden
            (m / "model.json").write_text(json.dumps(card))
            return one_line_2(
                cli(["plan", "-i", str(invf), "-d", "2", "-m", "1", "--model", str(m), "-o", str(d / "p11.json")])
            )

    # -- 12: republish current
    @case("12", "re-publishing the current plan does not duplicate history", "plans publish good.json (twice)")
    def _() -> bool:
        st = d / "store12"
        g = ["--store", str(st), "--comparison", str(cmpf), "-i", str(invf), "--params", str(paramsf)]
        cli(["plans", "publish", str(goodf), *g])
        before = get_pointer(open_store(str(st)), "inv")
        cli(["plans", "publish", str(goodf), *g])
        return get_pointer(open_store(str(st)), "inv") == before

    # -- 13: traces
    import torch

    torch.save((torch.tensor([0, 1]), torch.tensor([0, 1, 0, 2]), torch.tensor([[1, -1, 2]])), d / "neg.pt")
    (d / "x.pt").mkdir()
    for what, path, needle in (
        ("negative lengths", d / "neg.pt", "lengths must be >= 0"),
        ("a directory named x.pt", d / "x.pt", "is a directory"),
    ):

        @case("13", f"from-trace: {what}", f"inventory from-trace {path.name} -o t.yaml")
        def _(path: Path = path, needle: str = needle) -> bool:
            r = cli(["inventory", "from-trace", str(path), "-o", str(d / "t.yaml")])
            return one_line_2(r) and needle in r[2] and not (d / "t.yaml").exists()

    # -- Also
    for what, text in (
        (
            "num_embeddings: true",
            "name: x\ntables:\n- {name: a, num_embeddings: true, embedding_dim: 4, pooling_factor: 1}\n",
        ),
        (
            "inventory name with '/'",
            "name: a/b\ntables:\n- {name: a, num_embeddings: 2, embedding_dim: 4, pooling_factor: 1}\n",
        ),
        (
            "inventory name '..'",
            "name: '..'\ntables:\n- {name: a, num_embeddings: 2, embedding_dim: 4, pooling_factor: 1}\n",
        ),
    ):

        @case("also", f"validate: {what}", "inventory validate bad.yaml")
        def _(text: str = text) -> bool:
            (d / "bad.yaml").write_text(text)
            return one_line_2(cli(["inventory", "validate", str(d / "bad.yaml")]))

    @case(
        "18.8",
        "a 300k-character table name: one line, in seconds (redaction is linear)",
        "inventory validate huge.yaml",
    )
    def _() -> tuple[bool, str]:
        import time

        (d / "huge.yaml").write_text(
            f"name: x\ntables:\n- {{name: {'t' * 300_000}, num_embeddings: 2, embedding_dim: 3, pooling_factor: 1}}\n"
        )
        t0 = time.perf_counter()
        r = cli(["inventory", "validate", str(d / "huge.yaml")])
        wall = time.perf_counter() - t0
        return one_line_2(r) and wall < 10.0, f"{wall:.2f} s"

    @case("also", "rollback --to trusts the history's checksum, not a rewritten sidecar", "plans rollback --to BAD")
    def _() -> bool:
        st = d / "store-also"
        g = ["--store", str(st), "--comparison", str(cmpf), "-i", str(invf), "--params", str(paramsf)]
        bad = get_sharder("random", seed=1).shard(inv, topo).model_copy(update={"sharder": "dreamshard"})
        c2 = compare_sharders(inv, topo, baselines, make_oracle("simulator"), rounds=5, extra_plans=[good, bad])
        (d / "c2.json").write_text(c2.model_dump_json())
        g[3] = str(d / "c2.json")
        badf = save_plan(bad, d / "bad.json")
        cli(["plans", "publish", str(badf), *g])
        cli(["plans", "publish", str(goodf), *g])
        f = st / "plans" / "inv" / inv.fingerprint() / f"{bad.plan_id}.json"
        f.write_text(f.read_text().replace('"sharder": "dreamshard"', '"sharder": "dreamsharp"'))
        (f.parent / (f.name + ".sha256")).write_text(hashlib.sha256(f.read_bytes()).hexdigest() + "  x\n")
        r = cli(["plans", "rollback", "--store", str(st), "--inventory", "inv", "--to", bad.plan_id])
        return one_line_2(r) and get_current(open_store(str(st)), "inv").plan_id == good.plan_id

    @case(
        "18.1",
        "a plan id ending in .record next to plan p: both kept, shown and listed",
        "plans publish p.record; plans publish p",
    )
    def _() -> bool:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from store_helpers import approve  # tests/ is not a package

        from dreamshard.store import list_plans, publish, show

        st = open_store(str(d / "store-record"))
        first = evaluate_plan(inv, good, make_oracle("simulator")).model_copy(update={"plan_id": "p.record"})
        second = first.model_copy(update={"plan_id": "p"})
        publish(st, first, approve(first))
        publish(st, second, approve(second))
        return (
            show(st, "p.record") == first
            and show(st, "p") == second
            and {r.plan_id for r in list_plans(st, "inv")} == {"p.record", "p"}
        )

    @case(
        "18.15",
        "profile -k far beyond the distinct placements: returns at once with what exists",
        "profile -k 100000 (2 tables, 2 devices)",
    )
    def _() -> tuple[bool, str]:
        import time

        two = synth_inventory(2, 0, name="two")
        save_inventory(two, d / "two.yaml")
        t0 = time.perf_counter()
        r = cli(
            [
                "profile",
                "-i",
                str(d / "two.yaml"),
                "-d",
                "2",
                "-m",
                "4",
                "--backend",
                "simulator",
                "-k",
                "100000",
                "--warmup",
                "0",
                "--repeats",
                "1",
                "-o",
                str(d / "two.jsonl"),
                "--no-progress",
            ]
        )
        wall = time.perf_counter() - t0
        # 2 singles, the 4 distinct whole-table placements, and one each of the typed kinds (row_wise, data_parallel:
        # placements of units, distinct from every whole-table one)
        return r[0] == 0 and wall < 30.0 and sum(1 for _ in (d / "two.jsonl").open()) <= 2 + 4 + 2, f"{wall:.2f} s"


# Case tables of one area each not yet in tests/attacks/: module, function(directory, case).
EXTRA_CASES: tuple[tuple[str, str], ...] = (
    ("hostile_training_cases", "cases"),
    ("hostile_input_cases", "cases"),
    ("hostile_small_cases", "cases"),
    ("hostile_loop_cases", "cases"),
    ("hostile_whatif_cases", "cases"),
    ("hostile_whatif_cases", "incumbent_cases"),
)


def run() -> int:
    import argparse

    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    import importlib

    with tempfile.TemporaryDirectory() as tmp:
        main_cases(Path(tmp))
        for module, fn in EXTRA_CASES:  # bench/ is the script's directory
            getattr(importlib.import_module(module), fn)(Path(tmp) / module, case)
    print("| defect | case | command | holds |\n|---|---|---|---|")
    for defect, what, command, ok, note in RESULTS:
        print(f"| {defect} | {what} | `{command}` | {'yes' if ok else 'NO ' + note} |")
    held = sum(ok for *_, ok, _ in RESULTS)
    print(f"\n{held} of {len(RESULTS)} cases hold; {len(RESULTS) - held} fail.")
    classes: dict[str, list[bool]] = {}
    for defect, *_, ok, _note in RESULTS:
        classes.setdefault(defect, []).append(ok)
    print("; ".join(f"{k}: {sum(v)}/{len(v)}" for k, v in classes.items()))
    return 0 if held == len(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(run())
