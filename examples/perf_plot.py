#!/usr/bin/env python3
"""Turns mpccl-perf --csv output into one busbw-vs-size PNG per collective.

    python3 perf_plot.py results.csv [OUTDIR]

One line per (library, datatype, op, placement); with --compare the CSV holds
both mpccl and the other library, so the plot shows them side by side."""
import csv
import os
import sys
from collections import defaultdict


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("perf_plot.py: matplotlib is not installed (pip install matplotlib); no plot written")
    src, outdir = sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else "."
    series = defaultdict(lambda: defaultdict(list))  # collective -> label -> [(bytes, busbw)]
    with open(src, newline="") as f:
        for r in csv.DictReader(f):
            place = "in-place" if r["inplace"] == "1" else "out-of-place"
            parts = [r["lib"], r["type"]] + ([r["op"]] if r["op"] != "none" else []) + [place]
            series[r["collective"]][" ".join(parts)].append((int(r["bytes"]), float(r["busbw"])))
    if not series:
        sys.exit("perf_plot.py: %s has no rows" % src)
    os.makedirs(outdir, exist_ok=True)
    for coll, lines in sorted(series.items()):
        fig, ax = plt.subplots(figsize=(8, 5))
        for label, pts in sorted(lines.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title("%s: bus bandwidth" % coll)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
        out = os.path.join(outdir, "%s_busbw.png" % coll)
        fig.savefig(out, dpi=120, bbox_inches="tight")
        plt.close(fig)
        print(out)


if __name__ == "__main__":
    main()
