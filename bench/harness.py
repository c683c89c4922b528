"""Shared benchmark plumbing: argument parsing, interleaved repeats, result lines.

Every bench compares streamlog against a baseline measured in the same run
(the machine is shared and noisy, so only ratios mean anything). Each
measurement runs `repeats` times, alternating with its baseline, and the best
time of each is kept: the best run is the one least disturbed by neighbours.
"""
import argparse
import gc
import json
import os
import platform
import sys
import time


def parse_args(description, extra=None):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes, for the test suite (checks the bench still runs)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement (best kept)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    if extra:
        extra(parser)
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
    return args


def best_of(repeats, *cases):
    """Run each case `repeats` times, interleaved; return the best seconds of each.

    A case is a function, or a (setup, function) pair whose setup runs untimed
    before every run (e.g. removing the previous run's files).
    """
    best = [float("inf")] * len(cases)
    for _ in range(repeats):
        for i, case in enumerate(cases):
            setup, fn = case if isinstance(case, tuple) else (None, case)
            if setup is not None:
                setup()
            gc.collect()
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


class Results:
    def __init__(self, name):
        self.name = name
        self.rows = []

    def add(self, label, value, unit, ratio=None, target=None, baseline=None):
        ok = None if target is None or ratio is None else ratio >= target
        self.rows.append(dict(label=label, value=value, unit=unit, ratio=ratio, target=target,
                              baseline=baseline, met=ok))
        text = f"{label:<58} {value:>14,.0f} {unit}"
        if ratio is not None:
            text += f"   {ratio:6.2f}x {baseline or 'baseline'}"
        if target is not None:
            text += f"   (target >= {target}x: {'met' if ok else 'NOT met'})"
        print(text, flush=True)

    def add_absolute(self, label, value, unit, target, higher_is_better=True):
        """A figure judged against a fixed target (e.g. a latency bound) rather than a ratio."""
        ok = value >= target if higher_is_better else value <= target
        self.rows.append(dict(label=label, value=value, unit=unit, ratio=None, target=target,
                              baseline=None, met=ok))
        bound = ">=" if higher_is_better else "<="
        print(f"{label:<58} {value:>14,.1f} {unit}   (target {bound} {target:,} {unit}: "
              f"{'met' if ok else 'NOT met'})", flush=True)

    def header(self):
        print(f"# {self.name} — {time.strftime('%Y-%m-%d %H:%M')} — {platform.machine()}, "
              f"{os.cpu_count()} cpu(s), Python {platform.python_version()}")

    def write_json(self, path):
        if path:
            with open(path, "w") as f:
                json.dump({"bench": self.name, "rows": self.rows}, f, indent=2)

    def all_met(self):
        return all(r["met"] is not False for r in self.rows)


def finish(results, args):
    """The end of a bench's main(): the quick-mode note, the JSON file, the exit code."""
    if args.quick:
        print("(--quick: sizes too small for the targets, which are judged on full runs only)")
    results.write_json(args.json)
    return exit_code(results, args.quick)


def exit_code(results, quick):
    """0 unless a target was missed in a full run (quick runs only check that it works)."""
    return 0 if quick or results.all_met() else 1


def check_native():
    from streamlog.storage import codec
    if not codec.NATIVE:
        print("warning: the native codec is not loaded; figures are for the Python fallback",
              file=sys.stderr)


class FreshDatabase:
    """A streamlog database at root that fresh() recreates empty, with one topic of
    `partitions` (each measured run starts from nothing); close() closes it."""

    def __init__(self, root, topic, partitions):
        self.root, self.topic, self.partitions = root, topic, partitions
        self.db = None

    def fresh(self):
        import shutil

        import streamlog
        self.close()
        shutil.rmtree(self.root, ignore_errors=True)
        self.db = streamlog.open(self.root)
        self.db.create_topic(self.topic, partitions=self.partitions)

    def close(self):
        if self.db is not None:
            self.db.close()
            self.db = None
