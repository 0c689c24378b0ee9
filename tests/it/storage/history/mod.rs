//! History checking: concurrent clients send Kubernetes-shaped traffic to one server or to the
//! members of a cluster, every request and response is recorded with its timing, and the
//! history is then validated.
//!
//! * KV and lease operations must be linearizable against a model of etcd's MVCC store and
//!   lessor (a lease's expiry is an operation of unknown outcome, possible from its TTL after
//!   the grant on). The search is Wing & Gong's with Lowe's memoization (a set of linearized
//!   operations plus a model state is explored at most once). Revisions are global, so the
//!   history cannot be partitioned by key; runs are kept to a few thousand operations instead,
//!   with several seeds.
//! * Reads at a pinned revision are checked outside the search, exactly, against the state the
//!   linearization had at that revision.
//! * Watches started from a list's revision must deliver exactly the linearization's events
//!   (ordered, unique, atomic, reliable, with prev_kv and the create flag right), continue
//!   seamlessly when resumed from the last revision + 1, never report progress past an event they
//!   have not delivered, and refuse a compacted start revision with its compact_revision.
//!
//! * With faults, the same traffic runs while the server is killed with SIGKILL and restarted
//!   (fsync and buffered mode: a killed process loses nothing acknowledged in either, so the
//!   history must stay linearizable across the restarts, writes cut off by the crash counting as
//!   unknown), while its disk fails (writes refused with "WAL write failed" must never take
//!   effect), and while one watcher stalls with megabytes of padded values going by. Watchers
//!   resume on the restarted server from their last revision + 1.
//!
//! * Over a 3-member cluster (`cluster_history_*`), the same traffic runs with every client
//!   sticking to one member (round robin) and the watchers spread over the members, each
//!   reconnecting to its own member when that member is restarted, while the leader and a
//!   follower are killed with SIGKILL and restarted on their (buffered) data, the leader is cut
//!   off from the others by a partition (mem_etcd's peer failpoint) until they elect another,
//!   and the leader and a follower are paused (SIGSTOP) and resumed. A request that gets no
//!   answer or fails for want of a leader (`etcdserver: request timed out`, `no leader`,
//!   `leader changed`, an unavailable member) is a write of unknown outcome, or a read that
//!   constrains nothing; one that no watcher saw take effect is left out of the search (were
//!   the watches wrong, the linearization would come out a revision short). The linearizable
//!   operations must be linearizable as above; half the Gets are serializable and are checked
//!   after the search: each must be the linearization's
//!   state at its header's revision, a revision no older than any the client saw before from its
//!   member (read-your-writes and monotonic reads per member). Every watcher's streams must keep
//!   every watch guarantee, and the members must converge to one revision and one HashKV.
//!
//! Every run starts a fresh server (or cluster) of the suite's target
//! (`MEM_ETCD_TEST_TARGET=etcd` runs the same checks against a real etcd, which proves the
//! model; the one allowance it needs is named at [`checker::check_watch_with`]); the fault runs
//! on one server are mem_etcd's own (they use its WAL failpoint), the cluster's run against etcd
//! as well, pausing members where mem_etcd's are cut off by a partition. The
//! default is a few seeds, a few seconds in a debug build;
//! `MEM_ETCD_HISTORY_SOAK=<seconds>` keeps running new seeds for that long, and
//! `MEM_ETCD_HISTORY_SEED=<n>` picks the first seed (each run prints its seed and what it
//! exercised); `MEM_ETCD_HISTORY_DUMP=<file>` writes a history the search refuses to
//! `<file>.seed<n>`, one operation a line in call order (times in ns from the start).
//!
//! Its rooms, each using only those listed before it: `model` (the store and lessor the history
//! is checked against), `checker` (the search and the watch checks), `traffic` (requests,
//! connections, clients and watchers), `verify` (what every run ends with), `server` (the runs
//! on one server), `cluster` (the runs over a cluster), and `checker_tests`.

mod checker;
mod checker_tests;
mod cluster;
mod model;
mod server;
mod traffic;
mod verify;
