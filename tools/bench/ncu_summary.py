#!/usr/bin/env python3
"""Kernel time by name from an Nsight Compute CSV of gpu__time_duration.sum.

  ncu --profile-from-start off --clock-control none \
      --metrics gpu__time_duration.sum --csv gpu_bench --profile-step 1 > step.csv
  tools/bench/ncu_summary.py step.csv [--wall-ms MS]

Prints, per kernel name (templates and arguments cut), the launches, the
summed microseconds and the share of all kernel time, largest first, and the
total. With --wall-ms (the step's unprofiled time), also the part of the step
in which no kernel ran (launch gaps and host work): wall - kernel total.
"""
import argparse
import csv
import re
import sys

UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
         "second": 1e6, "s": 1e6}


def short(name):
    for anon in ("(anonymous namespace)::", "<unnamed>::", "unnamed>::"):
        name = name.replace(anon, "")
    name = re.sub(r"\(.*$", "", name)  # arguments
    depth, out = 0, []
    for ch in name:  # template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    name = "".join(out).replace("void ", "").strip()
    return name.split("::")[-1] or name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--wall-ms", type=float)
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    with open(args.csv, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own messages are not quoted
    rows = list(csv.DictReader(lines))
    if not rows:
        sys.exit(f"{args.csv}: no kernel rows")
    by_name = {}
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        us = float(r["Metric Value"].replace(",", "")) * UNITS[r["Metric Unit"]]
        n, t = by_name.get(short(r["Kernel Name"]), (0, 0.0))
        by_name[short(r["Kernel Name"])] = (n + 1, t + us)
    total = sum(t for _, t in by_name.values())
    launches = sum(n for n, _ in by_name.values())
    print(f"{'kernel':<48} {'launches':>9} {'us':>10} {'us each':>9} {'share':>7}")
    for name, (n, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"{name[:48]:<48} {n:>9} {t:>10.1f} {t / n:>9.2f} {100 * t / total:>6.1f}%")
    print(f"{'all kernels':<48} {launches:>9} {total:>10.1f}")
    if args.wall_ms is not None:
        print(f"step wall {1e3 * args.wall_ms:.1f} us; no kernel running "
              f"{1e3 * args.wall_ms - total:.1f} us")


if __name__ == "__main__":
    main()
