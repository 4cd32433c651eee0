"""Run the differential fuzzer (tests/fuzzgen.py) for a while with fresh random programs.

Usage: python benchmarks/fuzz.py [--minutes 10] [--batch 25]
Runs hypothesis in batches of random programs until the time is up; on a disagreement,
hypothesis shrinks the program, prints it, and this script exits 1.
"""
import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

from fuzzgen import check, programs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--batch", type=int, default=25, help="programs per hypothesis run")
    args = ap.parse_args()
    end = time.time() + 60 * args.minutes
    runs = examples = 0
    while time.time() < end:
        s = random.randrange(2**32)

        @seed(s)
        @settings(max_examples=args.batch, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(programs())
        def fuzz(program):
            nonlocal examples
            examples += 1
            check(program)
        try:
            fuzz()
        except Exception:
            print(f"disagreement found in run {runs} (seed {s}); the program is above")
            raise
        runs += 1
        print(f"{time.strftime('%H:%M:%S')}  {runs} runs, {examples} programs, no disagreement",
              flush=True)
    print(f"fuzzed {examples} programs in {args.minutes:g} minutes: no disagreement")


if __name__ == "__main__":
    main()
