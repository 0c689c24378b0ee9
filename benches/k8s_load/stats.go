package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// result is the JSON line a run prints.
type result struct {
	Label      string        `json:"label,omitempty"`
	Profile    string        `json:"profile"`
	Namespace  string        `json:"namespace"`
	Clients    int           `json:"clients"`
	Objects    int           `json:"objects"`
	Watchers   int           `json:"watchers,omitempty"`
	ValueBytes int           `json:"value_bytes"`
	DurationS  float64       `json:"duration_s"`
	Write      opStats       `json:"write"`
	Read       *readStats    `json:"read,omitempty"`
	Watch      *watchStats   `json:"watch,omitempty"`
	Density    *densityStats `json:"density,omitempty"`
	// CPU seconds used during the run and peak RSS, summed over the processes given.
	Datastore *procStats `json:"datastore,omitempty"`
	Apiserver *procStats `json:"apiserver,omitempty"`
	Client    procStats  `json:"client"`
	// kube-apiserver's own counters for the ConfigMaps at the end of the run (scrapeMetrics).
	ApiserverMetrics map[string]float64 `json:"apiserver_metrics,omitempty"`
	// What --strict fails a run for (faults), whether or not it was given.
	Faults []string `json:"faults,omitempty"`
	// A run that gave no results (the datastore or kube-apiserver did not start, the tool
	// failed): why. benches/k8s_load.sh writes such a line itself.
	Failed string `json:"failed,omitempty"`
}

// opStats: requests of one kind, every error counted by its kind.
type opStats struct {
	OK        int            `json:"ok"`
	Errors    int            `json:"errors"`
	ErrorRate float64        `json:"error_rate"`
	ByError   map[string]int `json:"by_error,omitempty"`
	// watch-churn: steps not attempted because an earlier step of the same object failed.
	Skipped   int     `json:"skipped,omitempty"`
	DurationS float64 `json:"duration_s"`
	PerS      float64 `json:"per_s"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	MaxMs     float64 `json:"max_ms"`
}

// readStats: opStats counts list requests (pages); a full list is a run of them.
type readStats struct {
	opStats
	Lists       int     `json:"lists"`
	ListsOK     int     `json:"lists_ok"`
	Items       int64   `json:"items"`
	ItemsPerS   float64 `json:"items_per_s"`
	ListP99Ms   float64 `json:"list_p99_ms"`
	Incomplete  int     `json:"incomplete"`
	PageSize    int64   `json:"page_size"`
	ListsPerSec float64 `json:"lists_per_s"`
}

type watchStats struct {
	// Expected events per watcher: one per acknowledged write.
	ExpectedPerWatcher int `json:"expected_per_watcher"`
	Expected           int `json:"expected"`
	Received           int `json:"received"`
	Matched            int `json:"matched"`
	Missing            int `json:"missing"`
	Unexpected         int `json:"unexpected"`
	Duplicate          int `json:"duplicate"`
	OutOfOrder         int `json:"out_of_order"`
	// Objects in the initial state (events before the initial-events-end bookmark).
	Initial    int            `json:"initial"`
	Bookmarks  int            `json:"bookmarks"`
	Reconnects int            `json:"reconnects"`
	Errors     int            `json:"errors"`
	ByError    map[string]int `json:"by_error,omitempty"`
	LagP50Ms   float64        `json:"lag_p50_ms"`
	LagP99Ms   float64        `json:"lag_p99_ms"`
	LagMaxMs   float64        `json:"lag_max_ms"`
	// Events received before their write's response (negative lag).
	BeforeAck  int     `json:"before_ack"`
	EventsPerS float64 `json:"events_per_s"`
	// From the last write's acknowledgement to the last event due.
	DrainS     float64      `json:"drain_s"`
	PerWatcher []perWatcher `json:"per_watcher"`
	Examples   []string     `json:"examples,omitempty"`
}

type perWatcher struct {
	Matched    int `json:"matched"`
	Missing    int `json:"missing"`
	Unexpected int `json:"unexpected"`
	Duplicate  int `json:"duplicate"`
	OutOfOrder int `json:"out_of_order"`
	Reconnects int `json:"reconnects"`
}

type procStats struct {
	PIDs int `json:"pids"`
	// The processes given and their descendants, at the end.
	Procs      int     `json:"procs,omitempty"`
	CPUS       float64 `json:"cpu_s"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	RSSMiB     float64 `json:"rss_mib"`
	PSSMiB     float64 `json:"pss_mib,omitempty"`
}

// errCounts counts errors by kind; safe for concurrent use.
type errCounts struct {
	mu sync.Mutex
	m  map[string]int
	n  int
}

func (e *errCounts) add(err error) { e.addKey(errorKey(err), 1) }

func (e *errCounts) addKey(k string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]int{}
	}
	e.m[k] += n
	e.n += n
}

// finish fills s's counts and latencies (nanoseconds) over a phase of the given length.
func (s *opStats) finish(lat []int64, errs *errCounts, d time.Duration) {
	s.OK = len(lat)
	s.Errors = errs.n
	s.ByError = errs.m
	if s.OK+s.Errors > 0 {
		s.ErrorRate = float64(s.Errors) / float64(s.OK+s.Errors)
	}
	s.DurationS = d.Seconds()
	if d > 0 {
		s.PerS = float64(s.OK) / d.Seconds()
	}
	slices.Sort(lat)
	s.P50Ms, s.P99Ms, s.MaxMs = ms(pct(lat, 0.50)), ms(pct(lat, 0.99)), ms(pct(lat, 1))
}

// pct is the nearest-rank percentile of sorted values (0 when there are none).
func pct(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(ns int64) float64 { return math.Round(float64(ns)/1e4) / 100 }

// A process's counters from /proc. Clock ticks are USER_HZ, 100 on every Linux architecture
// kube-apiserver runs on (reading sysconf would need cgo).
const userHZ = 100

// procSample: the CPU ticks of a process given by --datastore-pids or --apiserver-pids and of
// its descendants (treeTicks).
type procSample struct {
	pid   int
	ticks int64
}

func sampleCPU(pids []int) []procSample {
	out := make([]procSample, 0, len(pids))
	kids := childrenOf()
	for _, p := range pids {
		out = append(out, procSample{p, treeTicks(p, kids)})
	}
	return out
}

// cpuTicks: a process's own user and system ticks, and those of its children that have exited
// and been waited for (cutime and cstime); -1 when it is gone.
func cpuTicks(pid int) (self, exited int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1, 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// f[0] is field 3 (state); utime, stime, cutime and cstime are fields 14 to 17.
	if len(f) < 15 {
		return -1, 0
	}
	var v [4]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(f[11+i], 10, 64)
	}
	return v[0] + v[1], v[2] + v[3]
}

// parentOf reads a process's parent pid (field 4 of /proc/PID/stat); 0 when it is gone.
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	pp, _ := strconv.Atoi(f[1])
	return pp
}

// childrenOf maps every live process to its children.
func childrenOf() map[int][]int {
	out := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp := parentOf(pid); pp > 0 {
			out[pp] = append(out[pp], pid)
		}
	}
	return out
}

// tree: pid and its live descendants.
func tree(pid int, kids map[int][]int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, kids[out[i]]...)
	}
	return out
}

// treeTicks: the CPU ticks a process and its descendants have used, those that exited included
// (a child's ticks move to its parent's cutime/cstime when it is waited for, so a PostgreSQL
// backend that came and went between two samples still counts); -1 when pid itself is gone.
// A process with no children (mem_etcd, etcd, kine, kube-apiserver) is its own ticks.
func treeTicks(pid int, kids map[int][]int) int64 {
	var total int64
	for i, p := range tree(pid, kids) {
		self, exited := cpuTicks(p)
		if self < 0 {
			if i == 0 {
				return -1
			}
			continue // exited since the scan: its ticks are its parent's now, or soon
		}
		total += self + exited
	}
	return total
}

// statusKiB reads a "Key:   N kB" line of /proc/PID/status (or of another /proc/PID file).
func statusKiB(pid int, key string) float64 { return procKiB(pid, "status", key) }

func procKiB(pid int, file, key string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseFloat(f[0], 64)
				return n
			}
		}
	}
	return 0
}

// procDelta: CPU seconds since the samples were taken, and peak and current RSS now, summed
// over the processes and their live descendants. A process given that is gone meanwhile makes
// the figure -1. PSS (proportional set size) counts a page shared by n processes as 1/n in
// each, so it sums right over processes that share memory (PostgreSQL's shared buffers are in
// the RSS of every backend that touched them); for a process alone it is its RSS.
func procDelta(before []procSample) *procStats {
	if len(before) == 0 {
		return nil
	}
	ps := &procStats{PIDs: len(before)}
	var ticks int64
	kids := childrenOf()
	for _, b := range before {
		now := treeTicks(b.pid, kids)
		if now < 0 || b.ticks < 0 {
			return &procStats{PIDs: len(before), CPUS: -1, PeakRSSMiB: -1, RSSMiB: -1}
		}
		ticks += now - b.ticks
		for _, p := range tree(b.pid, kids) {
			ps.Procs++
			// The kernel raises VmHWM lazily, so VmRSS can be above it for a while.
			rss := statusKiB(p, "VmRSS") / 1024
			ps.PeakRSSMiB += max(statusKiB(p, "VmHWM")/1024, rss)
			ps.RSSMiB += rss
			ps.PSSMiB += procKiB(p, "smaps_rollup", "Pss") / 1024
		}
	}
	ps.CPUS = float64(ticks) / userHZ
	ps.PeakRSSMiB = math.Round(ps.PeakRSSMiB*10) / 10
	ps.RSSMiB = math.Round(ps.RSSMiB*10) / 10
	ps.PSSMiB = math.Round(ps.PSSMiB*10) / 10
	return ps
}

// selfStats: this process's own CPU and peak RSS (the client shares the machine's cores).
func selfStats() procStats {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return procStats{PIDs: 1, CPUS: math.Round(cpu.Seconds()*100) / 100,
		PeakRSSMiB: math.Round(float64(ru.Maxrss)/1024*10) / 10}
}

// human is the one-line summary printed after the JSON.
// faults lists what a correct datastore under kube-apiserver never shows: failed requests,
// incomplete lists, and watch events missing, unexpected, duplicated or out of order.
func (r *result) faults() []string {
	var out []string
	add := func(n int, what string) {
		if n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(r.Write.Errors, "failed writes")
	add(r.Write.Skipped, "writes skipped after a failure")
	if r.Read != nil {
		add(r.Read.Errors, "failed list requests")
		add(r.Read.Incomplete, "incomplete lists")
	}
	if w := r.Watch; w != nil {
		add(w.Missing, "missing events")
		add(w.Unexpected, "unexpected events")
		add(w.Duplicate, "duplicate events")
		add(w.OutOfOrder, "events out of order")
		add(w.Errors, "watch errors")
	}
	if d := r.Density; d != nil {
		add(d.Renewals.Errors, "failed Lease renewals")
	}
	return out
}

func (r *result) human() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s clients=%d objects=%d:", r.Label, r.Profile, r.Clients, r.Objects)
	fmt.Fprintf(&b, " writes %d ok %d errors, %.0f/s p99 %.1f ms;", r.Write.OK, r.Write.Errors, r.Write.PerS, r.Write.P99Ms)
	if r.Read != nil {
		fmt.Fprintf(&b, " reads %d lists (%d requests, %d errors, %d incomplete), %.0f req/s %.0f items/s p99 %.1f ms;",
			r.Read.ListsOK, r.Read.OK, r.Read.Errors, r.Read.Incomplete, r.Read.PerS, r.Read.ItemsPerS, r.Read.P99Ms)
	}
	if w := r.Watch; w != nil {
		fmt.Fprintf(&b, " watch %d watchers: %d/%d events matched, %d missing %d unexpected %d duplicate %d out of order %d errors %d reconnects, lag p50 %.1f p99 %.1f ms, %.0f events/s;",
			r.Watchers, w.Matched, w.Expected, w.Missing, w.Unexpected, w.Duplicate, w.OutOfOrder, w.Errors, w.Reconnects, w.LagP50Ms, w.LagP99Ms, w.EventsPerS)
	}
	if d := r.Density; d != nil {
		fmt.Fprintf(&b, " %d Leases renewed every %.0f s for %.0f s: %d renewals ok %d errors p99 %.1f ms;",
			d.Leases, d.RenewIntervalS, d.WindowS, d.Renewals.OK, d.Renewals.Errors, d.Renewals.P99Ms)
		if ds := r.Datastore; ds != nil {
			fmt.Fprintf(&b, " datastore %.1f CPU s (%.1f%%) RSS %.0f MiB peak %.0f MiB;", ds.CPUS, d.DatastoreCPUPct, ds.RSSMiB, ds.PeakRSSMiB)
		}
		if a := r.Apiserver; a != nil {
			fmt.Fprintf(&b, " kube-apiserver %.1f CPU s (%.1f%%) RSS %.0f MiB peak %.0f MiB;", a.CPUS, d.ApiserverCPUPct, a.RSSMiB, a.PeakRSSMiB)
		}
		fmt.Fprintf(&b, " client %.1f CPU s", r.Client.CPUS)
		return b.String()
	}
	if d := r.Datastore; d != nil {
		fmt.Fprintf(&b, " datastore %.1f CPU s peak %.0f MiB;", d.CPUS, d.PeakRSSMiB)
	}
	if a := r.Apiserver; a != nil {
		fmt.Fprintf(&b, " kube-apiserver %.1f CPU s peak %.0f MiB;", a.CPUS, a.PeakRSSMiB)
	}
	fmt.Fprintf(&b, " client %.1f CPU s", r.Client.CPUS)
	return b.String()
}
