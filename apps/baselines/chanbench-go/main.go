// chanbench-go — Go's chan, the peer of apps/bench/chan_loom (its header says
// the rows): GOMAXPROCS=1 unless --procs says otherwise, pinned to one CPU by
// scripts/bench chan. Measured as apps/bench/harness.hpp measures (warm-up by
// doubling batches, --repeats runs of --duration seconds, the median), and
// printed as the same one-JSON-object-per-row lines.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"
)

const producers = 4

func pingpong(n uint64, capacity int) float64 {
	ping, pong := make(chan int, capacity), make(chan int, capacity)
	done := make(chan struct{})
	t0 := time.Now()
	go func() {
		v := 0
		for i := uint64(0); i < n; i++ {
			ping <- v
			v = <-pong
		}
		done <- struct{}{}
	}()
	go func() {
		for i := uint64(0); i < n; i++ {
			v := <-ping
			pong <- v + 1
		}
		done <- struct{}{}
	}()
	<-done
	<-done
	return float64(time.Since(t0).Nanoseconds()) / 2
}

var sink int

func fanin(n uint64) float64 {
	ch := make(chan int, 64)
	per := (n + producers - 1) / producers
	t0 := time.Now()
	for p := 0; p < producers; p++ {
		go func() {
			for i := uint64(0); i < per; i++ {
				ch <- int(i)
			}
		}()
	}
	sum := 0
	for i := uint64(0); i < per*producers; i++ {
		sum += <-ch
	}
	sink = sum
	return float64(time.Since(t0).Nanoseconds()) * float64(n) / float64(per*producers)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func measure(run func(uint64) float64, warmup, duration float64, repeats int) (float64, []float64, uint64, float64) {
	start := time.Now()
	minBatch := duration * 1e9 / 20
	if minBatch < 1e6 {
		minBatch = 1e6
	}
	batch, rate := uint64(1), 0.0
	for {
		t := run(batch)
		if t >= minBatch {
			rate = float64(batch) / t
		}
		if rate > 0 && time.Since(start).Seconds() >= warmup {
			break
		}
		if t < minBatch && batch < 1<<40 {
			batch *= 2
		}
	}
	n := uint64(duration * 1e9 * rate)
	if n == 0 {
		n = 1
	}
	warm := time.Since(start).Seconds()
	var samples []float64
	for r := 0; r < repeats; r++ {
		samples = append(samples, run(n)/float64(n))
	}
	return median(samples), samples, n, warm
}

func main() {
	warmup := flag.Float64("warmup", 1, "seconds of warm-up per row")
	duration := flag.Float64("duration", 0.5, "seconds per repeat")
	repeats := flag.Int("repeats", 5, "repeats per row (the row's figure is their median)")
	benches := flag.String("bench", "chan_pingpong,chan_rendezvous,chan_fanin", "rows to run, comma-separated")
	procs := flag.Int("procs", 1, "GOMAXPROCS")
	flag.Parse()
	runtime.GOMAXPROCS(*procs)
	rows := []struct {
		name, op string
		run      func(uint64) float64
	}{
		{"chan_pingpong", "make(chan int, 1) send+receive", func(n uint64) float64 { return pingpong(n, 1) }},
		{"chan_rendezvous", "make(chan int) send+receive", func(n uint64) float64 { return pingpong(n, 0) }},
		{"chan_fanin", "make(chan int, 64), 4 producers", fanin},
	}
	want := map[string]bool{}
	for _, b := range strings.Split(*benches, ",") {
		want[b] = true
	}
	for _, r := range rows {
		if !want[r.name] {
			continue
		}
		ns, samples, n, warm := measure(r.run, *warmup, *duration, *repeats)
		out, _ := json.Marshal(map[string]interface{}{
			"bench": r.name, "system": "go", "variant": "", "ns_per_op": ns, "op": r.op, "iterations": n,
			"repeats": len(samples), "samples_ns": samples, "warmup_s": warm, "gomaxprocs": *procs,
			"go_version": runtime.Version(),
		})
		fmt.Println(string(out))
	}
	os.Exit(0)
}
