//! Tests of the Raft log (`log_store`): entries released from memory read back from their
//! segments (across truncations, purges and a purge that overtakes a read), damaged records,
//! and what a restart recovers (truncations, purges, a torn tail).

use super::*;

fn entry(term: u64, index: u64, data: &'static [u8]) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term), index),
        payload: EntryPayload::Normal(Proposal(Bytes::from_static(data))),
    }
}

fn opts(dir: &Path, mode: Mode) -> LogOptions {
    LogOptions {
        dir: dir.join("log"),
        mode,
        segment_bytes: 1 << 20,
        flush_interval: Duration::from_millis(5),
        keep_in_memory: DEFAULT_KEEP_IN_MEMORY,
    }
}

async fn append(s: &mut LogStore, entries: Vec<Entry>) {
    use openraft::type_config::TypeConfigExt;
    let (tx, rx) = TypeConfig::oneshot();
    s.append(entries, IOFlushed::signal(tx)).await.unwrap();
    rx.await.unwrap().unwrap();
}

/// An entry of 100 to 400 bytes that tells its log id.
fn sized(term: u64, index: u64) -> Entry {
    let mut data = format!("{term}/{index}/").into_bytes();
    data.resize(100 + (index as usize * 37) % 300, b'a' + (index % 26) as u8);
    Entry { log_id: log_id(term, index), payload: EntryPayload::Normal(Proposal(data.into())) }
}

fn entries(term: u64, indexes: Range<u64>) -> Vec<Entry> {
    indexes.map(|i| sized(term, i)).collect()
}

/// Small segments (several per test) and `keep` entries held.
fn small(dir: &Path, mode: Mode, keep: u64) -> LogOptions {
    LogOptions { segment_bytes: 4096, keep_in_memory: keep, ..opts(dir, mode) }
}

/// Appends `entries` in batches of 1 to 4, with a committed record between batches (so the
/// runs read back have other records among them).
async fn append_batches(s: &mut LogStore, entries: &[Entry]) {
    let mut rest = entries;
    for n in (1..=4).cycle() {
        if rest.is_empty() {
            break;
        }
        let (batch, tail) = rest.split_at(n.min(rest.len()));
        append(s, batch.to_vec()).await;
        s.save_committed(Some(batch[0].log_id)).await.unwrap();
        rest = tail;
    }
}

/// Reads ranges of every shape over the log and checks each against `want` (the log's
/// entries from the purge point on).
async fn check_ranges(s: &mut LogStore, want: &[Entry]) {
    use Bound::*;
    let n = want.last().map_or(0, |e| e.log_id.index + 1);
    let mut ranges = vec![
        (Unbounded, Unbounded),
        (Included(0), Excluded(n)),
        (Excluded(0), Included(n.saturating_sub(2))),
        (Included(n.saturating_sub(1)), Unbounded),
        (Included(n.saturating_sub(4)), Excluded(n)),
        (Included(n + 3), Unbounded),
        (Unbounded, Excluded(5)),
    ];
    for a in (0..n).step_by(3) {
        ranges.push((Included(a), Excluded(a + 7)));
        ranges.push((Included(a), Included(a)));
    }
    for r in ranges {
        let expected: Vec<Entry> =
            want.iter().filter(|e| r.contains(&e.log_id.index)).cloned().collect();
        let got = s.try_get_log_entries(r).await.unwrap();
        assert_eq!(got, expected, "range {r:?}");
    }
    let st = s.get_log_state().await.unwrap();
    if let Some(last) = want.last() {
        assert_eq!(st.last_log_id, Some(last.log_id));
    }
}

#[tokio::test]
async fn spilled_entries_are_read_back_across_segments() {
    for mode in [Mode::Buffered, Mode::Fsync, Mode::None] {
        let dir = tempfile::tempdir().unwrap();
        let o = small(dir.path(), mode, 3);
        let mut s = LogStore::open(&o).unwrap();
        let want = entries(1, 0..60);
        append_batches(&mut s, &want).await;
        if mode == Mode::None {
            assert_eq!(s.held(), 60, "nothing to read back from: all held");
        } else {
            assert!(list(&o.dir).unwrap().len() >= 4, "several segments");
            assert_eq!(s.held(), 3, "{mode:?}");
        }
        check_ranges(&mut s, &want).await;
        s.close();
    }
}

#[tokio::test]
async fn released_entries_are_read_back_and_appends_after_them_are_held() {
    for mode in [Mode::Buffered, Mode::Fsync, Mode::None] {
        let dir = tempfile::tempdir().unwrap();
        let o = small(dir.path(), mode, 100);
        let mut s = LogStore::open(&o).unwrap();
        let mut want = entries(1, 0..40);
        append_batches(&mut s, &want).await;
        assert_eq!(s.held(), 40);
        s.release(29);
        let held = if mode == Mode::None { 40 } else { 10 };
        assert_eq!(s.held(), held, "{mode:?}: entries 30.. held");
        check_ranges(&mut s, &want).await;
        // A release behind what is already released changes nothing.
        s.release(3);
        assert_eq!(s.held(), held);
        let more = entries(1, 40..45);
        append_batches(&mut s, &more).await;
        want.extend(more);
        assert_eq!(s.held(), held + 5);
        // Past the last entry: none held; a truncation and appends after it still work.
        s.release(100);
        assert_eq!(s.held(), if mode == Mode::None { 45 } else { 0 });
        s.truncate_after(Some(log_id(1, 41))).await.unwrap();
        want.truncate(42);
        let more = entries(2, 42..44);
        append(&mut s, more.clone()).await;
        want.extend(more);
        check_ranges(&mut s, &want).await;
        s.close();
        if mode == Mode::None {
            continue;
        }
        // A restart reads the released entries back like any other.
        let mut s = LogStore::open(&o).unwrap();
        check_ranges(&mut s, &want).await;
        s.close();
    }
}

#[tokio::test]
async fn a_truncation_into_the_spilled_entries_then_appends_read_back() {
    for mode in [Mode::Buffered, Mode::Fsync] {
        let dir = tempfile::tempdir().unwrap();
        let o = small(dir.path(), mode, 3);
        let mut want = {
            let mut s = LogStore::open(&o).unwrap();
            let mut want = entries(1, 0..40);
            append_batches(&mut s, &want).await;
            // Into the spilled part: nothing is held any more.
            s.truncate_after(Some(log_id(1, 19))).await.unwrap();
            want.truncate(20);
            assert_eq!(s.held(), 0);
            assert_eq!(s.get_log_state().await.unwrap().last_log_id, Some(log_id(1, 19)));
            check_ranges(&mut s, &want).await;
            let more = entries(2, 20..35);
            append_batches(&mut s, &more).await;
            want.extend(more);
            check_ranges(&mut s, &want).await;
            // Into the held part.
            s.truncate_after(Some(log_id(2, 33))).await.unwrap();
            want.truncate(34);
            let more = entries(3, 34..36);
            append(&mut s, more.clone()).await;
            want.extend(more);
            assert_eq!(s.held(), 3);
            check_ranges(&mut s, &want).await;
            s.close();
            want
        };
        // A restart finds the newest record of each index.
        let mut s = LogStore::open(&o).unwrap();
        check_ranges(&mut s, &want).await;
        s.truncate_after(Some(log_id(1, 10))).await.unwrap();
        want.truncate(11);
        let more = entries(4, 11..15);
        append_batches(&mut s, &more).await;
        want.extend(more);
        check_ranges(&mut s, &want).await;
        s.close();
    }
}

#[tokio::test]
async fn purged_entries_are_gone_and_the_others_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let o = small(dir.path(), Mode::Buffered, 3);
    let mut s = LogStore::open(&o).unwrap();
    let mut want = entries(1, 0..60);
    append_batches(&mut s, &want).await;
    let before = list(&o.dir).unwrap().len();
    s.purge(log_id(1, 25)).await.unwrap();
    assert!(list(&o.dir).unwrap().len() < before, "purged segments are deleted");
    want.drain(..26);
    check_ranges(&mut s, &want).await;
    assert_eq!(s.get_log_state().await.unwrap().last_purged_log_id, Some(log_id(1, 25)));
    // Into the held entries.
    s.purge(log_id(1, 58)).await.unwrap();
    want.drain(..want.len() - 1);
    assert_eq!(s.held(), 1);
    check_ranges(&mut s, &want).await;
    // Past the last entry (a snapshot installed), then appends.
    s.purge(log_id(1, 70)).await.unwrap();
    assert_eq!(s.try_get_log_entries(..).await.unwrap(), []);
    assert_eq!(s.get_log_state().await.unwrap().last_log_id, Some(log_id(1, 70)));
    let want = entries(2, 71..80);
    append_batches(&mut s, &want).await;
    check_ranges(&mut s, &want).await;
    s.close();
    let mut s = LogStore::open(&o).unwrap();
    check_ranges(&mut s, &want).await;
    // Every segment from before the restart is known, and deleted once purged.
    s.purge(log_id(2, 79)).await.unwrap();
    assert_eq!(list(&o.dir).unwrap().len(), 1, "only the current segment is left");
    s.close();
}

#[tokio::test]
async fn a_read_overtaken_by_a_purge_returns_what_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = small(dir.path(), Mode::Buffered, 3);
    let mut s = LogStore::open(&o).unwrap();
    let want = entries(1, 0..60);
    append_batches(&mut s, &want).await;
    // The locations are taken, then a purge deletes segments before they are read.
    let plan = s.mem.lock().range(..);
    assert_eq!((plan.start, plan.spilled.len(), plan.held.len()), (0, 57, 3));
    // The first segment read, then the second found deleted by a purge (of both): the
    // entries from the first are dropped too, never leaving a hole.
    let second = plan.spilled.iter().find(|l| l.seq != plan.spilled[0].seq).unwrap().seq;
    let after = plan.spilled.iter().rposition(|l| l.seq == second).unwrap() + 1;
    let d = s.disk.clone().unwrap();
    let paths = |seqs: &[u64]| {
        let mut p = d.paths(seqs);
        p[1] = None;
        p
    };
    let got = read_back(0, &plan.spilled, paths, || after as u64).unwrap();
    assert_eq!(got, want[after..57]);
    // The same with the second segment's entries not purged: an error.
    let err = read_back(0, &plan.spilled, paths, || after as u64 - 1).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");

    // A real purge deleting segments before they are read.
    s.purge(log_id(1, 30)).await.unwrap();
    let got = s.read_spilled(plan.start, &plan.spilled).unwrap();
    let first = got[0].log_id.index;
    assert!(first > 0 && first <= 31, "starts after the deleted segments: {first}");
    assert_eq!(got, want[first as usize..57]);

    // A segment gone that holds entries not purged: an error.
    let kept = list(&o.dir).unwrap();
    fs::remove_file(&kept[0].0).unwrap();
    let err = s.try_get_log_entries(..).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
    // What follows it still reads back.
    let later = want[40..].to_vec();
    assert_eq!(s.try_get_log_entries(40..).await.unwrap(), later);
    s.close();
}

#[tokio::test]
async fn a_damaged_record_read_back_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let o = small(dir.path(), Mode::Buffered, 3);
    let mut s = LogStore::open(&o).unwrap();
    let want = entries(1, 0..20);
    append_batches(&mut s, &want).await;
    let loc = s.mem.lock().locs[5];
    let path = s.disk.as_ref().unwrap().paths(&[loc.seq])[0].clone().unwrap();
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(b"X", loc.offset + u64::from(loc.len) - 1).unwrap();
    let err = s.try_get_log_entries(3..8).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    assert_eq!(s.try_get_log_entries(6..).await.unwrap(), want[6..]);
    s.close();
}

#[tokio::test]
async fn a_restart_holds_only_the_newest_entries() {
    for mode in [Mode::Buffered, Mode::Fsync] {
        let dir = tempfile::tempdir().unwrap();
        let mut o = small(dir.path(), mode, 3);
        let mut want = entries(1, 0..60);
        {
            let mut s = LogStore::open(&o).unwrap();
            append_batches(&mut s, &want).await;
            s.truncate_after(Some(log_id(1, 49))).await.unwrap();
            want.truncate(50);
            let more = entries(2, 50..55);
            append_batches(&mut s, &more).await;
            want.extend(more);
            s.purge(log_id(1, 4)).await.unwrap();
            want.drain(..5);
            s.close();
        }
        for (keep, held) in [(3, 3), (10, 10), (1000, 50), (0, 0)] {
            o.keep_in_memory = keep;
            let mut s = LogStore::open(&o).unwrap();
            assert_eq!(s.held(), held, "{mode:?} keep {keep}");
            check_ranges(&mut s, &want).await;
            s.close();
        }
        o.keep_in_memory = 3;
        let mut s = LogStore::open(&o).unwrap();
        let more = entries(2, 55..70);
        append_batches(&mut s, &more).await;
        want.extend(more);
        assert_eq!(s.held(), 3);
        check_ranges(&mut s, &want).await;
        s.close();
    }
}

#[tokio::test]
async fn read_local_returns_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let o = small(dir.path(), Mode::Buffered, 3);
    let mut want = entries(1, 0..60);
    {
        let mut s = LogStore::open(&o).unwrap();
        s.save_vote(&Vote::new_committed(3, 1)).await.unwrap();
        append_batches(&mut s, &want).await;
        s.purge(log_id(1, 9)).await.unwrap();
        s.truncate_after(Some(log_id(1, 29))).await.unwrap();
        want.truncate(30);
        let more = entries(3, 30..45);
        append_batches(&mut s, &more).await;
        want.extend(more);
        want.drain(..10);
        s.close();
    }
    let local = read_local(&o.dir).unwrap();
    assert_eq!(local.vote, Some(Vote::new_committed(3, 1)));
    assert_eq!(local.committed, Some(log_id(3, 43)), "the last batch starts at 43");
    assert_eq!(local.entries, want);
}

#[test]
fn a_location_is_small() {
    assert_eq!(std::mem::size_of::<Loc>(), 32);
}

#[tokio::test]
async fn the_log_survives_a_restart_with_truncations_and_purges() {
    for mode in [Mode::Buffered, Mode::Fsync] {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = LogStore::open(&opts(dir.path(), mode)).unwrap();
            s.save_vote(&Vote::new_committed(2, 7)).await.unwrap();
            append(&mut s, vec![entry(1, 0, b"a"), entry(1, 1, b"b"), entry(1, 2, b"c")]).await;
            s.truncate_after(Some(LogId::new(CommittedLeaderId::new(1), 1))).await.unwrap();
            append(&mut s, vec![entry(2, 2, b"C"), entry(2, 3, b"d")]).await;
            s.save_committed(Some(LogId::new(CommittedLeaderId::new(2), 3))).await.unwrap();
            s.purge(LogId::new(CommittedLeaderId::new(1), 0)).await.unwrap();
            s.close();
        }
        let mut s = LogStore::open(&opts(dir.path(), mode)).unwrap();
        assert_eq!(s.read_vote().await.unwrap(), Some(Vote::new_committed(2, 7)));
        let st = s.get_log_state().await.unwrap();
        assert_eq!(st.last_purged_log_id.unwrap().index, 0);
        assert_eq!(st.last_log_id.unwrap(), LogId::new(CommittedLeaderId::new(2), 3));
        let got = s.try_get_log_entries(0..10).await.unwrap();
        assert_eq!(got, vec![entry(1, 1, b"b"), entry(2, 2, b"C"), entry(2, 3, b"d")]);
        assert_eq!(s.read_committed().await.unwrap().unwrap().index, 3);
    }
}

#[tokio::test]
async fn a_torn_tail_is_cut_off_and_full_segments_roll_over() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path(), Mode::Buffered);
    o.segment_bytes = 4096;
    let big: &'static [u8] = Box::leak(vec![b'x'; 5000].into_boxed_slice());
    {
        let mut s = LogStore::open(&o).unwrap();
        for i in 0..5 {
            append(&mut s, vec![entry(1, i, big)]).await;
        }
        assert!(list(&o.dir).unwrap().len() >= 5, "one segment per entry");
        s.purge(LogId::new(CommittedLeaderId::new(1), 2)).await.unwrap();
        s.close();
    }
    let segs = list(&o.dir).unwrap();
    assert!(segs.len() <= 3, "purged segments are deleted: {segs:?}");
    // Reopened as is: what remains starts after the purge point.
    {
        let mut s = LogStore::open(&o).unwrap();
        let got = s.try_get_log_entries(..).await.unwrap();
        assert_eq!(got.iter().map(|e| e.log_id.index).collect::<Vec<_>>(), [3, 4]);
        s.close();
    }
    // A torn last record.
    let segs = list(&o.dir).unwrap();
    let (last, seq, _) = segs.last().unwrap().clone();
    let mut f = OpenOptions::new().append(true).open(&last).unwrap();
    f.write_all(&[9, 0, 0, 0, 1]).unwrap();
    drop(f);
    let _ = seq;
    let s = LogStore::open(&o).unwrap();
    s.close();
    // A segment cut short while being created (no full header), after the others.
    let seq = list(&o.dir).unwrap().last().unwrap().1;
    std::fs::write(o.dir.join(segment_name(seq + 1, 5)), &MAGIC[..5]).unwrap();
    for _ in 0..2 {
        let mut s = LogStore::open(&o).unwrap();
        let got = s.try_get_log_entries(..).await.unwrap();
        assert_eq!(got.iter().map(|e| e.log_id.index).collect::<Vec<_>>(), [3, 4]);
        s.close();
    }
}
