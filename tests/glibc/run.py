#!/usr/bin/env python3
"""tests/glibc/run.py — glibc 2.36's own thread and signal tests as the judge
of libloom-pthread (issue 32, item 6).

  tests/glibc/run.py --build BUILD [--lib LIB] [--only LIST] [--out DIR]
                     [--jobs N] [TEST...]

1. Unpacks Debian's glibc-source (/usr/src/glibc/glibc-*.tar.xz, package
   glibc-source, scripts/deps.sh test) into BUILD/glibc/src once. That
   tarball already carries Debian's patches: it is the source of the
   installed libc6.
2. Builds glibc's support/ library (libsupport-routines in support/Makefile)
   and every nptl/, sysdeps/pthread/, signal/ and rt/ tst-*.c standalone
   against the INSTALLED glibc: gcc with the source tree on the include path
   but never glibc's include/ (whose headers replace the public ones),
   -I sysdeps/pthread (nptl's tests include its sources), -DTIMEOUTFACTOR=1
   and the path macros glibc's Makefiles give support_paths.c (pointing at
   the installed system). A support/ file that does not compile is left out
   of the library (support-notbuilt.txt); a test that does not compile or
   link is "not built", with the compiler's first error line in the table.
   Files that glibc's Makefiles build as test modules (modules-names,
   test-extras) or never name at all are helpers, not tests.
3. Runs every built test that tests/glibc/exclusions.txt does not name, two
   at a time: plainly through glibc's own driver (support's test-driver
   main forks the test and times it out: the default), then under
   LD_PRELOAD=LIB forked and --direct. A test that fails only --direct under
   the preload is also run --direct plainly, to tell the two apart. Each run
   has a timeout: the test's own (TIMEOUT, default 20 s) plus a margin.
4. Writes OUT/results.tsv (test, built, plain, preload-forked,
   preload-direct, plain-direct, seconds) and OUT/logs/, prints the counts,
   and exits 1 naming every test that passes plainly and fails under the
   preload (either way) — the judge's rule. UNSUPPORTED (exit 77) plainly
   asks nothing of the preload; a plain pass that is UNSUPPORTED under the
   preload is a failure.

--only LIST runs the tests LIST names (one per line, `dir/name`, # comments;
tests/glibc/quick.txt is `make test`'s slice). Default OUT: BUILD/glibc/all,
or BUILD/glibc/<LIST's stem>. Objects are kept between runs in
BUILD/glibc/obj and rebuilt when their source or flags change.
"""
import argparse
import concurrent.futures as cf
import glob
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARBALLS = "/usr/src/glibc/glibc-*.tar.xz"
DIRS = ["nptl", "sysdeps/pthread", "signal", "rt"]
# Subtrees the tests never read (more than half the tarball).
SKIP_UNPACK = ("localedata", "iconvdata", "po", "manual", "benchtests", "timezone")
CC = os.environ.get("CC", "gcc")
CFLAGS = ["-std=gnu11", "-fgnu89-inline", "-O2", "-g", "-D_GNU_SOURCE", "-DTIMEOUTFACTOR=1", "-w"]
LIBS = ["-lpthread", "-lrt", "-ldl", "-lm"]
MULTIARCH = "x86_64-linux-gnu"
# glibc's support/Makefile passes these to support_paths.c for its build tree;
# here they name the installed system (OBJDIR is ours: there is no glibc build).
PATHS = {
    "INSTDIR_PATH": "/usr", "LIBDIR_PATH": f"/usr/lib/{MULTIARCH}", "BINDIR_PATH": "/usr/bin",
    "SBINDIR_PATH": "/usr/sbin", "SLIBDIR_PATH": f"/lib/{MULTIARCH}", "ROOTSBINDIR_PATH": "/sbin",
    "COMPLOCALEDIR_PATH": "/usr/lib/locale", "OBJDIR_ELF_LDSO_PATH": "/lib64/ld-linux-x86-64.so.2",
}
PASS, FAIL, UNSUP, TIMEOUT = "PASS", "FAIL", "UNSUPPORTED", "TIMEOUT"
MAX_TIMEOUT = 120
MARGIN = 10  # seconds past a test's own timeout before the harness kills it


def log(msg):
    print(msg, flush=True)


# ---- the source -----------------------------------------------------------------------------
def unpack(root):
    tars = sorted(glob.glob(TARBALLS))
    if not tars:
        sys.exit(f"glibc-tests: no {TARBALLS}: install Debian's glibc-source (scripts/deps.sh test)")
    tar = tars[-1]
    stamp = os.path.join(root, "unpacked")
    if os.path.exists(stamp) and open(stamp).read() == tar + "\n":
        return os.path.join(root, open(os.path.join(root, "topdir")).read().strip())
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    log(f"glibc-tests: unpacking {tar} into {root}")
    with tarfile.open(tar) as t:
        members = [m for m in t.getmembers() if len(m.name.split("/")) < 2 or m.name.split("/")[1] not in SKIP_UNPACK]
        t.extractall(root, members)
    top = members[0].name.split("/")[0]
    open(os.path.join(root, "topdir"), "w").write(top + "\n")
    open(stamp, "w").write(tar + "\n")
    return os.path.join(root, top)


# ---- reading glibc's Makefiles --------------------------------------------------------------
def makefile_text(src, d):
    path = os.path.join(src, d, "Makefile")
    text = open(path).read() if os.path.exists(path) else ""
    return text.replace("\\\n", " ")


def make_words(text, var):
    """The words assigned to `var` (=, :=, +=) anywhere in a Makefile."""
    words = []
    for m in re.finditer(rf"^\s*{re.escape(var)}\s*[:+]?=(.*)$", text, re.M):
        words += m.group(1).split("#")[0].split()
    return words


def test_settings(text, name, objdir, binary):
    """CFLAGS-name.c, LDFLAGS-name, LDLIBS-name, name-ARGS and name-ENV, where they are literal
    (tst-atfork2-ENV names glibc's build of libc_malloc_debug.so: left out)."""
    def subst(s):
        s = s.replace("$(objpfx)", objdir + "/").replace("$(host-test-program-cmd)", binary)
        return None if "$(" in s else shlex.split(s)

    out = {"cflags": [], "ldflags": [], "args": [], "env": []}
    m = re.fullmatch(r"tst-initializers1-(\w+)", name)  # CFLAGS-tst-initializers1-<: -std= from the name
    if m:
        out["cflags"].append("-std=" + m.group(1))
    for key, var in (("cflags", f"CFLAGS-{name}.c"), ("ldflags", f"LDFLAGS-{name}"),
                     ("ldflags", f"LDLIBS-{name}"), ("args", f"{name}-ARGS"), ("env", f"{name}-ENV")):
        for m in re.finditer(rf"^\s*{re.escape(var)}\s*[:+]?=(.*)$", text, re.M):
            words = subst(m.group(1).strip())
            if words is not None:
                out[key] += words
    return out


def helpers(src, d, text):
    """Names in a directory that glibc builds as test modules or objects, or as programs that
    a special rule of its Makefile runs (test-srcs, e.g. tst-oddstacklimit), not tests."""
    h = set(make_words(text, "modules-names")) | set(make_words(text, "test-extras"))
    h |= set(make_words(text, "test-srcs"))
    for w in make_words(text, "extra-test-objs"):
        h.add(re.sub(r"\.o[s]?$", "", w))
    return h


# ---- building --------------------------------------------------------------------------------
def first_error(text):
    for line in text.splitlines():
        if re.search(r"\berror\b|undefined reference", line):
            return line.strip()
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[0].strip() if lines else "no output"


def fresh(target, cmd, sources):
    """True when target exists, was made by the same command and is newer than its sources."""
    stamp = target + ".cmd"
    key = hashlib.sha1("\0".join(cmd).encode()).hexdigest()
    if not (os.path.exists(target) and os.path.exists(stamp) and open(stamp).read() == key):
        return False, stamp, key
    t = os.path.getmtime(target)
    return all(os.path.getmtime(s) <= t for s in sources), stamp, key


def run_build(cmd, target, sources):
    ok, stamp, key = fresh(target, cmd, sources)
    if ok:
        return None
    if os.path.exists(stamp):
        os.remove(stamp)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        if os.path.exists(target):
            os.remove(target)
        return first_error(p.stderr + p.stdout)
    open(stamp, "w").write(key)
    return None


def include_dir(src, obj):
    """The source tree as the tests see it: every top-level directory (support/, nptl/, elf/, ...)
    but bits/, whose generic headers would replace the installed ones, and include/, glibc's
    internal wrappers of the public headers. (-I SRC itself would bring both.)"""
    inc = os.path.join(obj, "include")
    os.makedirs(inc, exist_ok=True)
    for d in os.listdir(src):
        link = os.path.join(inc, d)
        if d in ("bits", "include") or os.path.lexists(link):
            continue
        os.symlink(os.path.join(src, d), link)
    return inc


# Four of glibc's internal headers that are self-contained and have no public namesake (so
# they replace nothing installed), reached last (-idirafter): gnulib's intprops.h (support's
# timespec code), array_length.h and libc-diag.h (support and a dozen tests), x86_64's
# stackinfo.h (support_stack_alloc, xclone). Nothing else of include/ or sysdeps/ is used.
SHIM_HEADERS = ("include/intprops.h", "include/array_length.h", "include/libc-diag.h",
                "sysdeps/x86_64/stackinfo.h")


def shim_dir(src, obj):
    shim = os.path.join(obj, "shim")
    os.makedirs(shim, exist_ok=True)
    for h in SHIM_HEADERS:
        link = os.path.join(shim, os.path.basename(h))
        if not os.path.lexists(link):
            os.symlink(os.path.join(src, h), link)
    return shim


def build_support(src, obj, jobs):
    text = makefile_text(src, "support")
    routines = make_words(text, "libsupport-routines")
    lfs = set()
    for m in re.finditer(r"^CFLAGS-([\w.-]+)\.c\s*\+=\s*-D_FILE_OFFSET_BITS=64", text, re.M):
        lfs.add(m.group(1))
    paths = dict(PATHS, SRCDIR_PATH=src, OBJDIR_PATH=obj)
    inc = include_dir(src, obj)
    shim = shim_dir(src, obj)
    # timespec-add.c and timespec-sub.c include the build tree's config.h and use none of it.
    support_only = os.path.join(obj, "support-shim")
    os.makedirs(support_only, exist_ok=True)
    open(os.path.join(support_only, "config.h"), "w").close()
    os.makedirs(os.path.join(obj, "support"), exist_ok=True)

    def one(r):
        c = os.path.join(src, "support", r + ".c")
        o = os.path.join(obj, "support", r + ".o")
        # (-include limits.h: temp_file.c's NAME_MAX comes through include/'s wrappers in glibc.)
        cmd = [CC, *CFLAGS, "-I", os.path.join(src, "support"), "-I", inc, "-idirafter", shim,
               "-idirafter", support_only, "-include", "limits.h", "-c", c, "-o", o]
        if r == "support_paths":
            cmd[1:1] = [f'-D{k}="{v}"' for k, v in sorted(paths.items())]
        if r in lfs:
            cmd[1:1] = ["-D_FILE_OFFSET_BITS=64", "-D_TIME_BITS=64"]
        if r.startswith("timespec"):
            cmd[1:1] = ["-fexcess-precision=standard"]
        return r, o, run_build(cmd, o, [c])

    with cf.ThreadPoolExecutor(jobs) as ex:
        results = list(ex.map(one, routines))
    objs = [o for r, o, err in results if err is None]
    notbuilt = [(r, err) for r, o, err in results if err is not None]
    with open(os.path.join(obj, "support-notbuilt.txt"), "w") as f:
        for r, err in notbuilt:
            f.write(f"support/{r}.c\t{err}\n")
    lib = os.path.join(obj, "libsupport.a")
    if not os.path.exists(lib) or any(os.path.getmtime(o) > os.path.getmtime(lib) for o in objs):
        if os.path.exists(lib):
            os.remove(lib)
        subprocess.run(["ar", "rcs", lib, *objs], check=True)
    log(f"glibc-tests: support/: {len(objs)} files built, {len(notbuilt)} left out "
        f"(need glibc's build tree: {obj}/support-notbuilt.txt)")
    return lib


def local_includes(path, dirs, seen=None):
    """A source and every file it includes with quotes, found as gcc would."""
    seen = set() if seen is None else seen
    if path in seen or not os.path.exists(path):
        return seen
    seen.add(path)
    for m in re.finditer(r'^\s*#\s*include\s+[<"]([^>"]+)[>"]', open(path, errors="replace").read(), re.M):
        inc = m.group(1)
        for d in [os.path.dirname(path)] + dirs:
            p = os.path.normpath(os.path.join(d, inc))
            if os.path.isfile(p) and ('"' in m.group(0) or inc.startswith("support/") or inc.endswith(".c")):
                local_includes(p, dirs, seen)
                break
    return seen


def test_timeout(files):
    """The test's own timeout, as support's driver computes it (TIMEOUT, default 20 s), capped at
    MAX_TIMEOUT: a test that says more (tst-pthread-timedlock-lockloop's TIMEOUT is a million
    seconds, a macro of its own that the driver reads too) gets MAX_TIMEOUT."""
    text = "\n".join(open(f, errors="replace").read() for f in files)
    macros = {"DEFAULT_TIMEOUT": "20", "NANO_PER_SEC": "1000000000LL"}
    for m in re.finditer(r"^\s*#\s*define\s+(\w+)\s+([^\n]+)$", text, re.M):
        macros.setdefault(m.group(1), m.group(2).split("/*")[0].strip())
    expr = macros.get("TIMEOUT")
    if expr is None:
        return 20
    for _ in range(3):  # names defined in terms of others
        expr = re.sub(r"\b[A-Za-z_]\w*\b", lambda n: f"({macros.get(n.group(0), n.group(0))})", expr)
    expr = re.sub(r"(\d+)[LlUu]+\b", r"\1", expr)
    if re.fullmatch(r"[\d\s()+*/-]+", expr):
        try:
            return max(1, min(MAX_TIMEOUT, int(eval(expr))))
        except Exception:
            pass
    return 20


class Test:
    def __init__(self, d, name, src):
        self.id = f"{d}/{name}"
        self.dir, self.name = d, name
        self.source = os.path.join(src, d, name + ".c")
        self.built = None  # "yes", "no", "excluded", "helper"
        self.note = ""
        self.results = {}
        self.seconds = 0.0
        self.driver = True
        self.timeout = 20
        self.settings = {"cflags": [], "ldflags": [], "args": [], "env": []}
        self.binary = None
        # glibc runs a test from its subdirectory of the source tree (tst-cancel4 reads
        # "Makefile"); sysdeps/pthread's tests are nptl's.
        self.cwd = os.path.join(src, "nptl" if d == "sysdeps/pthread" else d)


# Where glibc looks first for a source on x86_64 Linux (its sysdeps search path, the part that
# holds tests): a tst-*.c there replaces the generic one of the same name (rt/tst-timer.c is
# the stand-in for systems without POSIX timers; glibc builds sysdeps/pthread/tst-timer.c).
SYSDEPS = ["sysdeps/unix/sysv/linux/x86_64/64", "sysdeps/unix/sysv/linux/x86_64", "sysdeps/unix/sysv/linux/x86",
           "sysdeps/unix/sysv/linux", "sysdeps/x86_64/nptl", "sysdeps/x86_64", "sysdeps/x86", "sysdeps/pthread",
           "sysdeps/unix", "sysdeps/posix"]


def discover(src, obj):
    tests = []
    for d in DIRS:
        # nptl's Makefile builds sysdeps/pthread's tests too, and either may set a test's flags.
        text = makefile_text(src, d)
        if d in ("nptl", "sysdeps/pthread"):
            text = makefile_text(src, "nptl") + "\n" + makefile_text(src, "sysdeps/pthread")
        named = text
        helper = helpers(src, d, text)
        for c in sorted(glob.glob(os.path.join(src, d, "tst-*.c"))):
            name = os.path.basename(c)[:-2]
            t = Test(d, name, src)
            t.obj = obj
            t.binary = os.path.join(obj, d, name)
            t.settings = test_settings(text, name, os.path.join(obj, d), t.binary)
            over = [sd for sd in SYSDEPS if sd != d and os.path.exists(os.path.join(src, sd, name + ".c"))]
            if over:
                t.built, t.note = "helper", f"replaced by {over[0]}/{name}.c in glibc's build"
            elif name in helper:
                t.built, t.note = "helper", "a test module or object, or a program a special rule runs, in glibc's Makefile"
            elif not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])|CFLAGS-{re.escape(name)}\.c", named):
                t.built, t.note = "helper", "never named in glibc's Makefile (included by other tests)"
            tests.append(t)
    return tests


def build_modules(src, obj, lib, jobs):
    """The test DSOs glibc's Makefiles build (modules-names: tst-join7mod.so, tst-atfork2mod.so,
    ...) into OBJ/<dir>/, which the runs put on LD_LIBRARY_PATH (the tests dlopen them by name).
    One that does not build leaves its test to fail plainly."""
    jobs_list = []
    for d in DIRS:
        text = makefile_text(src, d)
        for name in make_words(text, "modules-names"):
            c = os.path.join(src, d, name + ".c")
            if not os.path.exists(c):
                continue
            so = os.path.join(obj, d, name + ".so")
            flags = test_settings(text, name + ".so", os.path.join(obj, d), so)
            cflags = test_settings(text, name, os.path.join(obj, d), so)["cflags"]
            dirs = [os.path.join(src, d), os.path.join(src, "nptl"), os.path.join(src, "sysdeps/pthread"),
                    os.path.join(obj, "include")]
            cmd = [CC, *CFLAGS, "-fPIC", "-shared", *[w for x in dirs for w in ("-I", x)], "-idirafter",
                   os.path.join(obj, "shim"), *cflags, c, "-o", so, *flags["ldflags"], "-L", os.path.join(obj, d),
                   *LIBS]
            jobs_list.append((name, cmd, so, c))
    for d in DIRS:
        os.makedirs(os.path.join(obj, d), exist_ok=True)
    with cf.ThreadPoolExecutor(jobs) as ex:
        errs = list(ex.map(lambda j: (j[0], run_build(j[1], j[2], [j[3]])), jobs_list))
    bad = {n: e for n, e in errs if e}
    log(f"glibc-tests: {len(errs) - len(bad)} test modules built" +
        (f", not built: {', '.join(sorted(bad))}" if bad else ""))
    # tst-pthread-gdb-attach looks for libthread_db in the build tree: the installed one.
    for name in ("libthread_db.so", "libthread_db.so.1"):
        db = os.path.join(obj, "nptl_db", name)
        os.makedirs(os.path.dirname(db), exist_ok=True)
        if not os.path.lexists(db):
            os.symlink(f"/lib/{MULTIARCH}/libthread_db.so.1", db)
    return bad


def module_needs(src):
    """test name -> {module: linked}, the modules its Makefile rules name: linked with the test
    ($(objpfx)tst-x: $(objpfx)mod.so) or only there when it runs ($(objpfx)tst-x.out: ...)."""
    needs = {}
    for d in DIRS:
        for m in re.finditer(r"^\$\(objpfx\)(tst-[\w-]+?)(\.out)?\s*:(.*)$", makefile_text(src, d), re.M):
            for so in re.findall(r"\$\(objpfx\)([\w-]+)\.so", m.group(3)):
                needs.setdefault(m.group(1), {})[so] = needs.get(m.group(1), {}).get(so, False) or not m.group(2)
    return needs


def build_test(t, src, lib):
    obj = os.path.dirname(lib)
    # As glibc's Makefiles: the test's own directory on the path (nptl's tests are built from
    # nptl/ and sysdeps/pthread/ alike), then the source tree (include_dir) and the shim.
    # (-iquote: Linux's sysdeps directory for the sources tests include with quotes, e.g.
    # tst-skeleton-thread-affinity.c; never for <...>, so no installed header is replaced.)
    dirs = [os.path.join(src, t.dir)]
    if t.dir in ("nptl", "sysdeps/pthread"):
        dirs += [os.path.join(src, "nptl"), os.path.join(src, "sysdeps/pthread")]
    dirs += [os.path.join(obj, "include")]
    incs = [w for d in dirs for w in ("-I", d)]
    incs += ["-idirafter", os.path.join(obj, "shim"), "-iquote", os.path.join(src, "sysdeps/unix/sysv/linux")]
    files = local_includes(t.source, dirs + [os.path.join(src, "sysdeps/unix/sysv/linux")])
    t.driver = any(f.endswith("/support/test-driver.c") or f.endswith("/test-skeleton.c") for f in files)
    t.timeout = test_timeout(sorted(files, key=lambda f: f != t.source))
    os.makedirs(os.path.dirname(t.binary), exist_ok=True)
    cmd = [CC, *CFLAGS, *incs, *t.settings["cflags"], t.source, "-o", t.binary, *t.settings["ldflags"], lib, *LIBS]
    err = run_build(cmd, t.binary, sorted(files) + [lib])
    if err:
        t.built, t.note = "no", err
    else:
        t.built = "yes"


# ---- running ---------------------------------------------------------------------------------
def kill_session(sid):
    """Every process left in the run's session (the driver's child sits in its own group)."""
    for _ in range(3):
        left = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:  # field 6 of stat: session
                left.append(int(p))
        if not left:
            return
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def run_once(t, mode, lib, out):
    """mode: plain, preload-forked, preload-direct, plain-direct. Returns (status, detail, seconds)."""
    direct = mode.endswith("direct")
    rundir = os.path.join(out, "run", mode, t.id)
    shutil.rmtree(rundir, ignore_errors=True)
    os.makedirs(rundir)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "TIMEOUTFACTOR", "TEST_DIRECT")}
    env["TMPDIR"] = rundir
    dsos = ["nptl", "sysdeps/pthread"] if t.dir in ("nptl", "sysdeps/pthread") else [t.dir]
    env["LD_LIBRARY_PATH"] = ":".join(os.path.join(t.obj, d) for d in dsos)  # the test DSOs (build_modules)
    for kv in t.settings["env"]:
        k, _, v = kv.partition("=")
        env[k] = v
    if mode.startswith("preload"):
        env["LD_PRELOAD"] = lib + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    cfg = os.path.join(rundir, ".test-config")
    argv = [t.binary]
    if direct:
        env["TEST_DIRECT"] = cfg  # the driver writes its config (timeout, expected status) and runs directly
    argv += t.settings["args"]
    limit = t.timeout + MARGIN
    logpath = os.path.join(out, "logs", f"{t.id}.{mode}.log")
    os.makedirs(os.path.dirname(logpath), exist_ok=True)
    start = time.monotonic()
    with open(logpath, "w") as logf:
        logf.write(f"$ {' '.join(t.settings['env'])}{' ' if t.settings['env'] else ''}"
                   f"{'LD_PRELOAD=' + env['LD_PRELOAD'] + ' ' if 'LD_PRELOAD' in env else ''}"
                   f"{'TEST_DIRECT=' + cfg + ' ' if direct else ''}{' '.join(argv)}\n")
        logf.flush()
        p = subprocess.Popen(argv, cwd=t.cwd, env=env, stdin=subprocess.DEVNULL, stdout=logf,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(limit)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        kill_session(p.pid)
        if timed_out:
            rc = p.wait()
        secs = time.monotonic() - start
        if timed_out:
            logf.write(f"\n*** glibc-tests: killed after {limit} s\n")
            return TIMEOUT, f"no end after {limit} s", secs
    expected_status = expected_signal = None
    if direct and os.path.exists(cfg):
        for line in open(cfg):
            k, _, v = line.strip().partition("=")
            if k == "exit":
                expected_status = int(v)
            elif k == "signal":
                expected_signal = v
    if rc < 0:
        name = signal.Signals(-rc).name
        if expected_signal and expected_signal == signal.strsignal(-rc):
            return PASS, "", secs
        return FAIL, f"killed by {name}", secs
    if expected_status is not None:
        return (PASS, "", secs) if rc == expected_status else (FAIL, f"exit {rc}, expected {expected_status}", secs)
    if expected_signal:
        return FAIL, f"exit {rc}, expected {expected_signal}", secs
    if rc == 0:
        return PASS, "", secs
    if rc == 77:
        return UNSUP, "", secs
    return FAIL, f"exit {rc}", secs


def run_test(t, lib, out):
    total = 0.0
    modes = ["plain", "preload-forked"] + (["preload-direct"] if t.driver else [])
    for mode in modes:
        st, detail, secs = run_once(t, mode, lib, out)
        t.results[mode] = (st, detail)
        total += secs
    if t.driver and t.results["preload-direct"][0] != PASS and t.results["plain"][0] == PASS:
        st, detail, secs = run_once(t, "plain-direct", lib, out)
        t.results["plain-direct"] = (st, detail)
        total += secs
    t.seconds = total


def regressions(t):
    """The preload runs that the judge's rule counts against loom."""
    if t.results.get("plain", (None,))[0] != PASS:
        return []
    bad = []
    if t.results["preload-forked"][0] != PASS:
        bad.append("preload-forked")
    if "preload-direct" in t.results and t.results["preload-direct"][0] != PASS:
        # Direct runs skip the driver's fork; a test that cannot pass directly plainly either
        # asks nothing of the preload there.
        if t.results.get("plain-direct", (PASS,))[0] == PASS:
            bad.append("preload-direct")
    return bad


def cell(r):
    if r is None:
        return "-"
    st, detail = r
    return st if not detail else f"{st} ({detail})"


# ---- main ------------------------------------------------------------------------------------
def read_list(path):
    names = []
    for line in open(path):
        line = line.split("#")[0].strip()
        if line:
            names.append(line.split()[0])
    return names


def read_exclusions(path):
    ex = {}
    for line in open(path):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, _, reason = line.strip().partition(" ")
        if not reason.strip():
            sys.exit(f"glibc-tests: {path}: {name} has no reason")
        ex[name] = reason.strip()
    return ex


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="loom's build directory")
    ap.add_argument("--lib", help="libloom-pthread.so (default BUILD/libloom-pthread.so)")
    ap.add_argument("--only", help="a file naming the tests to run")
    ap.add_argument("--out", help="results directory")
    ap.add_argument("--jobs", type=int, default=2, help="tests (and compilers) at a time, at most 2 here")
    ap.add_argument("--exclusions", default=os.path.join(HERE, "exclusions.txt"))
    ap.add_argument("--no-run", action="store_true", help="build only")
    ap.add_argument("tests", nargs="*", help="dir/name of tests to run (default all)")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    lib = os.path.abspath(a.lib or os.path.join(build, "libloom-pthread.so"))
    if not os.path.exists(lib):
        sys.exit(f"glibc-tests: no {lib}: build the target loom-pthread first")
    jobs = max(1, min(a.jobs, 2))
    root = os.path.join(build, "glibc")
    out = os.path.abspath(a.out or os.path.join(root, os.path.splitext(os.path.basename(a.only))[0]
                                                if a.only else os.path.join(root, "all")))
    t0 = time.monotonic()
    src = unpack(os.path.join(root, "src"))
    obj = os.path.join(root, "obj")
    exclusions = read_exclusions(a.exclusions)
    tests = discover(src, obj)
    by_id = {t.id: t for t in tests}
    for name in exclusions:
        if name not in by_id:
            sys.exit(f"glibc-tests: {a.exclusions} names {name}, which is not a test here")
    wanted = list(a.tests) + (read_list(a.only) if a.only else [])
    for name in wanted:
        if name not in by_id:
            sys.exit(f"glibc-tests: no test {name} (dir/name, e.g. nptl/tst-mutex1)")
    selected = [by_id[n] for n in wanted] if wanted else [t for t in tests if t.built != "helper"]
    for t in selected:
        if t.id in exclusions:
            t.built, t.note = "excluded", exclusions[t.id]

    lib_support = build_support(src, obj, jobs)
    bad_modules = build_modules(src, obj, lib_support, jobs)
    needs = module_needs(src)
    for t in selected:
        missing = sorted(set(needs.get(t.name, {})) & set(bad_modules))
        if t.built is None and missing:
            t.built, t.note = "no", f"its test module {missing[0]}.so: {bad_modules[missing[0]]}"
        t.settings["ldflags"] += [os.path.join(os.path.dirname(t.binary), m + ".so")
                                  for m, linked in sorted(needs.get(t.name, {}).items()) if linked]
    to_build = [t for t in selected if t.built is None]
    log(f"glibc-tests: building {len(to_build)} tests" + (f" ({len(selected)} selected)" if wanted else ""))
    with cf.ThreadPoolExecutor(jobs) as ex:
        list(ex.map(lambda t: build_test(t, src, lib_support), to_build))
    built = [t for t in selected if t.built == "yes"]
    nbuilt = len(built)
    t1 = time.monotonic()
    nbuilt_failed = sum(1 for t in selected if t.built == "no")
    log(f"glibc-tests: {len(built)} built, {nbuilt_failed} not built ({t1 - t0:.0f} s); "
        f"running each plainly and under LD_PRELOAD={lib}, {jobs} at a time")

    if a.no_run:
        return 0
    shutil.rmtree(os.path.join(out, "run"), ignore_errors=True)
    shutil.rmtree(os.path.join(out, "logs"), ignore_errors=True)
    done = [0]
    lock = threading.Lock()

    def go(t):
        run_test(t, lib, out)
        with lock:
            done[0] += 1
            bad = regressions(t)
            mark = "REGRESSION " + ",".join(bad) if bad else ""
            log(f"[{done[0]}/{len(built)}] {t.id}: plain {cell(t.results['plain'])}, "
                f"preload {t.results['preload-forked'][0]}/{t.results.get('preload-direct', ('-',))[0]}"
                f" {t.seconds:.1f} s {mark}")

    with cf.ThreadPoolExecutor(jobs) as ex:
        list(ex.map(go, built))
    t2 = time.monotonic()

    os.makedirs(out, exist_ok=True)
    table = os.path.join(out, "results.tsv")
    with open(table, "w") as f:
        f.write("test\tbuilt\tplain\tpreload-forked\tpreload-direct\tplain-direct\tseconds\tnote\n")
        for t in sorted(selected if wanted else tests, key=lambda t: t.id):  # helpers listed too
            r = t.results
            f.write(f"{t.id}\t{t.built}\t{cell(r.get('plain'))}\t{cell(r.get('preload-forked'))}\t"
                    f"{cell(r.get('preload-direct')) if t.driver else 'own main'}\t{cell(r.get('plain-direct'))}\t"
                    f"{t.seconds:.1f}\t{t.note}\n")
    plain_pass = [t for t in built if t.results["plain"][0] == PASS]
    preload_pass = [t for t in plain_pass if not regressions(t)]
    bad = [t for t in built if regressions(t)]
    count = lambda st: sum(1 for t in built if t.results["plain"][0] == st)
    log("")
    log(f"glibc-tests: {nbuilt} built, {nbuilt_failed} not built, "
        f"{sum(1 for t in selected if t.built == 'excluded')} excluded "
        f"({len(tests) - sum(1 for t in tests if t.built != 'helper')} helpers are not tests)")
    log(f"glibc-tests: plainly {len(plain_pass)} pass, {count(UNSUP)} unsupported, "
        f"{count(FAIL) + count(TIMEOUT)} fail (outside glibc's build tree: not counted against loom)")
    log(f"glibc-tests: under the preload {len(preload_pass)} of the {len(plain_pass)} pass, forked and direct")
    log(f"glibc-tests: table {table}, logs {out}/logs; build {t1 - t0:.0f} s, runs {t2 - t1:.0f} s")
    if bad:
        log(f"glibc-tests: {len(bad)} pass plainly and fail under LD_PRELOAD={lib}:")
        for t in sorted(bad, key=lambda t: t.id):
            log("  " + t.id + ": " + "; ".join(f"{m} {cell(t.results[m])}" for m in regressions(t)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
