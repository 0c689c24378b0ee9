package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// The steps of each object's life in watch-churn, in order.
const (
	stepCreate = iota
	stepUpdate1
	stepUpdate2
	stepDelete
	steps
)

// The watch event each step causes.
var stepEvent = [steps]watch.EventType{watch.Added, watch.Modified, watch.Modified, watch.Deleted}

// writeRec is one write of watch-churn. Each is filled by the one client that made it, and read
// after every client is done.
type writeRec struct {
	// resourceVersion: of the response for a create or an update; for a delete, that of the
	// object it deleted (the DELETE of a ConfigMap answers a Status that carries none, so its
	// event is matched by name: each name is deleted once, at a resourceVersion above this).
	rv  uint64
	ack int64 // nanoseconds since the run's start, when the response arrived
	ok  bool
}

// evRec is one watch event as received.
type evRec struct {
	rv   uint64
	t    int64 // nanoseconds since the run's start, when the watcher read it
	name string
	typ  watch.EventType
}

type watcher struct {
	cs        *kubernetes.Clientset
	events    []evRec
	initial   int
	bookmarks int
	reconnect int
	closes    []string // when the server closed the watch (the first few)
	errs      errCounts
	// Events after the initial state, read by the run to know when all are in.
	count    atomic.Int64
	ready    chan struct{} // closed at the end of the initial state, or on failure
	readyErr error
}

// run opens the watch as a 1.36 informer does (a streaming list: the initial state as ADDED
// events, then a bookmark marking its end, then the changes), and resumes from the last
// resourceVersion seen if the server closes it, as a reflector does. It records every event
// until ctx ends.
func (w *watcher) run(ctx context.Context, c *config, t0 time.Time) {
	cms := w.cs.CoreV1().ConfigMaps(c.namespace)
	yes := true
	opts := metav1.ListOptions{LabelSelector: c.selector(), AllowWatchBookmarks: true,
		SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
	initialDone := false
	lastRV := ""
	defer func() {
		if !initialDone {
			close(w.ready)
		}
	}()
	for ctx.Err() == nil {
		wi, err := cms.Watch(ctx, opts)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.errs.add(err)
			if !initialDone {
				w.readyErr = err
				return
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		failed := false
		for ev := range wi.ResultChan() {
			t := int64(time.Since(t0))
			switch ev.Type {
			case watch.Bookmark:
				w.bookmarks++
				if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
					lastRV = cm.ResourceVersion
					if !initialDone && cm.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
						initialDone = true
						close(w.ready)
					}
				}
			case watch.Added, watch.Modified, watch.Deleted:
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok {
					w.errs.addKey(fmt.Sprintf("event of type %T", ev.Object), 1)
					continue
				}
				lastRV = cm.ResourceVersion
				if !initialDone {
					w.initial++
					continue
				}
				rv, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64)
				w.events = append(w.events, evRec{rv: rv, t: t, name: cm.Name, typ: ev.Type})
				w.count.Add(1)
			case watch.Error:
				// client-go reports the stream cut by the run's own stop as an error.
				if ctx.Err() != nil {
					continue
				}
				// 410 Gone and the like: a reflector would list again; here the events
				// that do not come count as missing.
				w.errs.add(apierrors.FromObject(ev.Object))
				failed = true
			}
		}
		wi.Stop()
		if ctx.Err() != nil || failed {
			if !initialDone && w.readyErr == nil {
				w.readyErr = fmt.Errorf("watch ended before the initial state did")
			}
			return
		}
		// Closed by the server: go on from the last resourceVersion seen.
		w.reconnect++
		if len(w.closes) < 4 {
			w.closes = append(w.closes, fmt.Sprintf("%.2fs after rv %s", time.Since(t0).Seconds(), lastRV))
		}
		if initialDone {
			opts = metav1.ListOptions{LabelSelector: c.selector(), AllowWatchBookmarks: true,
				ResourceVersion: lastRV}
		} else {
			w.initial = 0
		}
	}
}

func runWatchChurn(ctx context.Context, c *config) (*result, error) {
	conns, err := connect(ctx, c, c.clients+c.watchers)
	if err != nil {
		return nil, err
	}
	clients, wcs := conns[:c.clients], conns[c.clients:]
	res := &result{Label: c.label, Profile: c.profile, Namespace: c.namespace, Clients: c.clients,
		Objects: c.objects, Watchers: c.watchers, ValueBytes: c.valueBytes}
	ds, api := sampleCPU(c.dsPIDs), sampleCPU(c.apiPIDs)
	t0 := time.Now()

	// The watchers, all open before the first write.
	wctx, stopWatchers := context.WithCancel(ctx)
	defer stopWatchers()
	watchers := make([]*watcher, c.watchers)
	var wwg sync.WaitGroup
	for i := range watchers {
		w := &watcher{cs: wcs[i], ready: make(chan struct{}),
			events: make([]evRec, 0, steps*c.objects+64)}
		watchers[i] = w
		wwg.Go(func() { w.run(wctx, c, t0) })
	}
	for i, w := range watchers {
		select {
		case <-w.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("watcher %d: not open before the timeout", i)
		}
		if w.readyErr != nil {
			return nil, fmt.Errorf("watcher %d: %w", i, w.readyErr)
		}
	}

	// The writes: each client takes the next object and creates, updates, updates again and
	// deletes it, each step conditional on the version the previous one returned.
	writes := make([]writeRec, steps*c.objects)
	var next atomic.Int64
	var werrs errCounts
	var skipped atomic.Int64
	wlat := make([][]int64, c.clients)
	w0 := time.Now()
	var wg sync.WaitGroup
	for k, cs := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(k), uint64(w0.UnixNano())))
			cms := cs.CoreV1().ConfigMaps(c.namespace)
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= c.objects {
					return
				}
				var cm *corev1.ConfigMap
				var err error
				for s := range steps {
					rec := &writes[steps*i+s]
					rctx, cancel := reqCtx(ctx, c)
					st := time.Now()
					switch s {
					case stepCreate:
						cm, err = cms.Create(rctx, newConfigMap(c, r, objName(i)), metav1.CreateOptions{})
					case stepUpdate1, stepUpdate2:
						cm.Data = map[string]string{"step": strconv.Itoa(s), "payload": payload(r, c.valueBytes)}
						cm, err = cms.Update(rctx, cm, metav1.UpdateOptions{})
					case stepDelete:
						rv := cm.ResourceVersion
						rec.rv, _ = strconv.ParseUint(rv, 10, 64)
						err = cms.Delete(rctx, cm.Name, metav1.DeleteOptions{
							Preconditions: &metav1.Preconditions{UID: &cm.UID, ResourceVersion: &rv}})
					}
					now := time.Now()
					cancel()
					if err != nil {
						werrs.add(err)
						skipped.Add(int64(steps - 1 - s))
						break
					}
					if s != stepDelete {
						rec.rv, _ = strconv.ParseUint(cm.ResourceVersion, 10, 64)
					}
					rec.ack, rec.ok = int64(now.Sub(t0)), true
					wlat[k] = append(wlat[k], int64(now.Sub(st)))
				}
			}
		})
	}
	wg.Wait()
	wdur := time.Since(w0)
	var all []int64
	for _, l := range wlat {
		all = append(all, l...)
	}
	if left := c.objects - int(next.Load()); left > 0 {
		skipped.Add(int64(steps * left))
	}
	res.Write.Skipped = int(skipped.Load())
	res.Write.finish(all, &werrs, wdur)

	// Every acknowledged write is due to every watcher: wait for them (bounded), then a little
	// longer for anything extra (duplicates) to show.
	expected := res.Write.OK
	drainEnd := time.Now().Add(c.drainTimeout)
	for time.Now().Before(drainEnd) && ctx.Err() == nil {
		done := true
		for _, w := range watchers {
			if w.count.Load() < int64(expected) {
				done = false
				break
			}
		}
		if done {
			time.Sleep(300 * time.Millisecond)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopWatchers()
	wwg.Wait()
	res.DurationS = time.Since(t0).Seconds()
	res.Datastore, res.Apiserver = procDelta(ds), procDelta(api)
	res.Watch = match(writes, watchers, expected, w0.Sub(t0))
	res.Client = selfStats()
	return res, nil
}

// match pairs every event of every watcher with the write that caused it: a create or update
// by the resourceVersion its response carried (and the name and event type it must have), a
// delete by name (at a resourceVersion above the version it deleted). What pairs with no
// write is unexpected, a second event for a write is a duplicate, a write with no event is
// missing; lag is the event's arrival minus the write's acknowledgement.
func match(writes []writeRec, watchers []*watcher, expected int, writeStart time.Duration) *watchStats {
	byRV := make(map[uint64]int32, len(writes))
	byName := make(map[string]int32, len(writes)/steps)
	var lastAck int64
	for i, w := range writes {
		if !w.ok {
			continue
		}
		lastAck = max(lastAck, w.ack)
		if i%steps == stepDelete {
			byName[objName(i/steps)] = int32(i)
		} else {
			byRV[w.rv] = int32(i)
		}
	}
	ws := &watchStats{ExpectedPerWatcher: expected, Expected: expected * len(watchers),
		ByError: map[string]int{}}
	var lags []int64
	var lastEvent int64
	example := func(format string, a ...any) {
		if len(ws.Examples) < 8 {
			ws.Examples = append(ws.Examples, fmt.Sprintf(format, a...))
		}
	}
	seen := make([]bool, len(writes))
	for wi, w := range watchers {
		clear(seen)
		var pw perWatcher
		pw.Reconnects = w.reconnect
		var prev uint64
		for _, e := range w.events {
			if e.rv <= prev {
				pw.OutOfOrder++
				example("watcher %d: %s %s rv %d after rv %d", wi, e.typ, e.name, e.rv, prev)
			}
			prev = max(prev, e.rv)
			lastEvent = max(lastEvent, e.t)
			idx := int32(-1)
			if e.typ == watch.Deleted {
				if i, ok := byName[e.name]; ok && e.rv > writes[i].rv {
					idx = i
				}
			} else if i, ok := byRV[e.rv]; ok && objName(int(i)/steps) == e.name && stepEvent[i%steps] == e.typ {
				idx = i
			}
			switch {
			case idx < 0:
				pw.Unexpected++
				example("watcher %d: unexpected %s %s rv %d", wi, e.typ, e.name, e.rv)
			case seen[idx]:
				pw.Duplicate++
				example("watcher %d: duplicate %s %s rv %d", wi, e.typ, e.name, e.rv)
			default:
				seen[idx] = true
				pw.Matched++
				lag := e.t - writes[idx].ack
				if lag < 0 {
					ws.BeforeAck++
				}
				lags = append(lags, lag)
			}
		}
		pw.Missing = expected - pw.Matched
		if pw.Missing > 0 {
			n := 0
			for i, wr := range writes {
				if wr.ok && !seen[i] && n < 2 {
					example("watcher %d: missing %s of %s (rv %d)", wi, stepEvent[i%steps], objName(i/steps), wr.rv)
					n++
				}
			}
		}
		ws.Received += len(w.events)
		ws.Matched += pw.Matched
		ws.Missing += pw.Missing
		ws.Unexpected += pw.Unexpected
		ws.Duplicate += pw.Duplicate
		ws.OutOfOrder += pw.OutOfOrder
		ws.Initial += w.initial
		ws.Bookmarks += w.bookmarks
		ws.Reconnects += w.reconnect
		ws.Errors += w.errs.n
		for k, v := range w.errs.m {
			ws.ByError[k] += v
		}
		ws.PerWatcher = append(ws.PerWatcher, pw)
		if wi < 2 && len(w.closes) > 0 {
			example("watcher %d: closed by the server %d times: %s", wi, w.reconnect, strings.Join(w.closes, ", "))
		}
	}
	slices.Sort(lags)
	ws.LagP50Ms, ws.LagP99Ms, ws.LagMaxMs = ms(pct(lags, 0.5)), ms(pct(lags, 0.99)), ms(pct(lags, 1))
	if span := lastEvent - int64(writeStart); span > 0 {
		ws.EventsPerS = float64(ws.Received) / (float64(span) / 1e9)
	}
	if lastEvent > lastAck {
		ws.DrainS = float64(lastEvent-lastAck) / 1e9
	}
	return ws
}
