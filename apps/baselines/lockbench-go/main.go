// lockbench-go — the lock benchmark (thesis Algorithm 1) on goroutines and
// sync.Mutex: the Go peer of apps/bench/lock_{loom,pthread,boostfiber}.cpp,
// translated line for line from apps/bench/lock_harness.hpp (read that file
// for the method). Standard library only; scripts/bench builds it with
// Debian's go (1.19) and runs it with GOMAXPROCS = --processors.
//
//	T goroutines, L sync.Mutex (each on its own cache line), C = GOMAXPROCS.
//	Each loops: work t_ncs; pick a lock at random; Lock; work t_cs; Unlock.
//
// The work is the same dependent 64-bit multiply-add chain as the C++
// programs' (Go compiles it to the same imul + add), and it is calibrated the
// same way (--calibrate: 100 ms warm-up, then the median of 31 runs of
// >= 2 ms of thread CPU time).
// The controller is a goroutine asleep in time.Sleep except when it samples;
// CPU time is getrusage(RUSAGE_SELF), as in the C++ programs.
//
// Output: one JSON object on stdout. Bad flags: a message on stderr, exit 2.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

const prog = "lockbench-go"

// The chain's constants are variables passed in, not constants: with
// constants, Go 1.19 reloads both 64-bit immediates (10-byte MOVQs) inside
// the loop, whose speed then depended on the front end and wandered by 20 %
// between calibrations (C++'s loop: ±1 %). In registers, the loop is the
// same IMUL + ADD chain as the C++ one.
var lcgMul, lcgAdd uint64 = 6364136223846793005, 1442695040888963407

// work keeps the CPU busy for iters steps of a dependent multiply-add chain.
//
//go:noinline
func work(iters uint64, x uint64) uint64 {
	return chain(iters, x, lcgMul, lcgAdd)
}

//go:noinline
func chain(iters, x, mul, add uint64) uint64 {
	for i := uint64(0); i < iters; i++ {
		x = x*mul + add
	}
	return x
}

// threadCPUNs is the calling thread's CPU time (the goroutine is locked to
// its thread while calibrating).
func threadCPUNs() uint64 {
	var ts syscall.Timespec
	// CLOCK_THREAD_CPUTIME_ID = 3
	_, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0)
	if e != 0 {
		fmt.Fprintf(os.Stderr, "%s: clock_gettime: %v\n", prog, e)
		os.Exit(1)
	}
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

var sinkCal uint64

func calibrate() float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n, x := uint64(1<<12), uint64(1)
	// 100 ms warm-up first: the first milliseconds of a process run slower
	// (6 calibrations in a row gave 635, 743, then 797 ± 4 iterations/µs).
	for t0 := threadCPUNs(); threadCPUNs()-t0 < 100000000; {
		x = work(n, x)
	}
	for {
		t0 := threadCPUNs()
		x = work(n, x)
		if threadCPUNs()-t0 >= 2000000 {
			break
		}
		n *= 2
	}
	t := make([]uint64, 0, 31)
	for i := 0; i < 31; i++ {
		t0 := threadCPUNs()
		x = work(n, x)
		t = append(t, threadCPUNs()-t0)
	}
	sort.Slice(t, func(i, j int) bool { return t[i] < t[j] })
	sinkCal += x
	return float64(n) / (float64(t[len(t)/2]) / 1000.0)
}

type counter struct {
	n uint64
	_ [56]byte
}

type paddedMutex struct {
	m sync.Mutex
	_ [56]byte
}

func processCPUNs() (cpu uint64, vol, invol int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fmt.Fprintf(os.Stderr, "%s: getrusage: %v\n", prog, err)
		os.Exit(1)
	}
	cpu = uint64(ru.Utime.Sec)*1e9 + uint64(ru.Utime.Usec)*1000 + uint64(ru.Stime.Sec)*1e9 + uint64(ru.Stime.Usec)*1000
	return cpu, ru.Nvcsw, ru.Nivcsw
}

// machineBusyNs is the whole machine's busy time so far (/proc/stat: user,
// nice, system, irq, softirq, steal) in ns, or 0; as the C++ harness.
func machineBusyNs() uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line := strings.SplitN(string(b), "\n", 2)[0]
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var v [8]uint64
	for i := range v {
		x, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return 0
		}
		v[i] = x
	}
	// USER_HZ is 100 on Linux/amd64 (sysconf(_SC_CLK_TCK) without cgo).
	return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) * (1e9 / 100)
}

func maxRSSKiB() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Maxrss
}

func usageError(msg string) {
	fmt.Fprintf(os.Stderr, "%s: %s (try --help)\n", prog, msg)
	os.Exit(2)
}

func sleepS(s float64) { time.Sleep(time.Duration(s * 1e9)) }

// others is the CPUs' worth of time other processes took during the window.
func others(m0, m1 uint64, cpu, wall float64) interface{} {
	if m0 == 0 || m1 == 0 {
		return nil
	}
	return math.Max(0, float64(m1-m0)-cpu) / (wall * 1e9)
}

func allowedCPUs() string {
	// sched_getaffinity(0, ...): the mask taskset gave this process.
	var mask [16]uint64
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, uintptr(len(mask)*8), uintptr(unsafe.Pointer(&mask[0])))
	if e != 0 {
		return "?"
	}
	var cpus []string
	for w, bits := range mask {
		for b := 0; b < 64; b++ {
			if bits&(1<<uint(b)) != 0 {
				cpus = append(cpus, fmt.Sprint(w*64+b))
			}
		}
	}
	return strings.Join(cpus, ",")
}

func main() {
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	threads := fs.Uint("threads", 1, "goroutines (workers)")
	locks := fs.Uint("locks", 1, "locks")
	processors := fs.Uint("processors", 1, "GOMAXPROCS")
	tcs := fs.Uint64("t-cs", 20000, "work inside the lock, ns")
	tncs := fs.Uint64("t-ncs", 20000, "work outside the lock, ns")
	duration := fs.Float64("duration", 1, "measured window, seconds")
	warmup := fs.Float64("warmup", 0.5, "running time before the window, seconds")
	idle := fs.Float64("idle", 0, "after the workers exit, measure the CPU the idle runtime burns over S seconds")
	loopPerUs := fs.Float64("loop-per-us", 0, "work-loop iterations per µs (default: calibrate here)")
	seed := fs.Uint64("seed", 1, "seed of the workers' lock choices")
	noLocks := fs.Bool("no-locks", false, "the work reference: the same loop without locking")
	calibrateOnly := fs.Bool("calibrate", false, "print {\"loop_iters_per_us\": X} for this CPU and exit")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s --threads T --locks L --processors C [--t-cs NS] [--t-ncs NS] [--duration S] [--warmup S] [--idle S] [--loop-per-us X] [--seed N]\n"+
			"The lock benchmark (thesis Algorithm 1) on goroutines + sync.Mutex; prints one JSON object.\n", prog)
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2) // the flag package has printed what was wrong
	}
	if fs.NArg() > 0 {
		usageError(fmt.Sprintf("unexpected argument '%s'", fs.Arg(0)))
	}
	if *calibrateOnly {
		fmt.Printf("{\"loop_iters_per_us\":%.6g}\n", calibrate())
		return
	}
	switch {
	case *threads < 1 || *threads > 100000:
		usageError(fmt.Sprintf("bad value %d for --threads (1 to 100000)", *threads))
	case *locks < 1 || *locks > 100000:
		usageError(fmt.Sprintf("bad value %d for --locks (1 to 100000)", *locks))
	case *processors < 1 || *processors > 1024:
		usageError(fmt.Sprintf("bad value %d for --processors (1 to 1024)", *processors))
	case *tcs < 1 || *tcs > 1e8:
		usageError(fmt.Sprintf("bad value %d for --t-cs (1 to 1e8 ns)", *tcs))
	case *tncs < 1 || *tncs > 1e8:
		usageError(fmt.Sprintf("bad value %d for --t-ncs (1 to 1e8 ns)", *tncs))
	case !(*duration > 0 && *duration <= 3600):
		usageError(fmt.Sprintf("bad value %g for --duration (above 0 to 3600)", *duration))
	case !(*warmup >= 0 && *warmup <= 3600):
		usageError(fmt.Sprintf("bad value %g for --warmup (0 to 3600)", *warmup))
	case !(*idle >= 0 && *idle <= 3600):
		usageError(fmt.Sprintf("bad value %g for --idle (0 to 3600)", *idle))
	case !(*loopPerUs >= 0 && *loopPerUs <= 1e6) || math.IsNaN(*loopPerUs):
		usageError(fmt.Sprintf("bad value %g for --loop-per-us", *loopPerUs))
	case *seed < 1:
		usageError("bad value 0 for --seed (want a positive integer)")
	}
	runtime.GOMAXPROCS(int(*processors))
	rate := *loopPerUs
	if rate == 0 {
		rate = calibrate()
	}
	csIters := uint64(float64(*tcs)*rate/1000 + 0.5)
	ncsIters := uint64(float64(*tncs)*rate/1000 + 0.5)

	T, L := int(*threads), uint64(*locks)
	mutexes := make([]paddedMutex, L)
	counts := make([]counter, T)
	var stop int32
	var sink uint64
	var wg sync.WaitGroup
	for i := 0; i < T; i++ {
		wg.Add(1)
		go func(index int) {
			defer wg.Done()
			r := (*seed * 0x9E3779B97F4A7C15) ^ (uint64(index+1) * 0xD1B54A32D192ED03)
			if r == 0 {
				r = 1
			}
			x, count := uint64(index), uint64(0)
			for atomic.LoadInt32(&stop) == 0 {
				x = work(ncsIters, x)
				r ^= r >> 12
				r ^= r << 25
				r ^= r >> 27
				l := ((r * 0x2545F4914F6CDD1D) >> 32) % L
				if *noLocks {
					x = work(csIters, x+l)
				} else {
					mutexes[l].m.Lock()
					x = work(csIters, x)
					mutexes[l].m.Unlock()
				}
				count++
				atomic.StoreUint64(&counts[index].n, count)
			}
			atomic.AddUint64(&sink, x)
		}(i)
	}
	total := func() (s uint64) {
		for i := range counts {
			s += atomic.LoadUint64(&counts[i].n)
		}
		return
	}

	// The controller: this goroutine (main), asleep but for the samples.
	sleepS(*warmup)
	i0, t0 := total(), time.Now()
	c0, v0, n0 := processCPUNs()
	m0 := machineBusyNs()
	sleepS(*duration)
	i1, t1 := total(), time.Now()
	c1, v1, n1 := processCPUNs()
	m1 := machineBusyNs()
	atomic.StoreInt32(&stop, 1)
	wg.Wait()

	iters := float64(i1 - i0)
	wall := t1.Sub(t0).Seconds()
	cpu := float64(c1 - c0)
	nan := func(v float64) interface{} {
		if iters == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return v
	}
	variant := ""
	type kv struct {
		k string
		v interface{}
	}
	row := []kv{
		{"bench", "lock"}, {"system", "go"}, {"variant", variant},
		{"threads", T}, {"locks", L}, {"processors", *processors},
		{"work_ns", *tncs}, {"t_cs_ns", *tcs}, {"t_ncs_ns", *tncs},
		{"iterations_per_s", iters / wall},
		{"overhead_ns_per_iter", nan(cpu/iters - float64(*tcs+*tncs))},
		{"cpu_ns_per_iter", nan(cpu / iters)},
		{"cpu_utilisation", cpu / (wall * 1e9)},
		{"iterations", i1 - i0}, {"window_s", wall}, {"warmup_s", *warmup},
		{"no_locks", *noLocks},
		{"kernel_switches_per_iter", nan(float64((v1-v0)+(n1-n0)) / iters)},
		{"involuntary_switches_per_iter", nan(float64(n1-n0) / iters)},
		{"others_cpus", others(m0, m1, cpu, wall)},
		{"loop_iters_per_us", rate}, {"cs_loop_iters", csIters}, {"ncs_loop_iters", ncsIters},
		{"cpus", allowedCPUs()}, {"max_rss_kib", maxRSSKiB()},
		{"mutex", "sync.Mutex"}, {"gomaxprocs", runtime.GOMAXPROCS(0)}, {"go_version", runtime.Version()},
	}
	if *idle > 0 {
		ci, _, _ := processCPUNs()
		w0 := time.Now()
		sleepS(*idle)
		ce, _, _ := processCPUNs()
		row = append(row, kv{"idle_cpu_ms_per_s", float64(ce-ci) / 1e6 / time.Since(w0).Seconds()})
	}
	// One flat JSON object, keys in this order.
	var b strings.Builder
	b.WriteByte('{')
	for i, e := range row {
		k, _ := json.Marshal(e.k)
		v, _ := json.Marshal(e.v)
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteString("}\n")
	os.Stdout.WriteString(b.String())
	if sink == 42 && sinkCal == 42 {
		fmt.Fprint(os.Stderr, " ")
	}
}
