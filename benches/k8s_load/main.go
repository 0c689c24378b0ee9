// k8s_load drives a real kube-apiserver with client-go, the Kubernetes client that controllers
// use, and measures what a datastore behind it (mem_etcd, etcd, kine) gives a cluster:
//
//   - create-list: --clients clients create --objects ConfigMaps, then list them back (paged,
//     consistent reads) --lists times; write and read throughput and latency, every error.
//   - watch-churn: --watchers watches open on the ConfigMaps (as a 1.36 informer opens them:
//     a streaming list of the initial state, then the watch) while --clients clients create,
//     update, update again and delete --objects ConfigMaps; every watch event is matched to
//     the write that caused it, so missing, unexpected and duplicate events and the lag (event
//     received minus write acknowledged) are exact.
//   - density: --clients clients create --objects ConfigMaps and --leases node Leases (in
//     kube-node-lease), then every Lease is renewed every --renew-interval as kubelet renews
//     its node's; the datastore's and kube-apiserver's CPU over an idle --window and their
//     RSS at its end are what a cluster of that size costs at rest.
//
// Output: one JSON line of results, then one human-readable line. benches/k8s_load.sh starts
// the datastores and kube-apiserver, runs this, and prints a table (the `table` subcommand).
//
// Subcommands besides the load itself:
//
//	k8s_load init-apiserver -dir D -server URL   service-account key, token file, kubeconfig
//	k8s_load wait-ready -kubeconfig K             until /readyz answers ok
//	k8s_load table FILE...                        the JSON lines as a table
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type config struct {
	kubeconfig   string
	profile      string
	clients      int
	objects      int
	watchers     int
	valueBytes   int
	namespace    string
	timeout      time.Duration
	reqTimeout   time.Duration
	drainTimeout time.Duration
	lists        int
	pageSize     int64
	qps          float64
	burst        int
	label        string
	dsPIDs       []int
	apiPIDs      []int
	runID        string
	strict       bool
	// density
	leases        int
	renewInterval time.Duration
	window        time.Duration
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "init-apiserver":
			exitOn(initApiserver(os.Args[2:]))
			return
		case "wait-ready":
			exitOn(waitReady(os.Args[2:]))
			return
		case "table":
			exitOn(printTable(os.Args[2:]))
			return
		case "scale-fill":
			exitOn(scaleFill(os.Args[2:]))
			return
		case "scale-writes":
			exitOn(scaleWrites(os.Args[2:]))
			return
		case "scale-wait":
			exitOn(scaleWait(os.Args[2:]))
			return
		case "scale-compact":
			exitOn(scaleCompact(os.Args[2:]))
			return
		case "scale-list":
			exitOn(scaleList(os.Args[2:]))
			return
		case "scale-table":
			exitOn(scaleTable(os.Args[2:]))
			return
		}
	}
	var c config
	var dsPIDs, apiPIDs string
	flag.StringVar(&c.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the kube-apiserver to load")
	flag.StringVar(&c.profile, "profile", "create-list", "create-list, watch-churn or density")
	flag.IntVar(&c.clients, "clients", 10, "concurrent writing (and, in create-list, listing) clients, each on its own connection")
	flag.IntVar(&c.objects, "objects", 10000, "ConfigMaps created (and in watch-churn updated twice and deleted)")
	flag.IntVar(&c.watchers, "watchers", 25, "watch-churn: watches open on the ConfigMaps, each on its own connection")
	flag.IntVar(&c.valueBytes, "value-bytes", 1024, "bytes of payload in each ConfigMap's data")
	flag.StringVar(&c.namespace, "namespace", "", "namespace to create the ConfigMaps in (created if absent; default k8s-load-<run id>)")
	flag.DurationVar(&c.timeout, "timeout", 10*time.Minute, "bound on the whole run; what is not done by then counts as errors or missing events")
	flag.DurationVar(&c.reqTimeout, "request-timeout", time.Minute, "bound on each request")
	flag.DurationVar(&c.drainTimeout, "drain-timeout", time.Minute, "watch-churn: how long after the last write to wait for the watch events still due")
	flag.IntVar(&c.lists, "lists", 200, "create-list: full lists of the namespace, shared out over the clients")
	flag.Int64Var(&c.pageSize, "page-size", 500, "create-list: limit of each list request (0: unpaged)")
	flag.Float64Var(&c.qps, "qps", 100000, "client-go's client-side rate limit per connection (QPS and Burst), set far above what the run sends")
	flag.IntVar(&c.leases, "leases", 100, "density: node Leases, each renewed every --renew-interval")
	flag.DurationVar(&c.renewInterval, "renew-interval", 10*time.Second, "density: how often each Lease is renewed (kubelet: 10 s)")
	flag.DurationVar(&c.window, "window", time.Minute, "density: the measured window, after one interval of warm-up")
	flag.StringVar(&c.label, "label", "", "free text carried into the JSON (the backend's name)")
	flag.StringVar(&dsPIDs, "datastore-pids", "", "comma-separated PIDs of the datastore's processes: their CPU seconds during the run and peak RSS are reported, summed over them and their descendants (a PostgreSQL server's backends)")
	flag.BoolVar(&c.strict, "strict", false, "exit with status 2 when any request failed, a list came back incomplete or a watch event was missing, unexpected, duplicated or out of order (tests/run.sh's check)")
	flag.StringVar(&apiPIDs, "apiserver-pids", "", "comma-separated PIDs of kube-apiserver, reported as --datastore-pids")
	flag.Parse()
	c.burst = int(c.qps)
	var err error
	if c.dsPIDs, err = parsePIDs(dsPIDs); err != nil {
		exitOn(err)
	}
	if c.apiPIDs, err = parsePIDs(apiPIDs); err != nil {
		exitOn(err)
	}
	if c.clients < 1 || c.objects < 1 || c.valueBytes < 0 || c.watchers < 0 || c.leases < 0 {
		exitOn(fmt.Errorf("--clients and --objects must be at least 1"))
	}
	if c.profile == "density" && (c.renewInterval <= 0 || c.window <= 0) {
		exitOn(fmt.Errorf("--renew-interval and --window must be above 0"))
	}
	c.runID = strconv.FormatInt(time.Now().UnixNano()%1e10, 36)
	if c.namespace == "" {
		c.namespace = "k8s-load-" + c.runID
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()

	var res *result
	switch c.profile {
	case "create-list":
		res, err = runCreateList(ctx, &c)
	case "watch-churn":
		res, err = runWatchChurn(ctx, &c)
	case "density":
		res, err = runDensity(ctx, &c)
	default:
		err = fmt.Errorf("unknown --profile %q (create-list, watch-churn or density)", c.profile)
	}
	exitOn(err)
	if admin, err := newClient(&c); err == nil {
		mctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res.ApiserverMetrics, err = scrapeMetrics(mctx, admin)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "k8s_load: reading kube-apiserver's /metrics:", err)
		}
	}
	res.Faults = res.faults()
	line, err := json.Marshal(res)
	exitOn(err)
	fmt.Println(string(line))
	fmt.Println(res.human())
	if c.strict && len(res.Faults) > 0 {
		fmt.Fprintln(os.Stderr, "k8s_load: --strict:", strings.Join(res.Faults, ", "))
		os.Exit(2)
	}
}

func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8s_load:", err)
		os.Exit(1)
	}
}

func parsePIDs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("bad pid %q", f)
		}
		out = append(out, p)
	}
	return out, nil
}

// newClient returns a clientset on a connection of its own. client-go shares one transport
// (and so one HTTP/2 connection) among configs that compare equal; a Dial function of its own
// makes the config unequal to every other, as separate controller processes would be.
//
// Protobuf, as kube-controller-manager and kubelet speak to kube-apiserver for built-in types.
// QPS and Burst are raised far above what the run sends, so client-go's token bucket never
// delays a request (its defaults, 5 QPS and burst 10, would be the bottleneck).
func newClient(c *config) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS = float32(c.qps)
	cfg.Burst = c.burst
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = "k8s_load/" + c.profile
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = d.DialContext
	return kubernetes.NewForConfig(cfg)
}

// ensureNamespace creates the namespace unless it exists.
func ensureNamespace(ctx context.Context, cs *kubernetes.Clientset, ns string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

// errorKey names an error for the error counts: the HTTP status and reason of an API error,
// else the error's text (shortened).
func errorKey(err error) string {
	if st, ok := err.(apierrors.APIStatus); ok {
		s := st.Status()
		return fmt.Sprintf("%d %s", s.Code, s.Reason)
	}
	if err == context.DeadlineExceeded || strings.Contains(err.Error(), "context deadline exceeded") {
		return "timeout"
	}
	msg := err.Error()
	if len(msg) > 80 {
		msg = msg[:80]
	}
	return msg
}
