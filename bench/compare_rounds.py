#!/usr/bin/env python3
"""Runs `sluice bench compare` several times and reports, per cell, the median and spread of
each broker's figures and of the Kafka ÷ Sluice ratios (BENCHMARKS.md: ≥ 3 rounds, median
and spread). Writes bench/results/<date>-compare-<durability>/ with every round's JSON and HTML
and summary.json / summary.md.

    python3 bench/compare_rounds.py [--rounds 3] [--durability defaults] [-- extra compare flags]
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--durability", default="defaults")
    ap.add_argument("--kafka-dir", default=str(Path.home() / ".cache" / "sluice" / "kafka-4.3.1"))
    ap.add_argument("extra", nargs="*", help="flags passed to sluice bench compare")
    args = ap.parse_args()
    date = datetime.date.today().isoformat()
    out = ROOT / "bench" / "results" / f"{date}-compare-{args.durability}"
    out.mkdir(parents=True, exist_ok=True)
    exe = ROOT / "target" / "release" / "sluice"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    base = [str(exe), "bench", "compare", "--durability", args.durability, "--kafka-dir", args.kafka_dir,
            "--sizes", "128,1024", "--duration", "5", "--quiet", *args.extra]
    rounds = []
    for i in range(args.rounds):
        round_dir = out / f"round{i + 1}"
        cmd = base + ["--out-dir", str(round_dir), "--work-dir", f"/tmp/sluice-compare-round{i + 1}"]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        rounds.append(json.loads((round_dir / "compare.json").read_text()))

    cells = {}
    for r in rounds:
        for series in r["report"]["series"]:
            broker = "sluice" if series["broker"] == "sluice" else "kafka"
            for run in series["runs"]:
                key = (run["config"]["record_bytes"], run["offered_rate_per_s"])
                sustained = (run["send_rate_per_s"] >= 0.95 * run["offered_rate_per_s"] and
                             run["receive_rate_per_s"] >= 0.95 * run["offered_rate_per_s"] and
                             run["lost"] == 0 and run["duplicated"] == 0 and run["failed"] == 0)
                cells.setdefault(key, {}).setdefault(broker, []).append({**run["latency"], "sustained": sustained})
    lines = [f"# sluice bench compare, {args.rounds} rounds, durability {args.durability}",
             f"commit {commit}, {date}, {os.cpu_count()} cores; command: {' '.join(base)}", "",
             "| size | offered msg/s | Sluice AVG | Sluice P99 | Kafka AVG | Kafka P99 | P99 ratio K/S median (min–max) | all sustained |",
             "|---|---|---|---|---|---|---|---|"]
    summary = {"commit": commit, "date": date, "rounds": args.rounds, "durability": args.durability,
               "command": " ".join(base), "cells": [], "throughput": []}
    for (size, rate) in sorted(cells):
        c = cells[(size, rate)]
        s, k = c.get("sluice", []), c.get("kafka", [])
        med = lambda xs, f: statistics.median(x[f] for x in xs) if xs else float("nan")
        ratios = [a["p99_us"] / b["p99_us"] for a, b in zip(k, s)]
        all_sustained = len(s) == len(k) == args.rounds and all(x["sustained"] for x in s + k)
        cell = {"size": size, "rate": rate,
                "sluice": {f: med(s, f) for f in ["avg_us", "p50_us", "p99_us", "p999_us"]},
                "kafka": {f: med(k, f) for f in ["avg_us", "p50_us", "p99_us", "p999_us"]},
                "p99_ratio_median": statistics.median(ratios) if ratios else None,
                "p99_ratio_min": min(ratios) if ratios else None, "p99_ratio_max": max(ratios) if ratios else None,
                "sluice_sustained_rounds": sum(x["sustained"] for x in s), "kafka_sustained_rounds": sum(x["sustained"] for x in k)}
        summary["cells"].append(cell)
        ratio = f"{cell['p99_ratio_median']:.1f} ({cell['p99_ratio_min']:.1f}–{cell['p99_ratio_max']:.1f})" if ratios else "–"
        lines.append(f"| {size} | {rate:.0f} | {cell['sluice']['avg_us']:.0f} µs | {cell['sluice']['p99_us']:.0f} µs | "
                     f"{cell['kafka']['avg_us']:.0f} µs | {cell['kafka']['p99_us']:.0f} µs | {ratio} | "
                     f"{'yes' if all_sustained else 'S %d/%d, K %d/%d' % (cell['sluice_sustained_rounds'], args.rounds, cell['kafka_sustained_rounds'], args.rounds)} |")
    lines += ["", "| max produce throughput | Sluice msg/s median | Kafka msg/s median | ratio S/K median (min–max) |", "|---|---|---|---|"]
    whats = sorted({t["what"] for r in rounds for t in r["throughput"]})
    for what in whats:
        per_round = []
        for r in rounds:
            ts = [t for t in r["throughput"] if t["what"] == what]
            if len(ts) == 2:  # Kafka's first, then Sluice's
                per_round.append((ts[1]["msg_per_s"], ts[0]["msg_per_s"]))
        if not per_round:
            continue
        ratios = [s / k for s, k in per_round]
        summary["throughput"].append({"what": what, "sluice_median": statistics.median(s for s, _ in per_round),
                                      "kafka_median": statistics.median(k for _, k in per_round),
                                      "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)})
        lines.append(f"| {what} | {statistics.median(s for s, _ in per_round):,.0f} | {statistics.median(k for _, k in per_round):,.0f} | "
                     f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) |")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
