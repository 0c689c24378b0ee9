package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// runLabel marks every ConfigMap of a run, and the watches and lists select on it, so an
// object someone else puts in the namespace (kube-controller-manager's kube-root-ca.crt in a
// real cluster) is neither listed nor watched.
const runLabel = "k8s-load/run"

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// payload: n random characters (incompressible, as a real ConfigMap's data is to a store
// that does not compress).
func payload(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := 0; i < n; {
		x := r.Uint64()
		for j := 0; j < 10 && i < n; j++ {
			b[i] = alphabet[x&63]
			x >>= 6
			i++
		}
	}
	return string(b)
}

func objName(i int) string { return fmt.Sprintf("cm-%07d", i) }

// newConfigMap: --value-bytes of payload and the step that wrote it (0 for the create).
func newConfigMap(c *config, r *rand.Rand, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace,
			Labels: map[string]string{runLabel: c.runID}},
		Data: map[string]string{"step": "0", "payload": payload(r, c.valueBytes)},
	}
}

func (c *config) selector() string { return runLabel + "=" + c.runID }

// connect makes the namespace and n clients, each with its connection already open (the TLS
// handshake is not a request the run measures).
func connect(ctx context.Context, c *config, n int) ([]*kubernetes.Clientset, error) {
	admin, err := newClient(c)
	if err != nil {
		return nil, err
	}
	if err := ensureNamespace(ctx, admin, c.namespace); err != nil {
		return nil, err
	}
	out := make([]*kubernetes.Clientset, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range out {
		if out[i], err = newClient(c); err != nil {
			return nil, err
		}
		wg.Go(func() {
			_, errs[i] = out[i].CoreV1().Namespaces().Get(ctx, c.namespace, metav1.GetOptions{})
		})
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return nil, fmt.Errorf("warming up a connection: %w", e)
		}
	}
	return out, nil
}

// reqCtx bounds one request.
func reqCtx(ctx context.Context, c *config) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.reqTimeout)
}

func runCreateList(ctx context.Context, c *config) (*result, error) {
	clients, err := connect(ctx, c, c.clients)
	if err != nil {
		return nil, err
	}
	res := &result{Label: c.label, Profile: c.profile, Namespace: c.namespace, Clients: c.clients,
		Objects: c.objects, ValueBytes: c.valueBytes}
	ds, api := sampleCPU(c.dsPIDs), sampleCPU(c.apiPIDs)
	t0 := time.Now()

	// Writes: each client creates the next object not yet taken until all are.
	var next atomic.Int64
	var werrs errCounts
	wlat := make([][]int64, c.clients)
	var wg sync.WaitGroup
	for k, cs := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(k), uint64(t0.UnixNano())))
			cms := cs.CoreV1().ConfigMaps(c.namespace)
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= c.objects {
					return
				}
				cm := newConfigMap(c, r, objName(i))
				rctx, cancel := reqCtx(ctx, c)
				s := time.Now()
				_, err := cms.Create(rctx, cm, metav1.CreateOptions{})
				d := time.Since(s)
				cancel()
				if err != nil {
					werrs.add(err)
					continue
				}
				wlat[k] = append(wlat[k], int64(d))
			}
		})
	}
	wg.Wait()
	wdur := time.Since(t0)
	var all []int64
	for _, l := range wlat {
		all = append(all, l...)
	}
	res.Write.finish(all, &werrs, wdur)
	// Objects not attempted before the deadline count as errors.
	if left := c.objects - res.Write.OK - res.Write.Errors; left > 0 {
		werrs.addKey("not attempted: run timed out", left)
		res.Write.finish(all, &werrs, wdur)
	}
	created := res.Write.OK

	// Reads: --lists full lists (consistent reads, paged), shared out over the clients; each
	// must return every object created.
	rd := &readStats{Lists: c.lists, PageSize: c.pageSize}
	var nextList atomic.Int64
	var rerrs errCounts
	var listsOK, incomplete atomic.Int64
	var items atomic.Int64
	rlat := make([][]int64, c.clients)
	llat := make([][]int64, c.clients)
	r0 := time.Now()
	for k, cs := range clients {
		wg.Go(func() {
			cms := cs.CoreV1().ConfigMaps(c.namespace)
			for ctx.Err() == nil && nextList.Add(1) <= int64(c.lists) {
				ls := time.Now()
				n, cont, ok := 0, "", true
				for {
					rctx, cancel := reqCtx(ctx, c)
					s := time.Now()
					l, err := cms.List(rctx, metav1.ListOptions{LabelSelector: c.selector(),
						Limit: c.pageSize, Continue: cont})
					d := time.Since(s)
					cancel()
					if err != nil {
						rerrs.add(err)
						ok = false
						break
					}
					rlat[k] = append(rlat[k], int64(d))
					n += len(l.Items)
					if cont = l.Continue; cont == "" {
						break
					}
				}
				if !ok {
					continue
				}
				items.Add(int64(n))
				listsOK.Add(1)
				llat[k] = append(llat[k], int64(time.Since(ls)))
				if n != created {
					incomplete.Add(1)
				}
			}
		})
	}
	wg.Wait()
	rdur := time.Since(r0)
	all = all[:0]
	for _, l := range rlat {
		all = append(all, l...)
	}
	rd.finish(all, &rerrs, rdur)
	rd.ListsOK = int(listsOK.Load())
	rd.Incomplete = int(incomplete.Load())
	rd.Items = items.Load()
	if rdur > 0 {
		rd.ItemsPerS = float64(rd.Items) / rdur.Seconds()
		rd.ListsPerSec = float64(rd.ListsOK) / rdur.Seconds()
	}
	var lists []int64
	for _, l := range llat {
		lists = append(lists, l...)
	}
	slices.Sort(lists)
	rd.ListP99Ms = ms(pct(lists, 0.99))
	res.Read = rd

	res.DurationS = time.Since(t0).Seconds()
	res.Datastore, res.Apiserver = procDelta(ds), procDelta(api)
	res.Client = selfStats()
	return res, nil
}
