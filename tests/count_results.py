#!/usr/bin/env python3
"""Counts GoogleTest cases from Bazel's test.xml files and prints a summary.

    count_results.py TESTLOGS_DIR TARGET...

For each test target (//pkg:name) reads TESTLOGS_DIR/pkg/name/**/test.xml
(sharded tests have one per shard) and counts <testcase> elements. Earlier
invocations with another layout leave their files behind: run_K_of_M
directories (--runs_per_test, which this runner never passes) are skipped,
and of the rest only the layout written last (plain or shard_K_of_N) is
read. Failed
when it holds <failure> or <error>, skipped when its result is "skipped".
A target with no test.xml (it did not build or run) counts as one failure.
Prints the failures, then "N passed, N failed, N skipped"; exits 1 on any
failure.
"""
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET


def latest_layout(root, files):
    """The files of the layout (plain or shard_K_of_N) written last."""
    groups = {}
    for f in files:
        key = re.sub(r"_\d+_of_", "_of_", os.path.relpath(os.path.dirname(f), root))
        groups.setdefault(key, []).append(f)
    newest = max(groups.values(), key=lambda g: max(os.path.getmtime(f) for f in g))
    return sorted(newest)


def count_target(testlogs, target):
    path = target.lstrip("/").replace(":", "/")
    root = os.path.join(testlogs, path)
    files = [f for f in glob.glob(os.path.join(root, "**", "test.xml"), recursive=True)
             if "run_" not in os.path.relpath(f, root)]
    if files:
        files = latest_layout(root, files)
    if not files:
        return 0, [f"{target}: no test.xml (did not build or run)"], 0
    passed, failed, skipped = 0, [], 0
    for f in files:
        try:
            root = ET.parse(f).getroot()
        except ET.ParseError as e:
            failed.append(f"{target}: unreadable {f}: {e}")
            continue
        for case in root.iter("testcase"):
            name = f"{target} {case.get('classname', '')}.{case.get('name', '')}"
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(name)
            elif case.get("result") == "skipped" or case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    return passed, failed, skipped


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    testlogs, targets = argv[1], argv[2:]
    passed, failed, skipped = 0, [], 0
    for t in targets:
        p, f, s = count_target(testlogs, t)
        passed, skipped = passed + p, skipped + s
        failed.extend(f)
    for name in failed:
        print(f"FAILED: {name}")
    print(f"{passed} passed, {len(failed)} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
