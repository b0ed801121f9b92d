#!/usr/bin/env python3
"""scripts/test_targets.py BUILD_DIR [CTEST_SELECTION...]

Prints the CMake targets that the tests ctest would select in BUILD_DIR
(e.g. `-L sanitize`, `-R '^io_test$'`) need, one line, space-separated, so
that a build can make those and nothing else:

  cmake --build build-asan --target $(scripts/test_targets.py build-asan -L sanitize)

A test needs every target whose file appears in its command or environment
(executables by name, libraries as lib<name>.so... or <name>.so). Files a test finds some
other way (a path compiled in) are its own target's dependencies in CMake
(add_dependencies), so building the test's target builds them too. Exits 2,
saying why, if the build is not configured or a path names no target.
"""
import json
import os
import re
import subprocess
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: scripts/test_targets.py BUILD_DIR [ctest selection arguments]")
    build = os.path.abspath(sys.argv[1])
    if not os.path.exists(os.path.join(build, "CTestTestfile.cmake")):
        print(f"test_targets: {build} is not a configured build", file=sys.stderr)
        sys.exit(2)
    shown = subprocess.run(["ctest", "--show-only=json-v1", *sys.argv[2:]], cwd=build, check=True,
                           capture_output=True, text=True).stdout
    help_out = subprocess.run(["cmake", "--build", build, "--target", "help"], check=True,
                              capture_output=True, text=True).stdout
    known = {m.group(1) for m in re.finditer(r"^\.\.\. (\S+)", help_out, re.M)}
    path_in_build = re.compile(re.escape(build) + r"/[^\s:=;,\"']+")
    needed = set()
    for test in json.loads(shown)["tests"]:
        words = list(test.get("command", []))
        for prop in test.get("properties", []):
            if prop["name"] == "ENVIRONMENT":
                words += prop["value"]
        for word in words:
            for path in path_in_build.findall(word):
                if os.path.isdir(path):
                    continue
                base = os.path.basename(path)
                lib = re.fullmatch(r"(lib)?(.+?)\.(so|a)(\.[0-9.]+)?", base)
                names = [base] + ([lib.group(2)] if lib else [])
                name = next((n for n in names if n in known), None)
                if name is None:
                    print(f"test_targets: {test['name']} uses {path}, which no target builds", file=sys.stderr)
                    sys.exit(2)
                needed.add(name)
    print(" ".join(sorted(needed)))


if __name__ == "__main__":
    main()
