#!/usr/bin/env python3
"""scripts/test_targets.py [--build JOBS] BUILD_DIR [CTEST_SELECTION...]

Prints the CMake targets that the tests ctest would select in BUILD_DIR
(e.g. `-L sanitize`, `-R '^io_test$'`) need, one line, space-separated; with
--build, builds those and nothing else, JOBS at a time:

  scripts/test_targets.py --build 2 build-asan -L sanitize

(Not `cmake --build --target` with the list: CMake's Makefile generator
builds the targets of one such call one after another, each on one core when
it is one source file, as most tests are. --build hands them all to one make
of CMakeFiles/Makefile2, or, for any other generator, to cmake --build.)

A test needs every target whose file appears in its command or environment:
executables by name, libraries as lib<name>.so..., <name>.so, and
lib<name>.a for the target <name>_static. Those are read from the
CTestTestfile.cmake files, since ctest lists no command for a program not
yet built. Files a test finds some
other way (a path compiled in) are its own target's dependencies in CMake
(add_dependencies), so building the test's target builds them too. A path
that names no target (a directory, a file a test writes) is passed over.
Exits 2, saying why, if the build is not configured.
"""
import json
import os
import re
import subprocess
import sys


def main():
    args = sys.argv[1:]
    jobs = None
    if args[:1] == ["--build"] and len(args) >= 2:
        jobs = args[1]
        args = args[2:]
    if not args or (jobs is not None and not jobs.isdigit()):
        sys.exit("usage: scripts/test_targets.py [--build JOBS] BUILD_DIR [ctest selection arguments]")
    build = os.path.abspath(args[0])
    if not os.path.exists(os.path.join(build, "CTestTestfile.cmake")):
        print(f"test_targets: {build} is not a configured build", file=sys.stderr)
        sys.exit(2)
    makefile2 = os.path.join(build, "CMakeFiles", "Makefile2")
    if jobs is not None and os.path.exists(makefile2):
        # What the top Makefile does before any goal: configure again if a
        # CMakeLists.txt changed (before the tests are read).
        if subprocess.run(["make", "--no-print-directory", "-C", build, "cmake_check_build_system"]).returncode:
            sys.exit(1)
    shown = subprocess.run(["ctest", "--show-only=json-v1", *args[1:]], cwd=build, check=True,
                           capture_output=True, text=True).stdout
    help_out = subprocess.run(["cmake", "--build", build, "--target", "help"], check=True,
                              capture_output=True, text=True).stdout
    known = {m.group(1) for m in re.finditer(r"^\.\.\. (\S+)", help_out, re.M)}
    # A test's command and environment, from the CTestTestfile.cmake files:
    # ctest's own listing leaves out a command whose program is not built yet.
    lines = {}
    for root, dirs, files in os.walk(build):
        dirs[:] = [d for d in dirs if d != "CMakeFiles"]
        if "CTestTestfile.cmake" in files:
            text = open(os.path.join(root, "CTestTestfile.cmake")).read()
            for call in re.split(r"\n(?=[a-z_]+\()", text):  # a call may span lines
                m = re.match(r"(?:add_test|set_tests_properties)\(\[=\[(.+?)\]=\]", call)
                if m:
                    lines.setdefault(m.group(1), []).append(call)
    path_in_build = re.compile(re.escape(build) + r"/[^\s:=;,\"'\\]+")
    needed = set()
    for test in json.loads(shown)["tests"]:
        for line in lines.get(test["name"], []):
            line = re.sub(r"_BACKTRACE_TRIPLES \"[^\"]*\"", "", line)
            for path in path_in_build.findall(line):
                base = os.path.basename(path)
                lib = re.fullmatch(r"(lib)?(.+?)\.(so|a)(\.[0-9.]+)?", base)
                names = [base]
                if lib:  # this project's static libraries are <name>_static
                    names += [lib.group(2) + "_static"] * (lib.group(3) == "a") + [lib.group(2)]
                name = next((n for n in names if n in known), None)
                if name is not None:  # else a directory or a file a test writes
                    needed.add(name)
    if jobs is None:
        print(" ".join(sorted(needed)))
        return
    if os.path.exists(makefile2):
        text = open(makefile2).read()
        goals = []
        for name in sorted(needed):
            m = re.search(r"^((?:\S+/)?CMakeFiles/" + re.escape(name) + r"\.dir/all):", text, re.M)
            if not m:
                print(f"test_targets: no rule for {name} in {makefile2}", file=sys.stderr)
                sys.exit(2)
            goals.append(m.group(1))
        cmd = ["make", "--no-print-directory", "-C", build, "-f", "CMakeFiles/Makefile2", "-j", jobs, *goals]
    else:
        cmd = ["cmake", "--build", build, "-j", jobs, "--target", *sorted(needed)]
    sys.exit(subprocess.run(cmd).returncode)


if __name__ == "__main__":
    main()
