#!/usr/bin/env python3
"""Turns mpccl-perf --compare --csv output into a Markdown table per collective:
time and busbw of mpccl and of the other library, and mpccl's time / the
other's (below 1: mpccl is faster).

    python3 perf_table.py results.csv [more.csv ...] [--inplace]

Out-of-place rows by default; --inplace takes the in-place rows instead."""
import csv
import sys
from collections import defaultdict


def fmt_time(us):
    return "%.0f" % us if us >= 1000 else "%.1f" % us if us >= 100 else "%.2f" % us


def fmt_size(b):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div and b % div == 0:
            return "%d %sB" % (b // div, unit)
    return "%d B" % b


def main():
    args = [a for a in sys.argv[1:] if a != "--inplace"]
    inplace = "1" if "--inplace" in sys.argv[1:] else "0"
    if not args:
        sys.exit(__doc__)
    rows = defaultdict(dict)  # (collective, type, op, bytes) -> lib -> row
    for path in args:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if r["inplace"] == inplace:
                    rows[(r["collective"], r["type"], r["op"], int(r["bytes"]))][r["lib"]] = r
    colls = sorted({k[:3] for k in rows})
    for coll in colls:
        print("\n%s (%s, %s, %s)\n" % (coll[0], coll[1], coll[2], "in-place" if inplace == "1" else "out-of-place"))
        print("| size | mpccl us | other us | time ratio | mpccl busbw | other busbw |")
        print("|---:|---:|---:|---:|---:|---:|")
        for key in sorted(k for k in rows if k[:3] == coll):
            m, o = rows[key].get("mpccl"), rows[key].get("other")
            if not m or not o:
                continue
            mt, ot = float(m["time_us"]), float(o["time_us"])
            print("| %s | %s | %s | %.2f | %.1f | %.1f |" % (fmt_size(key[3]), fmt_time(mt), fmt_time(ot),
                                                            mt / ot if ot else 0, float(m["busbw"]),
                                                            float(o["busbw"])))


if __name__ == "__main__":
    main()
