#!/usr/bin/env python3
"""Splits a `perf record -g` profile of mem_etcd or etcd members into causes.

    perf script -i perf.data -F comm,pid,ip,sym --no-inline | benches/perf_causes.py [--by-pid]

Each sample goes to the first cause below whose pattern a frame of its call chain matches;
a sample whose frames match none goes to the runtime (when its leaf is the runtime's parking,
timers or I/O driver) or to "other". Prints each cause's share of the samples (`--by-pid`: per
process as well). Record mem_etcd with `--call-graph dwarf` (its release build keeps no frame
pointers) and etcd with `-g` (Go keeps them). The causes are those of an idle or loaded
cluster behind kube-apiserver: what costs a cluster more than a member alone.
"""

import re
import sys
from collections import Counter, defaultdict

# (cause, patterns): the first cause any frame of a sample matches wins, so the narrow
# causes come before the broad ones.
CAUSES = [
    ("probes (peer liveness)", [r"rafthttp::probing", r"rafthttp::stream::serve_probe",
                                r"PeerService.*probe", r"Raft>::probe",
                                r"rafthttp\.\(\*prober", r"probing\.", r"rafthttp\.\(\*peerStatus"]),
    ("forwarded calls (follower to leader)", [r"raft::forward", r"node::to_leader",
                                              r"serve_forward_call", r"rafthttp::stream::serve_forward",
                                              r"PeerService.*forwarding"]),
    ("appends, heartbeats and their answers", [r"openraft::replication", r"rafthttp::network",
                                               r"rafthttp::stream",
                                               r"PeerService.*append", r"AppendResults",
                                               r"rafthttp\.\(\*stream", r"rafthttp\.\(\*pipeline",
                                               r"rafthttp\.\(\*msgApp", r"rafthttp\.\(\*messageEncoder",
                                               r"rafthttp\.\(\*messageDecoder", r"rafthttp\.\(\*peer\)",
                                               r"rafthttp\.\(\*Transport", r"rafthttp\.\(\*streamHandler"]),
    ("Raft log and core", [r"openraft::core", r"openraft::", r"raft::log_store", r"raft_log",
                           r"go\.etcd\.io/raft", r"etcdserver\.\(\*raftNode", r"wal\.\(\*WAL"]),
    ("role watch", [r"node::role_watch"]),
    ("apply and store", [r"raft::state_machine", r"etcdserver::apply", r"mem_etcd::mvcc",
                         r"mem_etcd::lease", r"etcdserver\.\(\*EtcdServer\)\.apply",
                         r"etcdserver\.\(\*applier", r"mvcc\.\(\*store", r"bbolt", r"backend\."]),
    ("watch fan-out to clients", [r"mem_etcd::watch", r"v3rpc::watch", r"mvcc\.\(\*watchableStore",
                                  r"v3rpc\.\(\*serverWatchStream", r"mvcc\.\(\*watchStream"]),
    ("client requests (gRPC handlers)", [r"mem_etcd::server::v3rpc", r"etcdserverpb::.*_server",
                                         r"mem_etcd::server::etcdserver", r"v3rpc\.",
                                         r"etcdserver\.\(\*EtcdServer"]),
    ("HTTP/2 and gRPC transport (peer and client)", [r"h2::", r"hyper::", r"tonic::", r"tower::",
                                                     r"mem_etcd::server::embed",
                                                     r"google\.golang\.org/grpc", r"golang\.org/x/net/http2",
                                                     r"net/http\."]),
    ("garbage collection", [r"runtime\.gcBgMarkWorker", r"runtime\.gcDrain", r"runtime\.bgsweep",
                            r"runtime\.bgscavenge"]),
]
RUNTIME = [r"tokio::runtime::scheduler", r"tokio::runtime::time", r"tokio::runtime::io",
           r"tokio::runtime::park", r"parking_lot", r"runtime\.schedule", r"runtime\.findRunnable",
           r"runtime\.netpoll", r"runtime\.sysmon", r"runtime\.park", r"runtime\.mcall",
           r"runtime\.timer", r"runtime\.notesleep", r"runtime\.futex", r"runtime\.usleep",
           r"epoll_wait", r"futex", r"schedule"]
COMPILED = [(c, [re.compile(p) for p in ps]) for c, ps in CAUSES]
RUNTIME_RE = [re.compile(p) for p in RUNTIME]


def classify(frames):
    for cause, pats in COMPILED:
        for f in frames:
            if any(p.search(f) for p in pats):
                return cause
    if any(p.search(f) for f in frames for p in RUNTIME_RE):
        return "runtime: parking, waking, timers"
    return "other (allocator, kernel entry, threads of their own)"


def samples(lines):
    head, frames = None, []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if head is not None:
                yield head, frames
            head, frames = None, []
        elif head is None:
            head = line
        else:
            parts = line.strip().split(None, 1)
            frames.append(parts[1] if len(parts) > 1 else parts[0])
    if head is not None:
        yield head, frames


def main():
    by_pid = "--by-pid" in sys.argv
    total, causes, per_pid = 0, Counter(), defaultdict(Counter)
    for head, frames in samples(sys.stdin):
        m = re.match(r"\s*(.*?)\s+(\d+)\s*$", head) or re.match(r"\s*(\S+)\s+(\d+)", head)
        pid = m.group(2) if m else "?"
        cause = classify(frames)
        total += 1
        causes[cause] += 1
        per_pid[pid][cause] += 1
    if not total:
        sys.exit("no samples")
    print(f"{'cause':<48} {'share':>7}")
    for cause, n in causes.most_common():
        print(f"{cause:<48} {100 * n / total:6.1f}%")
    print(f"({total} samples)")
    if by_pid:
        for pid, c in sorted(per_pid.items()):
            n = sum(c.values())
            print(f"\npid {pid}: {100 * n / total:.1f}% of the samples")
            for cause, k in c.most_common():
                print(f"  {cause:<46} {100 * k / n:6.1f}%")


if __name__ == "__main__":
    main()
