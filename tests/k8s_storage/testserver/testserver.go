// Package testserver is a drop-in replacement for k8s.io/apiserver/pkg/storage/etcd3/testserver
// (same exported API as k8s.io/apiserver v0.36.x). Instead of an embedded etcd it starts one fresh
// server process per RunEtcd call, so Kubernetes' storage tests (pkg/storage/etcd3,
// pkg/storage/cacher) run unmodified against mem_etcd, or against a real etcd binary to check that
// the suites pass there too.
//
// Environment:
//
//	MEM_ETCD_STORAGE_TARGET  "mem_etcd" (default) or "etcd": which server, and so which flags
//	MEM_ETCD_BIN             the mem_etcd binary (target mem_etcd)
//	ETCD_BIN                 the etcd binary (target etcd)
//	MEM_ETCD_STORAGE_SERVER_ARGS  extra flags for the server, space separated (optional)
//
// The server's output is kept (its last 256 KiB) and logged only when the test fails.
package testserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	storagetesting "k8s.io/apiserver/pkg/storage/testing"
)

const (
	// Both etcd and mem_etcd log this once their client listener serves requests.
	readyLine    = "ready to serve client requests"
	startTimeout = 60 * time.Second
	outputKeep   = 256 << 10
)

// freePorts returns TCP ports on the loopback interface that were free a moment ago.
func freePorts(count int) ([]int, error) {
	ports := make([]int, 0, count)
	for i := 0; i < count; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("could not bind to a port: %v", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// NewTestConfig returns an embed.Config describing the server RunEtcd should start: free client
// and peer ports on 127.0.0.1 and a data directory removed when the test ends. Only the fields a
// separate process can honour are read back by RunEtcd: the client URLs, Dir,
// (Experimental)WatchProgressNotifyInterval, MaxRequestBytes, MaxTxnOps and ClientTLSInfo.
func NewTestConfig(t testing.TB) *embed.Config {
	cfg := embed.NewConfig()
	cfg.UnsafeNoFsync = true

	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-server"))
	cfg.Dir = t.TempDir()
	os.Chmod(cfg.Dir, 0700)
	return cfg
}

var autoPortLock sync.Mutex

// RunEtcd starts a server process configured by cfg (or NewTestConfig(t) if nil) and returns a
// client connected to it, with KV and Kubernetes wrapped in the storagetesting recorders exactly
// as upstream does. The client is closed and the process killed when the test ends.
func RunEtcd(t testing.TB, cfg *embed.Config) *kubernetes.Client {
	t.Helper()

	target := os.Getenv("MEM_ETCD_STORAGE_TARGET")
	if target == "" {
		target = "mem_etcd"
	}
	var bin string
	switch target {
	case "mem_etcd":
		bin = os.Getenv("MEM_ETCD_BIN")
	case "etcd":
		bin = os.Getenv("ETCD_BIN")
	default:
		t.Fatalf("MEM_ETCD_STORAGE_TARGET=%q: want mem_etcd or etcd", target)
	}
	if bin == "" {
		t.Fatalf("MEM_ETCD_STORAGE_TARGET=%s needs the server binary in %s", target,
			map[string]string{"mem_etcd": "MEM_ETCD_BIN", "etcd": "ETCD_BIN"}[target])
	}

	var srv *server
	if cfg == nil {
		// We pick the ports: hold the lock until the server has bound them, and pick again if
		// something else took a port between our check and the server's bind.
		autoPortLock.Lock()
		defer autoPortLock.Unlock()
		var err error
		for attempt := 1; ; attempt++ {
			cfg = NewTestConfig(t)
			srv, err = startServer(t, target, bin, cfg)
			if err == nil || attempt == 3 || srv == nil || !srv.output.contains("in use") {
				break
			}
			t.Logf("server could not bind its port, retrying: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
	} else {
		var err error
		if srv, err = startServer(t, target, bin, cfg); err != nil {
			t.Fatal(err)
		}
	}

	var tlsConfig *tls.Config
	if !cfg.ClientTLSInfo.Empty() {
		c, err := cfg.ClientTLSInfo.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		tlsConfig = c
	}
	client, err := kubernetes.New(clientv3.Config{
		TLS:         tlsConfig,
		Endpoints:   srv.endpoints,
		DialTimeout: 10 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithBlock()},
		Logger:      zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-client"),
	})
	if err != nil {
		t.Fatalf("connecting to %s at %v: %v", target, srv.endpoints, err)
	}
	// Registered after the process' cleanup, so it runs before it: close the client, then kill.
	t.Cleanup(func() { _ = client.Close() })

	// A single-member etcd logs "ready" once it has a leader; still, make sure a linearizable
	// read is answered before handing the client out (and before the recorders count calls).
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.Client.Get(ctx, "health")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s at %v does not answer reads: %v", target, srv.endpoints, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	client.KV = storagetesting.NewKVRecorder(client.KV)
	client.Kubernetes = storagetesting.NewKubernetesRecorder(client.Kubernetes)
	return client
}

type server struct {
	cmd       *exec.Cmd
	output    *tailBuffer
	exited    chan struct{}
	endpoints []string
}

func serverArgs(target string, cfg *embed.Config) []string {
	join := func(us []url.URL) string {
		s := make([]string, len(us))
		for i, u := range us {
			s[i] = u.String()
		}
		return strings.Join(s, ",")
	}
	listen := join(cfg.ListenClientUrls)
	advertise := listen
	if len(cfg.AdvertiseClientUrls) > 0 {
		advertise = join(cfg.AdvertiseClientUrls)
	}
	args := []string{"--listen-client-urls", listen}
	if advertise != listen || target == "etcd" {
		args = append(args, "--advertise-client-urls", advertise)
	}
	args = append(args, "--data-dir", cfg.Dir)
	// The peer URLs the framework picked (free ports): a member alone listens on its peer URL
	// from the start, mem_etcd's as etcd's, and the default one (localhost:2380) would be
	// shared by every server a test starts.
	args = append(args,
		"--name", cfg.Name,
		"--listen-peer-urls", join(cfg.ListenPeerUrls),
		"--initial-advertise-peer-urls", join(cfg.AdvertisePeerUrls),
		"--initial-cluster", cfg.InitialCluster,
	)
	if target == "etcd" {
		if cfg.UnsafeNoFsync {
			args = append(args, "--unsafe-no-fsync")
		}
	}
	interval := cfg.WatchProgressNotifyInterval
	if interval == 0 {
		interval = cfg.ExperimentalWatchProgressNotifyInterval
	}
	if interval != 0 {
		args = append(args, "--watch-progress-notify-interval", interval.String())
	}
	if cfg.MaxRequestBytes != 0 && cfg.MaxRequestBytes != embed.DefaultMaxRequestBytes {
		args = append(args, "--max-request-bytes", strconv.FormatUint(uint64(cfg.MaxRequestBytes), 10))
	}
	if cfg.MaxTxnOps != 0 && cfg.MaxTxnOps != embed.DefaultMaxTxnOps {
		args = append(args, "--max-txn-ops", strconv.FormatUint(uint64(cfg.MaxTxnOps), 10))
	}
	if ti := cfg.ClientTLSInfo; !ti.Empty() {
		args = append(args, "--cert-file", ti.CertFile, "--key-file", ti.KeyFile)
		if ti.TrustedCAFile != "" {
			args = append(args, "--trusted-ca-file", ti.TrustedCAFile)
		}
		if ti.ClientCertAuth {
			args = append(args, "--client-cert-auth")
		}
	}
	if extra := strings.Fields(os.Getenv("MEM_ETCD_STORAGE_SERVER_ARGS")); len(extra) > 0 {
		args = append(args, extra...)
	}
	return args
}

// startServer starts the process and waits until it logs that it serves clients. The process is
// killed in t.Cleanup (and its output logged if the test failed).
func startServer(t testing.TB, target, bin string, cfg *embed.Config) (*server, error) {
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if len(cfg.ListenClientUrls) == 0 {
		return nil, fmt.Errorf("config has no client URL")
	}
	args := serverArgs(target, cfg)
	s := &server{output: newTailBuffer(outputKeep, readyLine), exited: make(chan struct{})}
	for _, u := range cfg.AdvertiseClientUrls {
		s.endpoints = append(s.endpoints, u.String())
	}
	if len(s.endpoints) == 0 {
		for _, u := range cfg.ListenClientUrls {
			s.endpoints = append(s.endpoints, u.String())
		}
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.output, s.output
	// Its own process group, so that a signal to the test binary's group does not reach it first.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return s, fmt.Errorf("starting %s: %v", bin, err)
	}
	var waitErr error
	go func() { waitErr = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
		if t.Failed() {
			t.Logf("%s %s\n--- server output (last %d KiB) ---\n%s--- end of server output ---",
				bin, strings.Join(args, " "), outputKeep>>10, s.output.String())
		}
	})
	// Not a successful connect to the port: that could be another process which took the port
	// first (this one then exits, and RunEtcd picks other ports). Hence the server's log level
	// must keep the ready line (info, the default for both servers).
	select {
	case <-s.output.ready:
		return s, nil
	case <-s.exited:
		return s, fmt.Errorf("%s %s exited before serving (%v); output:\n%s", bin, strings.Join(args, " "), waitErr, s.output.String())
	case <-time.After(startTimeout):
		return s, fmt.Errorf("%s %s did not log %q within %v; output:\n%s", bin, strings.Join(args, " "), readyLine, startTimeout, s.output.String())
	}
}

// tailBuffer keeps the last max bytes written to it and closes ready once marker was written.
type tailBuffer struct {
	mu     sync.Mutex
	buf    []byte
	max    int
	marker []byte
	seen   bool
	ready  chan struct{}
}

func newTailBuffer(max int, marker string) *tailBuffer {
	return &tailBuffer{max: max, marker: []byte(marker), ready: make(chan struct{})}
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Look for the marker across the previous write's tail too.
	start := len(b.buf) - len(b.marker)
	if start < 0 {
		start = 0
	}
	b.buf = append(b.buf, p...)
	if !b.seen && bytes.Contains(b.buf[start:], b.marker) {
		b.seen = true
		close(b.ready)
	}
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func (b *tailBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Contains(b.buf, []byte(s))
}
