"""Peak memory and time of ``audit simulate`` over a month, optionally against another tree.

Usage::

    python benchmarks/bench_simulate.py [--incidents 60500] [--days 31] [--runs 3] [--against SRC]

``--incidents 60500 --days 31`` is the month of about 1M deliveries ``bench_store.py month``
uses. Each run is a fresh process (``audit simulate --quiet``) in a wrapper that reports its
wall time and peak RSS (``RUSAGE_CHILDREN``). With ``--against SRC`` (a source tree of the
package, for example ``git archive HEAD~1 | tar -x -C /tmp/old``), the same command runs from
that tree too, alternated with this one so that drift on a shared machine hits them alike, and
the two outputs are compared file by file (the same seed must give the same bytes). The script
prints medians of the wall time and the largest peak of each.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: Runs ``audit`` from the source tree given first (the installed package hidden).
FROM_TREE = (
    "import runpy,sys;src=sys.argv[1];"
    "sys.meta_path[:]=[f for f in sys.meta_path if 'editable' not in repr(f).lower()];"
    "sys.path.insert(0,src);sys.argv=['audit',*sys.argv[2:]];import audit;"
    "assert audit.__file__.startswith(src),audit.__file__;"
    "runpy.run_module('audit.cli',run_name='__main__')"
)
#: Runs the command given and prints its wall seconds, exit code and peak RSS.
WRAPPER = (
    "import json,resource,subprocess,sys,time;t=time.perf_counter();"
    "c=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL).returncode;"
    "s=time.perf_counter()-t;print(json.dumps({'seconds':s,'code':c,'rss_mb':"
    "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024}))"
)


def run(cmd: list[str]) -> dict:
    """``cmd`` in a fresh wrapper process: wall seconds and peak RSS (MB)."""
    out = subprocess.run(
        [sys.executable, "-c", WRAPPER, *cmd], check=True, capture_output=True, text=True
    ).stdout
    got = json.loads(out)
    if got["code"] != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {got['code']}")
    return got


def same_files(a: Path, b: Path) -> bool:
    """Every file under ``a`` and ``b`` has the same bytes (and none is missing)."""
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    if files != sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()):
        return False
    return all(filecmp.cmp(a / f, b / f, shallow=False) for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--incidents", type=int, default=60500)
    parser.add_argument("--days", type=int, default=31)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another source tree of the package")
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[1]
    trees = {"this tree": here} | ({"--against": args.against.resolve()} if args.against else {})
    sizes = ["--days", str(args.days), "--incidents", str(args.incidents), "--quiet"]
    results: dict[str, list[dict]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as folder:
        outs = {name: Path(folder, f"out{i}") for i, name in enumerate(trees)}
        for _ in range(args.runs):  # alternated
            for name, src in trees.items():
                shutil.rmtree(outs[name], ignore_errors=True)
                cmd = [sys.executable, "-c", FROM_TREE, str(src), "simulate"]
                results[name].append(run([*cmd, "--out", str(outs[name]), *sizes]))
        lines = sum(len(p.read_bytes().splitlines()) for p in outs["this tree"].rglob("*.jsonl"))
        same = same_files(*outs.values()) if args.against else None
    print(f"audit simulate --days {args.days} --incidents {args.incidents}: {lines:,} lines")
    seconds = {name: statistics.median(r["seconds"] for r in rs) for name, rs in results.items()}
    peaks = {name: max(r["rss_mb"] for r in rs) for name, rs in results.items()}
    for name in trees:
        print(
            f"{name:<10} {seconds[name]:7.1f} s (median of {args.runs})  peak {peaks[name]:,.0f} MB"
        )
    if args.against:
        ratio = peaks["--against"] / peaks["this tree"]
        print(
            f"peak: {ratio:.1f}x smaller; time: {seconds['this tree'] / seconds['--against']:.2f}x"
        )
        print("same bytes" if same else "THE OUTPUTS DIFFER")


if __name__ == "__main__":
    main()
