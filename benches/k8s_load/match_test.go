package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/watch"
)

// Two objects' lives (create, update, update, delete) at resourceVersions 10.. and the events
// a watcher that sees everything gets.
func twoLives() ([]writeRec, []evRec) {
	var writes []writeRec
	var events []evRec
	rv := uint64(10)
	for obj := range 2 {
		for s := range steps {
			w := writeRec{rv: rv, ack: int64(rv) * 1000, ok: true}
			if s == stepDelete {
				w.rv = rv - 1 // the version deleted; the delete itself is at rv
			}
			writes = append(writes, w)
			events = append(events, evRec{rv: rv, t: int64(rv)*1000 + 500, name: objName(obj), typ: stepEvent[s]})
			rv++
		}
	}
	return writes, events
}

func watcherWith(events []evRec) *watcher { return &watcher{events: events} }

func TestMatch(t *testing.T) {
	writes, all := twoLives()
	drop := append(append([]evRec{}, all[:3]...), all[4:]...) // the first delete's event lost
	dup := append(append([]evRec{}, all...), all[7])          // the last event twice
	wrongRV := append([]evRec{}, all...)
	wrongRV[5].rv = 99 // an update's event at a version no write answered
	wrongType := append([]evRec{}, all...)
	wrongType[1].typ = watch.Added
	staleDelete := append([]evRec{}, all...)
	staleDelete[3].rv = 12 // a delete at or below the version it deleted is not that delete
	swapped := append([]evRec{}, all...)
	swapped[4], swapped[5] = swapped[5], swapped[4]

	cases := []struct {
		name string
		evs  []evRec
		want perWatcher
	}{
		{"all", all, perWatcher{Matched: 8}},
		{"drop", drop, perWatcher{Matched: 7, Missing: 1}},
		{"dup", dup, perWatcher{Matched: 8, Duplicate: 1, OutOfOrder: 1}},
		// The two events after it are below the highest version seen.
		{"wrong rv", wrongRV, perWatcher{Matched: 7, Missing: 1, Unexpected: 1, OutOfOrder: 2}},
		{"wrong type", wrongType, perWatcher{Matched: 7, Missing: 1, Unexpected: 1}},
		{"stale delete", staleDelete, perWatcher{Matched: 7, Missing: 1, Unexpected: 1, OutOfOrder: 1}},
		{"swapped", swapped, perWatcher{Matched: 8, OutOfOrder: 1}},
	}
	for _, c := range cases {
		ws := match(writes, []*watcher{watcherWith(c.evs)}, 8, 0)
		if got := ws.PerWatcher[0]; got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}

	ws := match(writes, []*watcher{watcherWith(all), watcherWith(drop)}, 8, 0)
	if ws.Expected != 16 || ws.Matched != 15 || ws.Missing != 1 || ws.Received != 15 {
		t.Errorf("totals: %+v", ws)
	}
	if ws.LagP50Ms != 0 || ws.LagMaxMs != 0 || ws.BeforeAck != 0 {
		// 500 ns each: rounds to 0.00 ms, and none before its acknowledgement.
		t.Errorf("lags: p50 %v max %v before ack %d", ws.LagP50Ms, ws.LagMaxMs, ws.BeforeAck)
	}

	// A write that failed is not expected, and its event (if it took effect after all) is
	// unexpected.
	failed := append([]writeRec{}, writes...)
	failed[5].ok = false
	ws = match(failed, []*watcher{watcherWith(all)}, 7, 0)
	if got := ws.PerWatcher[0]; got != (perWatcher{Matched: 7, Unexpected: 1}) {
		t.Errorf("failed write: %+v", got)
	}
}

func TestPct(t *testing.T) {
	v := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if pct(v, 0.5) != 5 || pct(v, 0.99) != 10 || pct(v, 1) != 10 || pct(nil, 0.99) != 0 {
		t.Errorf("pct: %d %d %d", pct(v, 0.5), pct(v, 0.99), pct(v, 1))
	}
}
