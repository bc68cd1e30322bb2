"""Takedown by class over a year, pushed down to DuckDB, against the in-memory fold.

Usage::

    python benchmarks/bench_takedown.py --store STORE [--copies 12] [--year DIR] [--runs 1]
                                        [--in-memory]

The year is that of ``bench_year.py`` (``--copies`` shifted copies of ``--store``, kept in
``--year`` when given, reused when built). Each measurement is a fresh process (wall time and
peak RSS): ``audit.analysis.questions.takedown_by_class`` over the whole year, as of its last
receipt; with ``--in-memory``, also the same question the way ``audit analyze --store`` answers
it (``load_first_receipts`` then ``takedown_analysis``), alternated. The script prints the
medians and, from one more run in this process, the question's answer.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_store import measure
from bench_year import year_of

PUSHED = (
    "import sys, warnings; warnings.simplefilter('ignore');"
    "from audit.analysis.questions import takedown_by_class;"
    "takedown_by_class(sys.argv[1], as_of=sys.argv[2])"
)
IN_MEMORY = (
    "import sys, warnings; warnings.simplefilter('ignore');"
    "from audit.analysis.analyze import takedown_analysis;"
    "from audit.ingest.query import load_first_receipts;"
    "from audit.timeutil import as_utc; t = as_utc(sys.argv[2]);"
    "takedown_analysis(load_first_receipts(sys.argv[1], start=None, end=t), as_of=t)"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True, help="a store of a month or a few")
    ap.add_argument("--copies", type=int, default=12)
    ap.add_argument("--year", type=Path, help="keep the year store here (reused when built)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--in-memory", action="store_true", help="also time the in-memory fold")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.store.parent) as d:
        year = args.year or Path(d) / "year"
        records, as_of = year_of(args.store, year, args.copies)
        print(f"{records:,} records in the store ({args.copies} copies), as of {as_of}")
        kinds = {"takedown_by_class (DuckDB)": lambda: [sys.executable, "-c", PUSHED]}
        if args.in_memory:
            kinds["first receipts + fold"] = lambda: [sys.executable, "-c", IN_MEMORY]
        with_args = {k: (lambda f=f: [*f(), str(year), as_of]) for k, f in kinds.items()}
        results = measure(with_args, args.runs)
        for name, rs in results.items():
            secs = statistics.median(r["seconds"] for r in rs)
            rss = max(r["rss_mb"] for r in rs)
            print(f"{name:<28} {secs:7.1f} s  peak RSS {rss:6.0f} MB")
        import warnings

        from audit.analysis.questions import takedown_by_class

        warnings.simplefilter("ignore")
        got = takedown_by_class(year, as_of=as_of)
        print(got[["group", "n", "events", "censored", "median_h", "p90_h"]].to_string())


if __name__ == "__main__":
    main()
