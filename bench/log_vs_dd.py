#!/usr/bin/env python3
"""Log append throughput as a ratio of the disk's raw sequential write speed.

In one run, on one directory, `rounds` times: `dd` writes 1 GiB with O_DIRECT (the disk's
sequential write speed), then the criterion benchmark of `sluice-log` appends 16 KiB batches
(page cache, and durable: the same with one fsync at the end of each sample) and reads the log
back. Prints a table and writes bench/results/<date>-log-vs-dd.json with the machine, the commit
and the exact commands.

    python3 bench/log_vs_dd.py [--rounds 3] [--dir target/bench-tmp]
"""

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def dd_bytes_per_s(directory):
    target = Path(directory) / "dd.bin"
    cmd = ["dd", "if=/dev/zero", f"of={target}", "bs=1M", "count=1024", "oflag=direct"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    target.unlink(missing_ok=True)
    m = re.search(r"^(\d+) bytes .* copied, ([\d.]+) s", out, re.M)
    return int(m.group(1)) / float(m.group(2)), " ".join(cmd)


def criterion(directory):
    cmd = ["cargo", "bench", "--locked", "-p", "sluice-log", "--bench", "log", "--", "--noplot"]
    subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, "SLUICE_BENCH_DIR": str(directory)},
                   stdout=subprocess.DEVNULL)
    results = {}
    for group, name in [("append_16k_batches", "page_cache"), ("append_16k_batches", "durable"),
                        ("sequential_read", "1MiB_reads")]:
        base = ROOT / "target" / "criterion" / group / name / "new"
        mean_ns = json.loads((base / "estimates.json").read_text())["mean"]["point_estimate"]
        per_iter = json.loads((base / "benchmark.json").read_text())["throughput"]["Bytes"]
        results[f"{group}/{name}"] = per_iter / (mean_ns / 1e9)
    return results, " ".join(cmd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=str(ROOT / "target" / "bench-tmp"))
    args = ap.parse_args()
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    rounds = []
    for i in range(args.rounds):
        dd, dd_cmd = dd_bytes_per_s(args.dir)
        log, bench_cmd = criterion(args.dir)
        rounds.append({"dd_direct_bytes_per_s": dd, **{k: v for k, v in log.items()}})
        print(f"round {i + 1}: dd {dd / 1e6:.0f} MB/s, " +
              ", ".join(f"{k} {v / 1e6:.0f} MB/s ({v / dd:.2f}x)" for k, v in log.items()))
    summary = {}
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        summary[key] = {"median_MBps": statistics.median(values) / 1e6,
                        "min_MBps": min(values) / 1e6, "max_MBps": max(values) / 1e6}
    for key in ["append_16k_batches/page_cache", "append_16k_batches/durable"]:
        ratios = [r[key] / r["dd_direct_bytes_per_s"] for r in rounds]
        summary[key]["ratio_to_dd_median"] = statistics.median(ratios)
        summary[key]["ratio_to_dd_min"] = min(ratios)
        summary[key]["ratio_to_dd_max"] = max(ratios)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    report = {
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "machine": {"nproc": os.cpu_count(), "mem_total_kb": int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1)),
                    "kernel": platform.release()},
        "commands": {"dd": dd_cmd, "criterion": bench_cmd, "this": "python3 bench/log_vs_dd.py " + f"--rounds {args.rounds}"},
        "rounds": rounds,
        "summary": summary,
    }
    print("\n%-34s %10s %10s %10s %8s" % ("", "median", "min", "max", "vs dd"))
    for key, s in summary.items():
        ratio = f"{s['ratio_to_dd_median']:.2f}x" if "ratio_to_dd_median" in s else ""
        print("%-34s %7.0f MB/s %7.0f %10.0f %8s" % (key, s["median_MBps"], s["min_MBps"], s["max_MBps"], ratio))
    out = ROOT / "bench" / "results" / f"{report['date']}-log-vs-dd.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
