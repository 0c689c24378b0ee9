#!/usr/bin/env python3
"""Summary of tests/etcd_e2e.sh runs: a per-family table and the failing tests.

    tests/etcd_e2e_report.py --suite SUITE_DIR RUN_DIR [--etcd ETCD_RUN_DIR ...] [--errors]

RUN_DIR is the run to report on (usually mem_etcd); each --etcd directory is a run of the same
suite with the real etcd, shown as the comparison column (several are merged, later ones win,
so a partial re-run can complete or replace a full one). A family is one test source file:
`e2e/<file>` or `common/<file>` without `_test.go`. Counts are of top-level tests; a top-level
test with subtests passes only when all of its subtests do. --errors adds, under each failing
test, the first assertion lines of its log. --failing-families prints instead a -run pattern of
every top-level test in a family where RUN_DIR has a failure (to run the reference on those only).
"""
import argparse
import glob
import os
import re
from collections import OrderedDict

RESULT = re.compile(r"^(\s*)--- (PASS|FAIL|SKIP): (\S+) \(")
FUNC = re.compile(r"^func (Test\w+)\(t \*testing\.T\)")


def families(suite):
    fam = {}
    for pkg in ("e2e", "common"):
        for path in sorted(glob.glob(os.path.join(suite, "src", "tests", pkg, "*_test.go"))):
            name = pkg + "/" + os.path.basename(path)[: -len("_test.go")]
            with open(path, errors="replace") as f:
                for line in f:
                    m = FUNC.match(line)
                    if m:
                        fam[(pkg, m.group(1))] = name
    return fam


def load(run):
    """{(pkg, test): (status, seconds, note, failing_leaves, log_path)}"""
    res = OrderedDict()
    path = os.path.join(run, "results.tsv")
    if not os.path.exists(path):
        return res
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 4:
                continue
            pkg, test, status, secs = parts[:4]
            note = parts[4] if len(parts) > 4 else ""
            log = os.path.join(run, "logs", f"{pkg}.{test}.log")
            leaves = failing_leaves(log)
            if status == "FAIL" and not leaves:  # timed out or crashed before its FAIL line
                leaves = [test]
            res[(pkg, test)] = (status, int(secs or 0), note, leaves, log)
    return res


def failing_leaves(log):
    if not os.path.exists(log):
        return []
    failed = []
    with open(log, errors="replace") as f:
        for line in f:
            m = RESULT.match(line)
            if m and m.group(2) == "FAIL":
                failed.append(m.group(3))
    # A leaf: no other failing name below it.
    return [n for n in failed if not any(o.startswith(n + "/") for o in failed)]


def first_errors(log, limit=4):
    out = []
    if not os.path.exists(log):
        return out
    with open(log, errors="replace") as f:
        lines = f.readlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("Error:") or s.startswith("panic:") or "_test.go:" in s and (
            "rror" in s or "expected" in s or "Fatal" in s
        ):
            out.append(s[:300])
            if s.startswith("Error:") and i + 1 < len(lines):
                nxt = lines[i + 1].strip()
                if nxt and not nxt.startswith("Test:"):
                    out.append(nxt[:300])
        if len(out) >= limit:
            break
    return out


NOT_RUN = "not run: sends traffic off loopback"


def counts(rows):
    c = {"PASS": 0, "FAIL": 0, "SKIP": 0, "NOTRUN": 0}
    for r in rows:
        c["NOTRUN" if r[2] == NOT_RUN else r[0]] += 1
    return c


def fmt(c, ran=None, total=None):
    s = f"{c['PASS']} / {c['FAIL']} / {c['SKIP']}"
    if ran is not None and total is not None and ran < total:
        s += f" (ran {ran} of {total})"
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", required=True)
    ap.add_argument("run")
    ap.add_argument("--etcd", action="append", default=[])
    ap.add_argument("--errors", action="store_true")
    ap.add_argument("--failing-families", action="store_true")
    a = ap.parse_args()

    fam = families(a.suite)
    mem = load(a.run)
    ref = OrderedDict()
    for d in a.etcd:
        ref.update(load(d))

    def family(key):
        return fam.get(key, key[0] + "/?")

    by_fam = OrderedDict()
    for key in mem:
        by_fam.setdefault(family(key), []).append(key)

    if a.failing_families:
        names = sorted({k[1] for f, keys in by_fam.items() if any(mem[k][0] == "FAIL" for k in keys)
                        for k in keys if mem[k][2] != NOT_RUN})
        print("^(" + "|".join(names) + ")$")
        return

    def wall(run):
        try:
            with open(os.path.join(run, "seconds")) as f:
                t = int(f.read().strip())
            return f"{t // 60} min {t % 60} s"
        except (OSError, ValueError):
            return "?"

    total_mem = counts(mem.values())
    print(f"Run `{a.run}`: top-level tests pass / fail / skip: {fmt(total_mem)}, and "
          f"{total_mem['NOTRUN']} not run (off loopback); {wall(a.run)}.")
    if ref:
        shared = [k for k in mem if k in ref and mem[k][2] != NOT_RUN]
        walls = ", ".join(wall(d) for d in a.etcd)
        print(f"Reference (real etcd, {', '.join(a.etcd)}): {fmt(counts(ref[k] for k in shared))} over "
              f"the {len(shared)} top-level tests it ran; {walls}.")
    print()
    head = ("| family (test file) | tests | not run (off loopback) | mem_etcd pass / fail / skip "
            "| failing leaves |")
    line = "|---|---|---|---|---|"
    if ref:
        head += " etcd 3.6.16 pass / fail / skip |"
        line += "---|"
    print(head)
    print(line)
    for name in sorted(by_fam):
        keys = by_fam[name]
        rows = [mem[k] for k in keys]
        leaves = sum(len(r[3]) for r in rows)
        c = counts(rows)
        out = f"| {name} | {len(keys)} | {c['NOTRUN'] or ''} | {fmt(c)} | {leaves or ''} |"
        if ref:
            keys = [k for k in keys if mem[k][2] != NOT_RUN]
            rk = [k for k in keys if k in ref]
            out += f" {fmt(counts(ref[k] for k in rk), len(rk), len(keys)) if rk else 'not run'} |"
        print(out)
    print()
    print("Failing top-level tests (failing leaves below each; a leaf is a (sub)test that fails at the")
    print("deepest level, the test itself when it has no failing subtest):")
    print()
    for name in sorted(by_fam):
        for key in by_fam[name]:
            st, s, note, leaves, log = mem[key]
            if st != "FAIL":
                continue
            refst = ref[key][0] if key in ref else "not run"
            print(f"- `{key[1]}` ({name}; etcd: {refst}){' — ' + note if note else ''}")
            for leaf in leaves:
                if leaf != key[1]:
                    print(f"  - `{leaf}`")
            if a.errors:
                for e in first_errors(log):
                    print(f"    > {e}")
    if ref:
        worse = [k for k in mem if k in ref and ref[k][0] == "FAIL"]
        if worse:
            print()
            print("Failing on the real etcd too:")
            for k in worse:
                print(f"- `{k[1]}` ({family(k)}; mem_etcd: {mem[k][0]})")


if __name__ == "__main__":
    main()
