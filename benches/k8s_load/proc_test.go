package main

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

// A datastore's figures cover its descendants: live ones by their own ticks and RSS, exited
// ones through the parent's cutime/cstime (a PostgreSQL backend that came and went).
func TestTreeTicks(t *testing.T) {
	self := os.Getpid()
	live := exec.Command("sleep", "30")
	if err := live.Start(); err != nil {
		t.Skip("no sleep:", err)
	}
	defer func() { _ = live.Process.Kill(); _ = live.Wait() }()
	if got := tree(self, childrenOf()); !slices.Contains(got, live.Process.Pid) {
		t.Errorf("tree(%d) = %v, without the child %d", self, got, live.Process.Pid)
	}

	before := treeTicks(self, childrenOf())
	burn := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := burn.Run(); err != nil {
		t.Skip("no sh:", err)
	}
	used := (burn.ProcessState.UserTime() + burn.ProcessState.SystemTime()).Seconds() * userHZ
	after := treeTicks(self, childrenOf())
	// The child's ticks are in the parent's after it is waited for. The two clocks differ:
	// /proc rounds to whole ticks what the kernel splits between user and system time by
	// sampling, getrusage does not; allow a tenth or two ticks (once seen: 26 against 27).
	if float64(after-before) < min(used*0.9, used-2) {
		t.Errorf("ticks %d -> %d, the exited child used %.0f", before, after, used)
	}
	if treeTicks(1<<30, nil) != -1 {
		t.Error("a process that is not there must give -1")
	}

	ps := procDelta(sampleCPU([]int{self}))
	if ps.Procs < 2 || ps.RSSMiB <= 0 || ps.PeakRSSMiB < ps.RSSMiB || ps.PSSMiB <= 0 {
		t.Errorf("procDelta of this process and its child: %+v", ps)
	}
}
