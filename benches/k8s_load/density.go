package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// leaseNamespace: where kubelets keep their node Leases (kube-apiserver creates it).
const leaseNamespace = "kube-node-lease"

// densityStats: what an idle cluster costs, in the density profile.
type densityStats struct {
	ConfigMaps     int     `json:"configmaps"`
	Leases         int     `json:"leases"`
	RenewIntervalS float64 `json:"renew_interval_s"`
	// The measured window (after one warm-up round of renewals).
	WindowS float64 `json:"window_s"`
	// Renewals during the window (due: Leases x window / interval).
	Renewals opStats `json:"renewals"`
	Due      int     `json:"renewals_due"`
	// Renewals that met a conflict (the Lease changed since the renewer last saw it) and were
	// retried on the Lease read back, as kubelet does.
	Conflicts int `json:"conflicts,omitempty"`
	// CPU seconds over the window divided by its length, in percent of one core.
	DatastoreCPUPct float64 `json:"datastore_cpu_pct"`
	ApiserverCPUPct float64 `json:"apiserver_cpu_pct"`
}

// leaseAPI is the part of client-go's Lease client a renewer uses (a fake in the tests).
type leaseAPI interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
}

// renewer keeps one node's Lease, as kubelet's node lease controller does: every interval it
// writes spec.renewTime = now on the Lease it last got back; on a conflict it reads the Lease
// and tries once more.
type renewer struct {
	api       leaseAPI
	lease     *coordinationv1.Lease
	conflicts int
}

// renew makes one renewal; now is the renewTime written.
func (r *renewer) renew(ctx context.Context, now time.Time) error {
	l := r.lease.DeepCopy()
	l.Spec.RenewTime = &metav1.MicroTime{Time: now}
	got, err := r.api.Update(ctx, l, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		r.conflicts++
		cur, gerr := r.api.Get(ctx, r.lease.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		cur.Spec.RenewTime = &metav1.MicroTime{Time: now}
		got, err = r.api.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	r.lease = got
	return nil
}

// renewOffset spreads n renewers evenly over one interval (kubelets do not renew in step).
func renewOffset(i, n int, interval time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(int64(interval) * int64(i) / int64(n))
}

func nodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

func newLease(i int, now time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Namespace: leaseNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ref(nodeName(i)),
			LeaseDurationSeconds: ref[int32](40), RenewTime: &metav1.MicroTime{Time: now}},
	}
}

func ref[T any](v T) *T { return &v }

// runDensity: --clients clients create --objects ConfigMaps and --leases node Leases, then
// every Lease is renewed every --renew-interval; after one interval (every Lease renewed once)
// the datastore's and kube-apiserver's CPU is measured over --window, and their RSS at its end.
func runDensity(ctx context.Context, c *config) (*result, error) {
	clients, err := connect(ctx, c, c.clients)
	if err != nil {
		return nil, err
	}
	if err := ensureNamespace(ctx, clients[0], leaseNamespace); err != nil {
		return nil, err
	}
	res := &result{Label: c.label, Profile: c.profile, Namespace: c.namespace, Clients: c.clients,
		Objects: c.objects, ValueBytes: c.valueBytes}
	d := &densityStats{ConfigMaps: c.objects, Leases: c.leases,
		RenewIntervalS: c.renewInterval.Seconds(), WindowS: c.window.Seconds()}
	res.Density = d
	t0 := time.Now()

	// The objects: ConfigMaps, then Leases, each client taking the next not yet taken.
	var next atomic.Int64
	var werrs errCounts
	wlat := make([][]int64, c.clients)
	renewers := make([]*renewer, c.leases)
	var wg sync.WaitGroup
	for k, cs := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(k), uint64(t0.UnixNano())))
			cms := cs.CoreV1().ConfigMaps(c.namespace)
			leases := cs.CoordinationV1().Leases(leaseNamespace)
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= c.objects+c.leases {
					return
				}
				rctx, cancel := reqCtx(ctx, c)
				s := time.Now()
				var err error
				if i < c.objects {
					_, err = cms.Create(rctx, newConfigMap(c, r, objName(i)), metav1.CreateOptions{})
				} else {
					var l *coordinationv1.Lease
					j := i - c.objects
					if l, err = leases.Create(rctx, newLease(j, s), metav1.CreateOptions{}); err == nil {
						renewers[j] = &renewer{api: leases, lease: l}
					}
				}
				dur := time.Since(s)
				cancel()
				if err != nil {
					werrs.add(err)
					continue
				}
				wlat[k] = append(wlat[k], int64(dur))
			}
		})
	}
	wg.Wait()
	var all []int64
	for _, l := range wlat {
		all = append(all, l...)
	}
	res.Write.finish(all, &werrs, time.Since(t0))
	if left := c.objects + c.leases - res.Write.OK - res.Write.Errors; left > 0 {
		werrs.addKey("not attempted: run timed out", left)
		res.Write.finish(all, &werrs, time.Since(t0))
	}

	// The renewals: each Lease on its own schedule, offset over the first interval.
	var measuring atomic.Bool
	var rerrs errCounts
	rlat := make([][]int64, c.leases)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	r0 := time.Now()
	for i, rn := range renewers {
		if rn == nil {
			continue // its create failed (counted above)
		}
		wg.Go(func() {
			next := r0.Add(renewOffset(i, c.leases, c.renewInterval))
			for {
				select {
				case <-rctx.Done():
					return
				case <-time.After(time.Until(next)):
				}
				next = next.Add(c.renewInterval)
				qctx, cancel := reqCtx(rctx, c)
				s := time.Now()
				err := rn.renew(qctx, s)
				dur := time.Since(s)
				cancel()
				if !measuring.Load() || rctx.Err() != nil {
					continue
				}
				if err != nil {
					rerrs.add(err)
				} else {
					rlat[i] = append(rlat[i], int64(dur))
				}
			}
		})
	}
	// Warm-up: one round, every Lease renewed once.
	select {
	case <-ctx.Done():
	case <-time.After(c.renewInterval):
	}
	ds, api := sampleCPU(c.dsPIDs), sampleCPU(c.apiPIDs)
	measuring.Store(true)
	w0 := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(c.window):
	}
	measuring.Store(false)
	wdur := time.Since(w0)
	res.Datastore, res.Apiserver = procDelta(ds), procDelta(api)
	stop()
	wg.Wait()

	all = all[:0]
	for _, l := range rlat {
		all = append(all, l...)
	}
	d.Renewals.finish(all, &rerrs, wdur)
	d.WindowS = math.Round(wdur.Seconds()*100) / 100
	d.Due = int(float64(c.leases) * wdur.Seconds() / c.renewInterval.Seconds())
	for _, rn := range renewers {
		if rn != nil {
			d.Conflicts += rn.conflicts
		}
	}
	pct := func(p *procStats) float64 {
		if p == nil || p.CPUS < 0 || wdur <= 0 {
			return 0
		}
		return math.Round(p.CPUS/wdur.Seconds()*1000) / 10
	}
	d.DatastoreCPUPct, d.ApiserverCPUPct = pct(res.Datastore), pct(res.Apiserver)
	res.DurationS = time.Since(t0).Seconds()
	res.Client = selfStats()
	return res, nil
}
