// The scale subcommands (issue 30, benches/scale.sh): they talk to the datastore directly, as
// kube-apiserver does, to fill it with millions of Kubernetes objects in their storage encoding
// faster than kube-apiserver could create them, and to time what a large store costs.
//
//	k8s_load scale-fill -endpoints E -keys N        N objects, the mix below
//	k8s_load scale-writes -endpoints E -rate R      Lease renewals at R/s until SIGTERM: latency
//	k8s_load scale-wait -endpoints E                until a read is served: seconds
//	k8s_load scale-compact -endpoints E             compaction at the head revision: seconds
//	k8s_load scale-list -kubeconfig K -limit L      kube-apiserver's list of every Pod: seconds
//
// Each prints one JSON line.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
)

// The mix, per 100 consecutive object indexes: what a large cluster's store holds most of
// (a Lease per node, Events, Nodes with their image lists, Pods), weighted so that the average
// object is about 1.1 KB and 10M objects are about 10 GiB of values.
const (
	mixLeases = 40 // indexes 0..39 of each 100: coordination.k8s.io/v1 Lease, about 360 B
	mixNodes  = 6  // 40..45: v1 Node, about 10 KB
	mixPods   = 4  // 46..49: v1 Pod, about 4 KB
	// 50..99: v1 Event, about 500 B, attached to a lease as kube-apiserver attaches them
)

// Every object's name has this width, so one encoded template per kind serves every object:
// only the name's digits are overwritten.
const namePlaceholder = "o000000000"

func objectName(i int) string { return fmt.Sprintf("o%09d", i) }

// Namespace of the namespaced kinds; one for all keeps the key shape and costs nothing here.
const scaleNamespace = "scale"

type kindTemplate struct {
	prefix  string // the key up to the name
	value   []byte // the object in kube-apiserver's protobuf storage encoding
	nameAt  int    // offset of the name's placeholder in value
	leased  bool   // Events: put with a lease, as kube-apiserver does (--event-ttl)
	kind    string
	objects int // per 100 indexes
}

func encodeStorage(obj runtime.Object) []byte {
	var buf bytes.Buffer
	s := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	if err := s.Encode(obj, &buf); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func meta(kind, apiVersion string, namespaced bool) (metav1.TypeMeta, metav1.ObjectMeta) {
	m := metav1.ObjectMeta{
		Name:              namePlaceholder,
		UID:               types.UID("2f0a6a4e-6f8b-4b7e-9b1c-3a1d5c7e9f10"),
		CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)),
		Labels:            map[string]string{"app.kubernetes.io/part-of": "scale-bench"},
	}
	if namespaced {
		m.Namespace = scaleNamespace
	}
	return metav1.TypeMeta{Kind: kind, APIVersion: apiVersion}, m
}

func templates() []*kindTemplate {
	tm, om := meta("Lease", "coordination.k8s.io/v1", true)
	om.Namespace = "kube-node-lease"
	now := metav1.NewMicroTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	lease := &coordinationv1.Lease{TypeMeta: tm, ObjectMeta: om, Spec: coordinationv1.LeaseSpec{
		HolderIdentity: ref("node-holder"), LeaseDurationSeconds: ref(int32(40)), RenewTime: &now,
	}}
	lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-owner", UID: om.UID}}
	// What brings a stored node Lease to its usual size: kubelet's field manager entry.
	lease.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: "Update", APIVersion: "coordination.k8s.io/v1", FieldsType: "FieldsV1", Time: &metav1.Time{Time: now.Time}}}

	tm, om = meta("Node", "v1", false)
	om.Annotations = map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
	node := &corev1.Node{TypeMeta: tm, ObjectMeta: om, Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24"}}
	node.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node.Status.Allocatable = node.Status.Capacity
	for _, t := range []corev1.NodeConditionType{"MemoryPressure", "DiskPressure", "PIDPressure", "Ready"} {
		node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: t, Status: "False", Reason: "KubeletHasSufficientResources", Message: "kubelet has sufficient resources available", LastHeartbeatTime: metav1.NewTime(now.Time), LastTransitionTime: metav1.NewTime(now.Time)})
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: "InternalIP", Address: "10.0.0.1"}, {Type: "Hostname", Address: "node-host"}}
	node.Status.NodeInfo = corev1.NodeSystemInfo{MachineID: strings.Repeat("a", 32), SystemUUID: strings.Repeat("b", 36), BootID: strings.Repeat("c", 36), KernelVersion: "6.8.0-1015-aws", OSImage: "Ubuntu 24.04.1 LTS", ContainerRuntimeVersion: "containerd://2.0.0", KubeletVersion: "v1.36.3", KubeProxyVersion: "v1.36.3", OperatingSystem: "linux", Architecture: "amd64"}
	// A node's size is mostly its image list (kubelet reports up to 50 images).
	for i := 0; i < 50; i++ {
		node.Status.Images = append(node.Status.Images, corev1.ContainerImage{Names: []string{
			fmt.Sprintf("registry.example.com/team-%02d/service-%02d@sha256:%064d", i%7, i, i),
			fmt.Sprintf("registry.example.com/team-%02d/service-%02d:v1.%d.0", i%7, i, i),
		}, SizeBytes: int64(10_000_000 + i)})
	}

	tm, om = meta("Pod", "v1", true)
	om.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-01T00:00:00Z"}
	om.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f7c9b6", UID: om.UID, Controller: ref(true)}}
	pod := &corev1.Pod{TypeMeta: tm, ObjectMeta: om}
	for c := 0; c < 2; c++ {
		ctr := corev1.Container{Name: fmt.Sprintf("app-%d", c), Image: "registry.example.com/team/app:v1.2.3",
			Args:      []string{"--port=8080", "--log-level=info", "--config=/etc/app/config.yaml"},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
			Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: "TCP"}},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"},
				{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: "File", ImagePullPolicy: "IfNotPresent"}
		for e := 0; e < 18; e++ {
			ctr.Env = append(ctr.Env, corev1.EnvVar{Name: fmt.Sprintf("APP_SETTING_%02d", e), Value: fmt.Sprintf("value-of-setting-%02d-for-the-application", e)})
		}
		pod.Spec.Containers = append(pod.Spec.Containers, ctr)
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: ctr.Name, Ready: true, Image: ctr.Image,
			ImageID: "registry.example.com/team/app@sha256:" + strings.Repeat("d", 64), ContainerID: "containerd://" + strings.Repeat("e", 64),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now.Time)}}})
	}
	pod.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}}
	pod.Spec.NodeName, pod.Spec.ServiceAccountName, pod.Spec.RestartPolicy, pod.Spec.DNSPolicy = "node-host", "default", "Always", "ClusterFirst"
	pod.Spec.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: ref(int64(300))},
		{Key: "node.kubernetes.io/unreachable", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: ref(int64(300))}}
	pod.Status.Phase, pod.Status.HostIP, pod.Status.PodIP, pod.Status.QOSClass = "Running", "10.0.0.1", "10.244.1.10", "Burstable"
	pod.Status.StartTime = &metav1.Time{Time: now.Time}
	for _, t := range []corev1.PodConditionType{"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"} {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: t, Status: "True", LastTransitionTime: metav1.NewTime(now.Time)})
	}

	tm, om = meta("Event", "v1", true)
	event := &corev1.Event{TypeMeta: tm, ObjectMeta: om,
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: scaleNamespace, Name: "web-5d8f7c9b6-x2x9k", UID: om.UID, APIVersion: "v1", ResourceVersion: "123456", FieldPath: "spec.containers{app-0}"},
		Reason:         "Pulled", Message: `Successfully pulled image "registry.example.com/team/app:v1.2.3" in 1.2s (1.2s including waiting). Image size: 10000000 bytes.`,
		Source: corev1.EventSource{Component: "kubelet", Host: "node-host"}, FirstTimestamp: metav1.NewTime(now.Time), LastTimestamp: metav1.NewTime(now.Time),
		Count: 1, Type: "Normal", ReportingController: "kubelet", ReportingInstance: "node-host"}

	out := []*kindTemplate{
		{prefix: "/registry/leases/kube-node-lease/", value: encodeStorage(lease), kind: "Lease", objects: mixLeases},
		{prefix: "/registry/minions/", value: encodeStorage(node), kind: "Node", objects: mixNodes},
		{prefix: "/registry/pods/" + scaleNamespace + "/", value: encodeStorage(pod), kind: "Pod", objects: mixPods},
		{prefix: "/registry/events/" + scaleNamespace + "/", value: encodeStorage(event), kind: "Event", leased: true, objects: 100 - mixLeases - mixNodes - mixPods},
	}
	for _, t := range out {
		t.nameAt = bytes.Index(t.value, []byte(namePlaceholder))
		if t.nameAt < 0 {
			panic("name placeholder not found in the " + t.kind + " template")
		}
	}
	return out
}

// kindOf maps an object index to its kind by the mix.
func kindOf(ts []*kindTemplate, i int) *kindTemplate {
	r := i % 100
	for _, t := range ts {
		if r < t.objects {
			return t
		}
		r -= t.objects
	}
	panic("mix does not add up to 100")
}

// object returns the key and value of object i, the value in buf (reused by the caller).
func object(ts []*kindTemplate, i int, buf []byte) (*kindTemplate, string, []byte) {
	t := kindOf(ts, i)
	name := objectName(i)
	buf = append(buf[:0], t.value...)
	copy(buf[t.nameAt:], name)
	return t, t.prefix + name, buf
}

type endpointFlags struct {
	endpoints string
	conns     int
}

func (e *endpointFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.endpoints, "endpoints", "127.0.0.1:2379", "datastore endpoints, comma-separated")
	fs.IntVar(&e.conns, "conns", 10, "gRPC connections")
}

func (e *endpointFlags) clients() ([]*clientv3.Client, error) {
	var out []*clientv3.Client
	for i := 0; i < e.conns; i++ {
		eps := strings.Split(e.endpoints, ",")
		// Connection i starts at endpoint i, so connections spread over the members.
		eps = append(eps[i%len(eps):], eps[:i%len(eps)]...)
		// Answers up to clientv3's default limit (math.MaxInt32), which kube-apiserver keeps: an
		// unpaged list of every Pod at 10M objects is 1.6 GB.
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), MaxCallSendMsgSize: 64 << 20, MaxCallRecvMsgSize: math.MaxInt32})
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

func scaleFill(args []string) error {
	fs := flag.NewFlagSet("scale-fill", flag.ExitOnError)
	var ep endpointFlags
	ep.register(fs)
	keys := fs.Int("keys", 1_000_000, "objects to put, indexes from --start")
	start := fs.Int("start", 0, "first object index")
	workers := fs.Int("workers", 200, "puts in flight")
	eventLeases := fs.Int("event-leases", 60, "leases the Events are attached to, round robin (kube-apiserver reuses one per minute)")
	timeout := fs.Duration("timeout", 2*time.Hour, "bound on the whole fill")
	fs.Parse(args)
	cs, err := ep.clients()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var leases []clientv3.LeaseID
	for i := 0; i < *eventLeases; i++ {
		// Longer than any run; kube-apiserver's default --event-ttl is one hour.
		g, err := cs[0].Grant(ctx, 7*24*3600)
		if err != nil {
			return fmt.Errorf("lease grant: %w", err)
		}
		leases = append(leases, g.ID)
	}
	ts := templates()
	var next atomic.Int64
	next.Store(int64(*start))
	end := int64(*start + *keys)
	var keyBytes, valueBytes, errs atomic.Int64
	var firstErr atomic.Value
	began := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := cs[w%len(cs)]
			var buf []byte
			for {
				// Small runs of consecutive indexes per worker keep the mix even over time.
				i := next.Add(1) - 1
				if i >= end || ctx.Err() != nil {
					return
				}
				t, key, value := object(ts, int(i), buf)
				buf = value
				var opts []clientv3.OpOption
				if t.leased && len(leases) > 0 {
					opts = append(opts, clientv3.WithLease(leases[int(i)%len(leases)]))
				}
				if _, err := c.Put(ctx, key, string(value), opts...); err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
					continue
				}
				keyBytes.Add(int64(len(key)))
				valueBytes.Add(int64(len(value)))
			}
		}(w)
	}
	wg.Wait()
	d := time.Since(began)
	res := map[string]any{"keys": *keys, "key_bytes": keyBytes.Load(), "value_bytes": valueBytes.Load(),
		"seconds": d.Seconds(), "puts_per_second": float64(*keys) / d.Seconds(), "errors": errs.Load()}
	for _, t := range ts {
		res["bytes_"+t.kind] = len(t.value)
	}
	if e := firstErr.Load(); e != nil {
		res["first_error"] = e
	}
	if err := printJSON(res); err != nil {
		return err
	}
	if errs.Load() > 0 {
		return fmt.Errorf("%d puts failed", errs.Load())
	}
	return nil
}

// scaleWrites renews Leases (puts over existing Lease objects) at a steady rate until SIGTERM,
// SIGINT or --duration, and reports each put's latency: the writes that must not stall behind
// a big list, a compaction or a member's catch-up.
func scaleWrites(args []string) error {
	fs := flag.NewFlagSet("scale-writes", flag.ExitOnError)
	var ep endpointFlags
	ep.register(fs)
	rate := fs.Int("rate", 1000, "puts per second")
	keys := fs.Int("keys", 1_000_000, "the fill's object count: Leases among them are renewed")
	duration := fs.Duration("duration", time.Hour, "bound on the run")
	slow := fs.Duration("slow", 0, "print each put slower than this to stderr, with its start as Unix seconds (0: none), to line it up with a profile")
	fs.Parse(args)
	cs, err := ep.clients()
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	ctx, cancel2 := context.WithTimeout(ctx, *duration)
	defer cancel2()
	ts := templates()
	var mu sync.Mutex
	var lat []int64
	var errs int
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	defer tick.Stop()
	began := time.Now()
	n := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		// The n-th Lease among the filled objects: indexes 100q + r with r < mixLeases.
		i := (n/mixLeases*100 + n%mixLeases) % max(*keys, 1)
		n++
		wg.Add(1)
		go func(i, n int) {
			defer wg.Done()
			_, key, value := object(ts, i, nil)
			t0 := time.Now()
			pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := cs[n%len(cs)].Put(pctx, key, string(value))
			pcancel()
			d := time.Since(t0)
			if *slow > 0 && d > *slow {
				fmt.Fprintf(os.Stderr, "slow put %s: started %.6f, %.1f ms\n", key, float64(t0.UnixNano())/1e9, float64(d.Nanoseconds())/1e6)
			}
			mu.Lock()
			if err != nil {
				errs++
			} else {
				lat = append(lat, d.Nanoseconds())
			}
			mu.Unlock()
		}(i, n)
	}
	wg.Wait()
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	res := map[string]any{"puts": len(lat), "errors": errs, "seconds": time.Since(began).Seconds()}
	if len(lat) > 0 {
		res["p50_ms"], res["p99_ms"], res["p999_ms"], res["max_ms"] = ms(pct(lat, 0.50)), ms(pct(lat, 0.99)), ms(pct(lat, 0.999)), ms(lat[len(lat)-1])
		over := 0
		for _, l := range lat {
			if l > 50e6 {
				over++
			}
		}
		res["over_50ms"] = over
	}
	return printJSON(res)
}

// scaleWait polls until the datastore serves a read (linearizable, or with --serializable a
// local read at --min-revision or above: a new member caught up) and prints the seconds since
// it started.
func scaleWait(args []string) error {
	fs := flag.NewFlagSet("scale-wait", flag.ExitOnError)
	endpoint := fs.String("endpoint", "127.0.0.1:2379", "the one member to ask")
	serializable := fs.Bool("serializable", false, "a local read, as a follower serves without the leader")
	minRev := fs.Int64("min-revision", 0, "with --serializable: until the member's revision reaches this")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after")
	fs.Parse(args)
	began := time.Now()
	// No logger: every refused attempt while the server starts would be a warning line.
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	var opts []clientv3.OpOption
	if *serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	for time.Since(began) < *timeout {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := c.Get(ctx, "/registry/scale-wait", opts...)
		cancel()
		if err == nil && r.Header.Revision >= *minRev {
			return printJSON(map[string]any{"seconds": time.Since(began).Seconds(), "revision": r.Header.Revision})
		}
		time.Sleep(5 * time.Millisecond)
	}
	return errors.New("not serving within the timeout")
}

// scaleCompact compacts at the head revision (physical: the call returns when the old
// revisions are gone, as etcd's compactor waits) and prints how long it took.
func scaleCompact(args []string) error {
	fs := flag.NewFlagSet("scale-compact", flag.ExitOnError)
	var ep endpointFlags
	ep.register(fs)
	fs.Parse(args)
	ep.conns = 1
	cs, err := ep.clients()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	r, err := cs[0].Get(ctx, "/registry/scale-compact")
	if err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := cs[0].Compact(ctx, r.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		return err
	}
	return printJSON(map[string]any{"seconds": time.Since(t0).Seconds(), "revision": r.Header.Revision})
}

// scaleList lists every Pod in every namespace through kube-apiserver, as a controller's
// informer does on start: pages of --limit (0: one unpaged list), and prints the time and count.
func scaleList(args []string) error {
	fs := flag.NewFlagSet("scale-list", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kube-apiserver's kubeconfig (empty: list from the datastore at -endpoints)")
	limit := fs.Int64("limit", 500, "page size (0: unpaged)")
	var ep endpointFlags
	ep.register(fs)
	fs.Parse(args)
	if *kubeconfig == "" {
		return scaleListStore(ep, *limit)
	}
	c := &config{kubeconfig: *kubeconfig, qps: 100000, burst: 100000, profile: "scale-list"}
	cs, err := newClient(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	t0 := time.Now()
	items, pages, cont := 0, 0, ""
	for {
		l, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: *limit, Continue: cont})
		if err != nil {
			return fmt.Errorf("list after %d pods: %w", items, err)
		}
		items += len(l.Items)
		pages++
		cont = l.Continue
		if cont == "" {
			break
		}
	}
	return printJSON(map[string]any{"seconds": time.Since(t0).Seconds(), "pods": items, "pages": pages, "limit": *limit})
}

// scaleListStore lists every Pod straight from the datastore the way kube-apiserver's etcd3
// storage does with its watch cache off: pages of `limit` keys under the Pods' prefix, the first
// at the newest revision and every later one at that same revision, from just after the
// previous page's last key (unpaged: one range of the whole prefix).
func scaleListStore(ep endpointFlags, limit int64) error {
	ep.conns = 1
	cs, err := ep.clients()
	if err != nil {
		return err
	}
	defer cs[0].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	const prefix = "/registry/pods/"
	end := clientv3.GetPrefixRangeEnd(prefix)
	t0 := time.Now()
	items, pages, key, rev := int64(0), 0, prefix, int64(0)
	var bytes int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		r, err := cs[0].Get(ctx, key, opts...)
		if err != nil {
			return fmt.Errorf("list after %d pods: %w", items, err)
		}
		if rev == 0 {
			rev = r.Header.Revision
		}
		items += int64(len(r.Kvs))
		for _, kv := range r.Kvs {
			bytes += int64(len(kv.Value))
		}
		pages++
		if !r.More || len(r.Kvs) == 0 {
			break
		}
		key = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
	return printJSON(map[string]any{"seconds": time.Since(t0).Seconds(), "pods": items, "pages": pages, "limit": limit, "value_bytes": bytes})
}

// scaleTable prints benches/scale.sh's results as one Markdown table: sizes (and under each,
// mem_etcd and etcd) by columns, measures by rows.
func scaleTable(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: k8s_load scale-table RESULTS.jsonl")
	}
	data, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	type line struct {
		Store   string         `json:"store"`
		Size    int            `json:"size"`
		Measure string         `json:"measure"`
		Result  map[string]any `json:"result"`
	}
	type col struct {
		size  int
		store string
	}
	res := map[col]map[string]map[string]any{}
	var cols []col
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var x line
		if err := json.Unmarshal([]byte(l), &x); err != nil {
			return fmt.Errorf("%q: %w", l, err)
		}
		c := col{x.Size, x.Store}
		if res[c] == nil {
			res[c] = map[string]map[string]any{}
			cols = append(cols, c)
		}
		res[c][x.Measure] = x.Result
	}
	num := func(m map[string]any, path ...string) (float64, bool) {
		var v any = m
		for _, p := range path {
			mm, ok := v.(map[string]any)
			if !ok {
				return 0, false
			}
			v = mm[p]
		}
		f, ok := v.(float64)
		return f, ok
	}
	type row struct {
		name string
		cell func(r map[string]map[string]any) string
	}
	f := func(measure, format string, scale float64, path ...string) func(map[string]map[string]any) string {
		return func(r map[string]map[string]any) string {
			m := r[measure]
			if m == nil {
				return ""
			}
			if s, ok := m["skipped"].(string); ok {
				return "skipped: " + s
			}
			v, ok := num(m, path...)
			if !ok {
				return ""
			}
			return fmt.Sprintf(format, v*scale)
		}
	}
	latency := func(measure string) func(map[string]map[string]any) string {
		return func(r map[string]map[string]any) string {
			m := r[measure]
			if m == nil {
				return ""
			}
			if s, ok := m["skipped"].(string); ok {
				return "skipped: " + s
			}
			p99, _ := num(m, "writes", "p99_ms")
			mx, _ := num(m, "writes", "max_ms")
			over, _ := num(m, "writes", "over_50ms")
			return fmt.Sprintf("%.1f / %.0f ms (%.0f over 50 ms)", p99, mx, over)
		}
	}
	perByte := func(r map[string]map[string]any) string {
		m := r["fill"]
		rss, ok1 := num(m, "rss_kib")
		empty, ok2 := num(m, "rss_empty_kib")
		b, ok3 := num(m, "data_bytes")
		if !ok1 || !ok2 || !ok3 || b == 0 {
			return ""
		}
		return fmt.Sprintf("%.2fx", (rss-empty)*1024/b)
	}
	perKey := func(r map[string]map[string]any) string {
		m := r["fill"]
		rss, ok1 := num(m, "rss_kib")
		empty, ok2 := num(m, "rss_empty_kib")
		n, ok3 := num(m, "fill", "keys")
		if !ok1 || !ok2 || !ok3 || n == 0 {
			return ""
		}
		return fmt.Sprintf("%.0f B", (rss-empty)*1024/n)
	}
	rows := []row{
		{"values + keys (GiB)", f("fill", "%.2f", 1.0/(1<<30), "data_bytes")},
		{"fill rate (objects/s)", f("fill", "%.0f", 1, "fill", "puts_per_second")},
		{"RSS after the fill (MiB)", f("fill", "%.0f", 1.0/1024, "rss_kib")},
		{"RSS per object (loaded minus empty)", perKey},
		{"RSS per byte of key and value", perByte},
		{"data directory (MiB)", f("fill", "%.0f", 1.0/1024, "disk_kib")},
		{"restart after kill -9 until serving (s)", f("restart", "%.2f", 1, "seconds")},
		{"restart, --fsync (s)", f("restart-fsync", "%.2f", 1, "seconds")},
		{"RSS after the restart (MiB)", f("restart-rss", "%.0f", 1.0/1024, "rss_kib")},
		{"compaction of 1M revisions (s)", f("compact", "%.2f", 1, "compact", "seconds")},
		{"renewals during it: p99 / max", latency("compact")},
		{"every Pod from the store, pages of 500 (s)", f("list-store-paged", "%.2f", 1, "list", "seconds")},
		{"renewals during it: p99 / max", latency("list-store-paged")},
		{"every Pod from the store, one range (s)", f("list-store-unpaged", "%.2f", 1, "list", "seconds")},
		{"renewals during it: p99 / max", latency("list-store-unpaged")},
		{"kube-apiserver: every Pod, pages of 500 (s)", f("list-paged", "%.2f", 1, "list", "seconds")},
		{"renewals during it: p99 / max", latency("list-paged")},
		{"kube-apiserver: every Pod, unpaged (s)", f("list-unpaged", "%.2f", 1, "list", "seconds")},
		{"renewals during it: p99 / max", latency("list-unpaged")},
		{"new learner until it serves at the head (s)", f("catchup", "%.2f", 1, "catchup", "seconds")},
		{"leader's renewals during it: p99 / max", latency("catchup")},
		{"3 members: fill rate (objects/s)", f("cluster", "%.0f", 1, "fill", "puts_per_second")},
		{"3 members: largest RSS (MiB)", f("cluster", "%.0f", 1.0/1024, "rss_kib")},
		{"3 members: compaction of 1M revisions (s)", f("cluster-compact", "%.2f", 1, "compact", "seconds")},
		{"renewals during it: p99 / max", latency("cluster-compact")},
	}
	sort.SliceStable(cols, func(a, b int) bool { return cols[a].size < cols[b].size })
	head, sep := "| |", "|---|"
	for _, c := range cols {
		head += fmt.Sprintf(" %s, %s |", humanCount(c.size), c.store)
		sep += "--:|"
	}
	fmt.Println(head)
	fmt.Println(sep)
	for _, r := range rows {
		out := "| " + r.name + " |"
		for _, c := range cols {
			out += " " + r.cell(res[c]) + " |"
		}
		fmt.Println(out)
	}
	return nil
}

func humanCount(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dK", n/1000)
	}
	return fmt.Sprint(n)
}
