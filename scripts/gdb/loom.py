# scripts/gdb/loom.py — loom's fibres in gdb, live or from a core dump.
#
#   (gdb) source scripts/gdb/loom.py       # or auto-loaded beside libloom.so
#   (gdb) info fibres                      # every live fibre: id, name, state...
#   (gdb) fibre bt 12                      # the stack of fibre 12 (not running)
#
# It reads the runtime's own structures through libloom's debug information
# (the default build has it, -O2 -g): every cluster ever made
# (loom::rt::every_cluster), each processor's and cluster's list of live
# fibres, and a fibre's saved context — Boost.Context's x86-64 frame, where
# the switch left the callee-saved registers and the return address. A
# fibre that is running is on a thread: `info threads` and `thread N; bt`.
import gdb
from gdb.unwinder import Unwinder, register_unwinder

# Boost.Context 1.74's jump_fcontext (x86-64 System V): the saved context is
# 0x40 bytes at the stored stack pointer: fpu control words (0x00), r12
# (0x08), r13, r14, r15, rbx, rbp (0x30), then the address the switch
# returns to (0x38).
CTX_PC = 0x38
CTX_SIZE = 0x40

WAIT_KINDS = {}


def _atomic(v):
    """The value inside a std::atomic (libstdc++ keeps it in _M_i, or in
    _M_b._M_p for pointers)."""
    t = v.type.strip_typedefs()
    if t.code != gdb.TYPE_CODE_STRUCT:
        return v
    for path in (("_M_i",), ("_M_b", "_M_p"), ("_M_base", "_M_i")):
        x = v
        try:
            for p in path:
                x = x[p]
            return x
        except gdb.error:
            continue
    return v


def _str(ptr):
    try:
        return ptr.string() if int(ptr) else ""
    except gdb.error:
        return "?"


def _wait_kind_name(v):
    s = str(v)
    return s.split("::")[-1]


def clusters():
    try:
        c = _atomic(gdb.parse_and_eval("'loom::rt::every_cluster'"))
    except gdb.error as e:
        raise gdb.GdbError("loom: no loom runtime with debug information here (%s)" % e)
    while int(c):
        yield c.dereference()
        c = c.dereference()["next_made_"]


def _published(cluster, count, array):
    """(index, processor) of a cluster's array of processors, as far as its count."""
    for i in range(int(_atomic(cluster[count]))):
        p = _atomic(cluster[array][i])
        if int(p):
            yield i, p.dereference()


def processors(cluster):
    return _published(cluster, "nprocs_", "procs_")


def spares(cluster):
    """The cluster's spare processors (sched/monitor.cpp)."""
    return _published(cluster, "nspares_", "spares_")


def live_fibres():
    """(fibre, cluster) for every live fibre."""
    for c in clusters():
        lists = [c["live_foreign"]] + [p["live"] for _, p in processors(c)] + [p["live"] for _, p in spares(c)]
        for lst in lists:
            f = lst["head"]
            while int(f):
                yield f.dereference(), c
                f = f.dereference()["live_next"]


def running_on(fibre, cluster):
    fid = int(fibre["id"])
    for i, p in processors(cluster):
        if int(_atomic(p["running_id"])) == fid:
            return i
    return -1


# The listing's words for the wait kinds whose enumerator names differ.
KIND_WORDS = {"rwlock_read": "rwlock (read)", "rwlock_write": "rwlock (write)", "pthread_mutex": "mutex",
              "pthread": "pthread object", "futex": "futex word", "color": "its color",
              "runtime": "runtime work"}


def _ulong(v):
    return int(v.cast(gdb.lookup_type("unsigned long")))


def _word(addr, typename):
    return gdb.Value(addr).cast(gdb.lookup_type(typename).pointer()).dereference()


def mutex_holder(kind, obj):
    """(holder, is_tcb) as the mutex records it (sched/fibre.hpp, MutexHolder),
    or (0, False)."""
    try:
        if kind == "mutex":
            m = gdb.Value(obj).cast(gdb.lookup_type("loom::Mutex").pointer()).dereference()
            return _ulong(_atomic(m["owner_"])) & ~1, False  # bit 0: waiters may be queued
        if kind == "pthread_mutex":  # capi/pthread/sync.cpp: @8 holder, @16 kind
            k = int(_word(obj + 16, "int"))
            if 0 <= k <= 3:
                return int(_word(obj + 8, "unsigned long")), k in (0, 3)
    except gdb.error:
        pass
    return 0, False


def describe(f, c):
    """(id, name, state, cluster, processor, stack size, holder, is_tcb) of
    a live fibre, as loom::dump_fibres lists it."""
    fid = int(f["id"])
    name = _str(f["name"])
    kind = _wait_kind_name(_atomic(f["wait_kind"]))
    obj = _ulong(_atomic(f["wait_object"]))
    home = _atomic(f["offload_home"])
    offloaded = int(home) != 0
    proc = -1 if offloaded else running_on(f, c)
    tail = ", offloaded" if offloaded else ""
    holder, is_tcb = 0, False
    if proc >= 0:
        state = "running"
    elif kind == "none":
        state = "blocked: a call, offloaded" if offloaded else "ready"
    elif kind in ("fd_in", "fd_out"):
        state = "blocked: fd %d (%s)%s" % (obj, "read" if kind == "fd_in" else "write", tail)
    elif kind == "rest":
        state = "resting: fd %d (no stack)" % obj
    elif kind == "join":
        state = "blocked: join fibre %d%s" % (obj, tail)
    elif kind == "offload":
        state = "blocked: %s%s" % (_str(gdb.Value(obj).cast(gdb.lookup_type("char").pointer())) if obj else "a call", tail)
    elif obj and kind not in ("sleep", "poll"):  # (their objects are for cancellation)
        state = "blocked: %s 0x%x%s" % (KIND_WORDS.get(kind, kind), obj, tail)
        holder, is_tcb = mutex_holder(kind, obj)
    else:
        state = "blocked: %s%s" % (KIND_WORDS.get(kind, kind), tail)
    cluster = int(c["id_"])
    if offloaded:
        cluster = int(home.dereference()["id_"])
        proc = int(_atomic(f["offload_proc"]))
    elif proc < 0:
        aff = f["affinity"]
        if int(aff):
            proc = int(aff.dereference()["index_"])
    base = _ulong(f["stack"]["base"])
    size = int(f["stack"]["size"]) if base else 0  # (resting: no stack)
    used, deepest = stack_use(f, base, size, proc >= 0 and not offloaded and state.startswith("running"))
    return fid, name, state, cluster, proc, size, holder, is_tcb, int(f.address), _ulong(f["tcb"]), used, deepest


GUARD = 4096  # context/stack.hpp's kGuardSize: the stack's usable bytes start above it
PAINT = 0xA5  # sched/stats.cpp's kPaint (LOOM_STACK_WATERMARK=1)


def stack_use(f, base, size, running):
    """(used, deepest) in bytes, as the listing's columns: used from the top
    down to the saved stack pointer (not for a running fibre, whose saved
    pointer is stale); deepest from the watermark paint, when it is on.
    None where the listing prints '-'."""
    if not base:
        return None, None
    lo, hi = base + GUARD, base + GUARD + size
    used = None
    if not running:
        sp = _ulong(f["ctx"]["fctx"])
        if lo < sp <= hi:
            used = hi - sp
    deepest = None
    try:
        # Quoted, as every_cluster: with an assembly frame selected (glibc's
        # syscall(), where an idle processor waits in epoll) gdb parses no
        # C++ scope, and the column went blank.
        marked = bool(gdb.parse_and_eval("'loom::rt::stack_watermark'"))
    except gdb.error:
        marked = False
    if marked:
        try:
            mem = bytes(gdb.selected_inferior().read_memory(lo, size))
            untouched = len(mem) - len(mem.lstrip(bytes([PAINT])))
            deepest = size - untouched if untouched < size else None
        except gdb.MemoryError:
            deepest = None
    return used, deepest


def _kib(n):
    return "-" if n is None else "%.1fK" % (n / 1024.0)


class InfoFibres(gdb.Command):
    """List loom's live fibres: id, name, state (running, ready, or what it is
blocked on, with a mutex's holder; a call made on the offload cluster is
listed at home, blocked in that call), cluster, processor, stack size,
bytes used down to the saved stack pointer, and the deepest point (with
LOOM_STACK_WATERMARK=1): the columns of loom::dump_fibres."""

    def __init__(self):
        super().__init__("info fibres", gdb.COMMAND_STATUS)

    def invoke(self, arg, from_tty):
        rows = sorted(describe(f, c) for f, c in live_fibres())
        print("%-8s %-20s %-60s %7s %4s %7s %7s %7s" % ("id", "name", "state", "cluster", "proc", "stack", "used",
                                                        "deepest"))
        for fid, name, state, cl, proc, size, holder, is_tcb, _, _, used, deepest in rows:
            if holder:  # the listing's "held by": a fibre's address, or its thread block
                for hid, hname, _, _, _, _, _, _, addr, tcb, _, _ in rows:
                    if holder == (tcb if is_tcb else addr):
                        state += " held by fibre %d%s" % (hid, ' "%s"' % hname if hname else "")
                        break
            print("%-8d %-20.20s %-60s %7d %4d %7s %7s %7s" % (fid, name, state, cl, proc,
                                                            "%dK" % (size // 1024) if size else "-", _kib(used),
                                                            _kib(deepest)))
        print("%d live fibre%s" % (len(rows), "" if len(rows) == 1 else "s"))


class FibreCommand(gdb.Command):
    """Commands on loom fibres: fibre bt N."""

    def __init__(self):
        super().__init__("fibre", gdb.COMMAND_STACK, prefix=True)


class FibreBacktrace(gdb.Command):
    """fibre bt N — the backtrace of loom fibre N (one that is not running),
from the context its last switch saved."""

    def __init__(self):
        super().__init__("fibre bt", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        try:
            want = int(arg.split()[0])
        except (IndexError, ValueError):
            raise gdb.GdbError("usage: fibre bt N (a fibre id from `info fibres`)")
        for f, c in live_fibres():
            if int(f["id"]) != want:
                continue
            if running_on(f, c) >= 0 or int(_atomic(f["offload_home"])):
                raise gdb.GdbError("fibre %d is running (an offloaded call runs on a loom/off thread): find its "
                                   "thread with `info threads` and use `bt` there" % want)
            sp = int(f["ctx"]["fctx"].cast(gdb.lookup_type("unsigned long")))
            if not sp:
                raise gdb.GdbError("fibre %d has no saved context" % want)
            ulong = gdb.lookup_type("unsigned long").pointer()

            def word(offset):
                return int(gdb.Value(sp + offset).cast(ulong).dereference())

            ctx = {"rip": word(CTX_PC), "rsp": sp + CTX_SIZE, "rbp": word(0x30), "rbx": word(0x28),
                   "r12": word(0x08), "r13": word(0x10), "r14": word(0x18), "r15": word(0x20)}
            print("fibre %d \"%s\" (saved stack pointer 0x%x):" % (want, _str(f["name"]), sp))
            self.walk(ctx)
            return
        raise gdb.GdbError("no live fibre %d (see `info fibres`)" % want)

    @staticmethod
    def walk(ctx):
        # gdb cannot set registers on a core dump, so the fibre's frames are
        # reached by unwinding: for the moment of this command, an unwinder
        # says that the current thread's innermost frame was called from the
        # fibre's saved context; gdb's own unwinder (the binaries' call frame
        # information) goes on from there.
        _unwinder.target = ctx
        gdb.invalidate_cached_frames()
        try:
            frame = gdb.newest_frame().older()
            level = 0
            while frame is not None and level < 64:
                sal = frame.find_sal()
                where = ""
                if sal.symtab is not None:
                    where = " at %s:%d" % (sal.symtab.filename, sal.line)
                print("#%-2d 0x%016x in %s%s" % (level, frame.pc(), frame.name() or "??", where))
                try:
                    frame = frame.older()
                except gdb.error:
                    break
                level += 1
        finally:
            _unwinder.target = None
            gdb.invalidate_cached_frames()


class _FrameId:
    """A frame's identity for create_unwind_info (gdb 13 has no FrameId)."""

    def __init__(self, sp, pc):
        self.sp = sp
        self.pc = pc


class FibreUnwinder(Unwinder):
    """Active only during `fibre bt`: the innermost frame's caller is the
    fibre's saved context."""

    def __init__(self):
        super().__init__("loom-fibre")
        self.target = None

    def __call__(self, pending_frame):
        if self.target is None or pending_frame.level() != 0:
            return None
        sp = pending_frame.read_register("rsp")
        pc = pending_frame.read_register("rip")
        info = pending_frame.create_unwind_info(_FrameId(sp, pc))
        reg_type = sp.type
        for name, value in self.target.items():
            info.add_saved_register(name, gdb.Value(value).cast(reg_type))
        return info


_unwinder = FibreUnwinder()
register_unwinder(None, _unwinder, replace=True)

InfoFibres()
FibreCommand()
FibreBacktrace()
