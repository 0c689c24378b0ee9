package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// initApiserver writes what kube-apiserver and the load need to start, as tests/it/kubernetes/k8s_e2e.rs
// makes them: a P-256 service-account key (the one file both signs and verifies), a static
// token in system:masters for the load (authorized by --authorization-mode=AlwaysAllow, and
// exempt from API Priority and Fairness as system:masters is), and a kubeconfig with that
// token for the server's self-signed certificate.
func initApiserver(args []string) error {
	fs := flag.NewFlagSet("init-apiserver", flag.ExitOnError)
	dir := fs.String("dir", "", "directory to write sa.key, tokens.csv and kubeconfig into")
	server := fs.String("server", "", "kube-apiserver's URL, e.g. https://127.0.0.1:6443")
	_ = fs.Parse(args)
	if *dir == "" || *server == "" {
		return fmt.Errorf("init-apiserver: -dir and -server are required")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	token := hex.EncodeToString(tok)
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: load
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %s
contexts:
- name: load
  context:
    cluster: load
    user: admin
current-context: load
`, *server, token)
	files := map[string][]byte{
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}),
		"tokens.csv": fmt.Appendf(nil, "%s,admin,admin-uid,\"system:masters\"\n", token),
		"kubeconfig": []byte(kubeconfig),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(*dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// waitReady polls /readyz until it answers ok, the process -pid exits, or -timeout passes.
func waitReady(args []string) error {
	fs := flag.NewFlagSet("wait-ready", flag.ExitOnError)
	kc := fs.String("kubeconfig", "", "kubeconfig")
	pid := fs.Int("pid", 0, "kube-apiserver's pid: give up if it exits")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after")
	_ = fs.Parse(args)
	cfg, err := clientcmd.BuildConfigFromFlags("", *kc)
	if err != nil {
		return err
	}
	cfg.Timeout = 3 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	end := time.Now().Add(*timeout)
	var last string
	for time.Now().Before(end) {
		if *pid > 0 {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", *pid)); err != nil {
				return fmt.Errorf("kube-apiserver (pid %d) exited before it was ready", *pid)
			}
		}
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return nil
		}
		last = fmt.Sprint(err)
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("kube-apiserver not ready within %v: %s", *timeout, last)
}

// printTable prints the JSON lines in the files as one markdown table per profile; a run that
// failed (a "failed" line, or one without its profile's figures) as a row that says so.
func printTable(files []string) error {
	var rows []result
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if !strings.HasPrefix(line, "{") {
				continue
			}
			var r result
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				fh.Close()
				return fmt.Errorf("%s: %w", f, err)
			}
			rows = append(rows, r)
		}
		fh.Close()
	}
	// Processes that share memory (PostgreSQL's backends and its shared buffers) have it
	// counted once in each one's RSS: their PSS at the end (which counts it once) goes beside.
	pss := func(p *procStats) string {
		if p.Procs > p.PIDs && p.PSSMiB > 0 {
			return fmt.Sprintf(" (%d processes, PSS %.0f)", p.Procs, p.PSSMiB)
		}
		return ""
	}
	proc := func(p *procStats) string {
		if p == nil {
			return "- | -"
		}
		return fmt.Sprintf("%.1f | %.0f%s", p.CPUS, p.PeakRSSMiB, pss(p))
	}
	mib := func(p *procStats) string {
		if p == nil {
			return "- | -"
		}
		return fmt.Sprintf("%.0f%s | %.0f", p.RSSMiB, pss(p), p.PeakRSSMiB)
	}
	for _, profile := range []string{"create-list", "watch-churn", "density"} {
		var out []string
		for _, r := range rows {
			if r.Profile != profile {
				continue
			}
			if r.Failed != "" || (profile == "create-list" && r.Read == nil) ||
				(profile == "watch-churn" && r.Watch == nil) || (profile == "density" && r.Density == nil) {
				out = append(out, fmt.Sprintf("| %s | %d | %d | FAILED: %s |", r.Label, r.Clients, r.Objects, r.Failed))
				continue
			}
			switch profile {
			case "create-list":
				rd := r.Read
				errs := r.Write.Errors + rd.Errors + rd.Incomplete
				rate := float64(errs) / float64(max(1, r.Write.OK+r.Write.Errors+rd.OK+rd.Errors))
				out = append(out, fmt.Sprintf("| %s | %d | %d | %.0f | %.1f | %.0f | %.0f | %.1f | %d (%.2f%%) | %s | %s | %.1f |",
					r.Label, r.Clients, r.Objects, r.Write.PerS, r.Write.P99Ms, rd.PerS, rd.ItemsPerS, rd.P99Ms,
					errs, 100*rate, proc(r.Datastore), proc(r.Apiserver), r.Client.CPUS))
			case "watch-churn":
				w := r.Watch
				out = append(out, fmt.Sprintf("| %s | %d | %d | %.0f | %.1f | %d | %d / %d | %d / %d / %d / %d | %d | %.1f | %.1f | %.0f | %s | %s | %.1f |",
					r.Label, r.Clients, r.Objects, r.Write.PerS, r.Write.P99Ms, r.Write.Errors+r.Write.Skipped,
					w.Matched, w.Expected, w.Missing, w.Unexpected, w.Duplicate, w.OutOfOrder+w.Errors, w.Reconnects, w.LagP50Ms, w.LagP99Ms,
					w.EventsPerS, proc(r.Datastore), proc(r.Apiserver), r.Client.CPUS))
			case "density":
				d := r.Density
				cpu := func(p *procStats, pct float64) string {
					if p == nil {
						return "-"
					}
					return fmt.Sprintf("%.1f (%.1f%%)", p.CPUS, pct)
				}
				out = append(out, fmt.Sprintf("| %s | %d | %d | %d | %.0f / %.0f | %d / %d | %.1f | %s | %s | %s | %s |",
					r.Label, d.ConfigMaps, d.Leases, r.Write.Errors, d.RenewIntervalS, d.WindowS,
					d.Renewals.OK, d.Due, d.Renewals.P99Ms, cpu(r.Datastore, d.DatastoreCPUPct), mib(r.Datastore),
					cpu(r.Apiserver, d.ApiserverCPUPct), mib(r.Apiserver)))
			}
		}
		if len(out) == 0 {
			continue
		}
		fmt.Println()
		switch profile {
		case "create-list":
			fmt.Println("create-list: ConfigMaps created, then listed back (paged, consistent reads)")
			fmt.Println()
			fmt.Println("| backend | clients | objects | writes/s | write p99 ms | list req/s | items read/s | read p99 ms | errors (rate) | datastore CPU s | datastore peak RSS MiB | apiserver CPU s | apiserver peak RSS MiB | client CPU s |")
			fmt.Println("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
		case "watch-churn":
			fmt.Println("watch-churn: ConfigMaps created, updated, updated and deleted under watches")
			fmt.Println()
			fmt.Println("| backend | clients | objects | writes/s | write p99 ms | write errors (+ skipped) | events matched / expected | missing / unexpected / duplicate / out of order + watch errors | watches cut off and resumed | lag p50 ms | lag p99 ms | events/s | datastore CPU s | datastore peak RSS MiB | apiserver CPU s | apiserver peak RSS MiB | client CPU s |")
			fmt.Println("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
		case "density":
			fmt.Println("density: ConfigMaps and node Leases at rest, every Lease renewed as kubelet renews it (CPU over the window, RSS at its end)")
			fmt.Println()
			fmt.Println("| backend | ConfigMaps | Leases | create errors | renew every / window s | renewals ok / due | renew p99 ms | datastore CPU s (% of a core) | datastore RSS MiB | datastore peak RSS MiB | apiserver CPU s (% of a core) | apiserver RSS MiB | apiserver peak RSS MiB |")
			fmt.Println("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
		}
		for _, l := range out {
			fmt.Println(l)
		}
	}
	return nil
}

// The kube-apiserver metrics a run reports, for the ConfigMaps only: its calls to the
// datastore and their errors, the watch cache's consistent reads (and whether they fell back
// to the datastore), events it received and dispatched, re-initializations, and the watchers it
// closed for not keeping up (apiserver_terminated_watchers_total: a client that reads its watch
// too slowly is cut off, and resumes from its last resourceVersion).
var apiserverMetrics = []string{
	"etcd_requests_total", "etcd_request_errors_total",
	"apiserver_watch_cache_consistent_read_total", "apiserver_watch_cache_read_wait_seconds_count",
	"apiserver_watch_cache_read_wait_seconds_sum",
	"apiserver_watch_cache_events_received_total", "apiserver_watch_cache_events_dispatched_total",
	"apiserver_watch_cache_initializations_total", "apiserver_terminated_watchers_total",
}

// scrapeMetrics reads kube-apiserver's /metrics and keeps the series above whose resource is
// configmaps, as "name{labels}" -> value.
func scrapeMetrics(ctx context.Context, cs *kubernetes.Clientset) (map[string]float64, error) {
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "#") ||
			!(strings.Contains(line, `resource="configmaps"`) || strings.Contains(line, `type="configmaps"`)) {
			continue
		}
		name := line[:strings.IndexAny(line+"{ ", "{ ")]
		if !slices.Contains(apiserverMetrics, name) {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		out[line[:sp]] += v
	}
	return out, nil
}
