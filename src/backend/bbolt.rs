//! bbolt's file format: the B+tree database etcd keeps its state in, and the format of what
//! `etcdctl snapshot save` writes. Only what moving data between etcd and mem_etcd needs: read
//! every key of every top-level bucket, and write a fresh, compact file that bbolt opens.
//!
//! # Layout (little-endian, fixed-size pages)
//! ```text
//! page       id u64, flags u16, count u16, overflow u32          16-byte header, then:
//!   meta     magic 0xED0CDAED, version 2, page size, flags,      pages 0 and 1; the valid one
//!            root bucket {root page u64, sequence u64},          with the higher txid wins
//!            freelist page, page count, txid, fnv-1a 64 of the preceding 56 bytes
//!   leaf     count x {flags u32, pos u32, ksize u32, vsize u32}, pos counted from the element
//!   branch   count x {pos u32, ksize u32, child page u64}        the child's first key
//!   freelist count x free page id                                (count 0xFFFF: the first u64)
//! ```
//! A page spills over `overflow` more pages. A leaf element with flag 1 is a sub-bucket: its
//! value is {root page, sequence}, followed by an inline leaf page when the root is 0.

use std::collections::HashSet;

/// Why a file is not a bbolt database this code can read. The text is for an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError(pub String);

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FormatError {}

fn bad(msg: impl Into<String>) -> FormatError {
    FormatError(msg.into())
}

pub const MAGIC: u32 = 0xED0C_DAED;
const VERSION: u32 = 2;
const PAGE_HEADER: usize = 16;
const ELEMENT: usize = 16;
const META_CHECKSUMMED: usize = 56;
const BRANCH: u16 = 0x01;
const LEAF: u16 = 0x02;
const META: u16 = 0x04;
const FREELIST: u16 = 0x10;
const BUCKET_FLAG: u32 = 0x01;
/// The page size this code writes: the one etcd gets on Linux (`os.Getpagesize()`).
pub const PAGE_SIZE: usize = 4096;
/// Deeper than any tree bbolt builds: a guard against cycles in a damaged file.
const MAX_DEPTH: usize = 64;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn fnv1a64(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A bbolt database held in memory, read-only.
#[derive(Debug)]
pub struct Db<'a> {
    data: &'a [u8],
    page_size: usize,
    /// The root bucket's root page.
    root: u64,
    /// Pages the meta says exist (the high-water mark).
    pages: u64,
}

impl<'a> Db<'a> {
    /// Checks both meta pages and picks the newest valid one, as bbolt does on open.
    pub fn open(data: &'a [u8]) -> Result<Self, FormatError> {
        let meta = |at: usize| -> Result<(u64, u64, u64, usize), String> {
            let m = data
                .get(at + PAGE_HEADER..at + PAGE_HEADER + 64)
                .ok_or("the file is shorter than its meta pages")?;
            if u32_at(m, 0) != MAGIC {
                return Err("no bbolt magic number".into());
            }
            if u32_at(m, 4) != VERSION {
                return Err(format!("bbolt format version {}, not {VERSION}", u32_at(m, 4)));
            }
            if fnv1a64(&m[..META_CHECKSUMMED]) != u64_at(m, META_CHECKSUMMED) {
                return Err("meta page checksum mismatch".into());
            }
            let page_size = u32_at(m, 8) as usize;
            if !(512..=1 << 20).contains(&page_size) || !page_size.is_power_of_two() {
                return Err(format!("impossible page size {page_size}"));
            }
            // root page, page count, txid, page size
            Ok((u64_at(m, 16), u64_at(m, 40), u64_at(m, 48), page_size))
        };
        let first = meta(0);
        // The second meta sits one page in, at the page size the first states (or the common
        // 4096 when the first is unreadable).
        let second = meta(first.as_ref().map_or(PAGE_SIZE, |m| m.3));
        let (root, pages, _, page_size) = match (first, second) {
            (Ok(a), Ok(b)) => {
                if b.2 > a.2 {
                    b
                } else {
                    a
                }
            }
            (Ok(a), Err(_)) | (Err(_), Ok(a)) => a,
            (Err(e), Err(_)) => return Err(bad(format!("not a bbolt database: {e}"))),
        };
        let db = Db { data, page_size, root, pages };
        if (data.len() as u64) < pages.saturating_mul(page_size as u64) {
            return Err(bad(format!(
                "truncated: the database has {pages} pages of {page_size} bytes ({} bytes), the \
                 file holds {} bytes",
                pages * page_size as u64,
                data.len()
            )));
        }
        Ok(db)
    }

    /// Page `id` with its overflow pages, checked against the file and the page count.
    fn page(&self, id: u64) -> Result<&'a [u8], FormatError> {
        if id < 2 || id >= self.pages {
            return Err(bad(format!("page {id} is outside the database ({} pages)", self.pages)));
        }
        let at = id as usize * self.page_size;
        let head = self
            .data
            .get(at..at + PAGE_HEADER)
            .ok_or_else(|| bad(format!("page {id} is past the end of the file")))?;
        if u64_at(head, 0) != id {
            return Err(bad(format!("page {id} says it is page {}", u64_at(head, 0))));
        }
        let len = (u32_at(head, 12) as usize + 1) * self.page_size;
        self.data
            .get(at..at + len)
            .ok_or_else(|| bad(format!("page {id} runs past the end of the file")))
    }

    /// The names of the top-level buckets.
    #[cfg(test)]
    pub fn buckets(&self) -> Result<Vec<Vec<u8>>, FormatError> {
        let mut names = Vec::new();
        self.walk(Tree::Page(self.root), 0, &mut |k, _, is_bucket| {
            if is_bucket {
                names.push(k.to_vec());
            }
            Ok(())
        })?;
        Ok(names)
    }

    /// Calls `f` with every key and value of top-level bucket `name`, in key order; `false` if
    /// there is no such bucket. Nested buckets (etcd has none) are refused.
    pub fn for_each(
        &self,
        name: &[u8],
        f: &mut dyn FnMut(&'a [u8], &'a [u8]) -> Result<(), FormatError>,
    ) -> Result<bool, FormatError> {
        let mut found = None;
        self.walk(Tree::Page(self.root), 0, &mut |k, v, is_bucket| {
            if is_bucket && k == name {
                found = Some(v);
            }
            Ok(())
        })?;
        let Some(header) = found else { return Ok(false) };
        if header.len() < 16 {
            return Err(bad("a bucket header is shorter than 16 bytes"));
        }
        let tree = match u64_at(header, 0) {
            0 => Tree::Inline(&header[16..]),
            id => Tree::Page(id),
        };
        let what = String::from_utf8_lossy(name).into_owned();
        self.walk(tree, 0, &mut |k, v, is_bucket| {
            if is_bucket {
                return Err(bad(format!("bucket {what:?} holds a nested bucket")));
            }
            f(k, v)
        })?;
        Ok(true)
    }

    fn walk(
        &self,
        tree: Tree<'a>,
        depth: usize,
        f: &mut dyn FnMut(&'a [u8], &'a [u8], bool) -> Result<(), FormatError>,
    ) -> Result<(), FormatError> {
        if depth > MAX_DEPTH {
            return Err(bad("the tree is deeper than any bbolt builds (a cycle?)"));
        }
        let (p, id) = match tree {
            Tree::Page(id) => (self.page(id)?, id),
            Tree::Inline(p) => (p, 0),
        };
        if p.len() < PAGE_HEADER {
            return Err(bad("an inline bucket is shorter than a page header"));
        }
        let (flags, count) = (u16_at(p, 8), u16_at(p, 10) as usize);
        let elem = |i: usize| -> Result<&'a [u8], FormatError> {
            p.get(PAGE_HEADER + i * ELEMENT..PAGE_HEADER + (i + 1) * ELEMENT)
                .ok_or_else(|| bad(format!("page {id}: element {i} lies outside the page")))
        };
        let slice = |from: usize, len: usize| -> Result<&'a [u8], FormatError> {
            p.get(from..from.saturating_add(len))
                .ok_or_else(|| bad(format!("page {id}: a key or value lies outside the page")))
        };
        match flags {
            LEAF => {
                for i in 0..count {
                    let e = elem(i)?;
                    let at = PAGE_HEADER + i * ELEMENT + u32_at(e, 4) as usize;
                    let (ks, vs) = (u32_at(e, 8) as usize, u32_at(e, 12) as usize);
                    let k = slice(at, ks)?;
                    let v = slice(at + ks, vs)?;
                    f(k, v, u32_at(e, 0) & BUCKET_FLAG != 0)?;
                }
            }
            BRANCH if matches!(tree, Tree::Page(_)) => {
                let mut seen = HashSet::new();
                for i in 0..count {
                    let child = u64_at(elem(i)?, 8);
                    if !seen.insert(child) {
                        return Err(bad(format!("page {id} points at page {child} twice")));
                    }
                    self.walk(Tree::Page(child), depth + 1, f)?;
                }
            }
            other => {
                return Err(bad(format!(
                    "page {id} has flags {other:#x} where a tree page was expected"
                )));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug)]
enum Tree<'a> {
    Page(u64),
    Inline(&'a [u8]),
}

/// One key/value of a bucket as [`Writer`] takes it. The value is measured when the layout is
/// planned and encoded straight into its page when it is written, so that a large store is
/// streamed without a copy of every value.
pub trait Entry {
    fn key(&self) -> &[u8];
    fn value_len(&self) -> usize;
    fn put_value(&self, out: &mut Vec<u8>);
}

impl<K: AsRef<[u8]>, V: AsRef<[u8]>> Entry for (K, V) {
    fn key(&self) -> &[u8] {
        self.0.as_ref()
    }
    fn value_len(&self) -> usize {
        self.1.as_ref().len()
    }
    fn put_value(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.1.as_ref())
    }
}

/// What takes a written file's bytes, in order; returns false to stop the writing.
pub type Sink<'a> = &'a mut dyn FnMut(&[u8]) -> bool;

/// Where a written file's tree ends up: what its meta pages, which come first, point at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The root bucket's page.
    pub root: u64,
    /// Pages in the file (bbolt's high water mark).
    pub pages: u64,
}

impl Layout {
    /// The file's size in bytes.
    pub fn bytes(&self) -> u64 {
        self.pages * PAGE_SIZE as u64
    }
}

/// Builds a bbolt file from buckets given in name order, each with its keys in order, as a
/// freshly compacted database: pages packed bottom-up, nothing free. Pages come out in file
/// order, so a file can be streamed: run the same buckets through [`Writer::plan`] first to
/// learn the [`Layout`] the meta pages (pages 0 and 1) need, then through [`Writer::new`].
pub struct Writer<'a> {
    /// Where the pages go; `None` when only planning.
    sink: Option<Sink<'a>>,
    /// The planned layout, checked at the end.
    planned: Option<Layout>,
    /// Next page id to hand out.
    next: u64,
    /// (name, root page) of the buckets written so far.
    buckets: Vec<(Vec<u8>, u64)>,
    /// The page being built, reused from page to page.
    page: Vec<u8>,
    /// Whether the sink took everything so far.
    ok: bool,
}

impl std::fmt::Debug for Writer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("next", &self.next).finish()
    }
}

/// A leaf or branch page's elements before they are laid out.
#[derive(Default)]
struct Pending {
    /// (key size, value size) of each element; a branch's value is its child's page id.
    sizes: Vec<(u32, u32)>,
    /// Keys and values, back to back.
    data: Vec<u8>,
    /// The first key: what the page is known by one level up.
    first: Vec<u8>,
    /// Bytes the page takes so far, header included.
    used: usize,
}

impl Pending {
    fn clear(&mut self) {
        self.sizes.clear();
        self.data.clear();
        self.first.clear();
        self.used = PAGE_HEADER;
    }
}

impl<'a> Writer<'a> {
    /// A writer that lays pages out without writing them: [`Writer::finish`] gives the layout.
    pub fn plan() -> Self {
        Writer {
            sink: None,
            planned: None,
            next: 3,
            buckets: Vec::new(),
            page: Vec::new(),
            ok: true,
        }
    }

    /// A writer that hands the file to `sink` in order, a page or a few at a time, starting
    /// with the meta and freelist pages for `layout` (what [`Writer::plan`] found for the same
    /// buckets). Once `sink` returns false nothing more is written.
    pub fn new(layout: Layout, sink: Sink<'a>) -> Self {
        let ok = sink(&head(layout));
        Writer {
            sink: Some(sink),
            planned: Some(layout),
            next: 3,
            buckets: Vec::new(),
            page: Vec::with_capacity(PAGE_SIZE),
            ok,
        }
    }

    /// Writes one top-level bucket. Names must come in increasing order, and so must keys.
    pub fn bucket<E: Entry>(&mut self, name: &[u8], entries: impl IntoIterator<Item = E>) {
        debug_assert!(self.buckets.last().is_none_or(|(n, _)| n.as_slice() < name));
        let mut level = Vec::new();
        let mut p = Pending { used: PAGE_HEADER, ..Default::default() };
        for e in entries {
            let (k, vlen) = (e.key(), e.value_len());
            let size = ELEMENT + k.len() + vlen;
            if !p.sizes.is_empty() && p.used + size > PAGE_SIZE {
                level.push(self.flush(&mut p, LEAF, 0));
            }
            if p.sizes.is_empty() {
                p.first.extend_from_slice(k);
            }
            p.sizes.push((k.len() as u32, vlen as u32));
            p.used += size;
            if self.sink.is_some() {
                p.data.extend_from_slice(k);
                let at = p.data.len();
                e.put_value(&mut p.data);
                debug_assert_eq!(p.data.len() - at, vlen, "value_len disagrees with put_value");
            }
        }
        if !p.sizes.is_empty() || level.is_empty() {
            level.push(self.flush(&mut p, LEAF, 0));
        }
        let root = self.branches(level, &mut p);
        self.buckets.push((name.to_vec(), root));
    }

    /// Puts branch pages over `level` until one page is left; returns its id.
    fn branches(&mut self, mut level: Vec<(Vec<u8>, u64)>, p: &mut Pending) -> u64 {
        while level.len() > 1 {
            let mut up = Vec::new();
            for (k, child) in level {
                let size = ELEMENT + k.len();
                if p.sizes.len() >= 2 && p.used + size > PAGE_SIZE {
                    up.push(self.flush(p, BRANCH, 0));
                }
                if p.sizes.is_empty() {
                    p.first.extend_from_slice(&k);
                }
                p.sizes.push((k.len() as u32, 0));
                p.used += size;
                p.data.extend_from_slice(&k);
                p.data.extend_from_slice(&child.to_le_bytes());
            }
            up.push(self.flush(p, BRANCH, 0));
            level = up;
        }
        level[0].1
    }

    /// Lays `p` out as the next page (spilling over as many pages as it needs), hands it to
    /// the sink, and clears it; returns (first key, page id). Leaf elements get `flags`.
    fn flush(&mut self, p: &mut Pending, kind: u16, flags: u32) -> (Vec<u8>, u64) {
        let id = self.next;
        let span = p.used.div_ceil(PAGE_SIZE).max(1);
        self.next += span as u64;
        if self.ok
            && let Some(sink) = self.sink.as_mut()
        {
            let page = &mut self.page;
            page.clear();
            page.extend_from_slice(&id.to_le_bytes());
            page.extend_from_slice(&kind.to_le_bytes());
            page.extend_from_slice(&(p.sizes.len() as u16).to_le_bytes());
            page.extend_from_slice(&((span - 1) as u32).to_le_bytes());
            // Each element's data position is counted from the element itself.
            let mut pos = p.sizes.len() * ELEMENT;
            let mut data = 0;
            for (i, &(k, v)) in p.sizes.iter().enumerate() {
                let rel = (pos - i * ELEMENT) as u32;
                if kind == BRANCH {
                    page.extend_from_slice(&rel.to_le_bytes());
                    page.extend_from_slice(&k.to_le_bytes());
                    let child = &p.data[data + k as usize..data + k as usize + 8];
                    page.extend_from_slice(child);
                    data += k as usize + 8;
                    pos += k as usize;
                } else {
                    page.extend_from_slice(&flags.to_le_bytes());
                    page.extend_from_slice(&rel.to_le_bytes());
                    page.extend_from_slice(&k.to_le_bytes());
                    page.extend_from_slice(&v.to_le_bytes());
                    pos += (k + v) as usize;
                }
            }
            if kind == BRANCH {
                let mut at = 0;
                for &(k, _) in &p.sizes {
                    page.extend_from_slice(&p.data[at..at + k as usize]);
                    at += k as usize + 8;
                }
            } else {
                page.extend_from_slice(&p.data);
            }
            page.resize(span * PAGE_SIZE, 0);
            self.ok = sink(page);
        }
        let first = std::mem::take(&mut p.first);
        p.clear();
        (first, id)
    }

    /// Writes the root bucket; returns the layout, or `None` if the sink stopped taking
    /// pages.
    ///
    /// # Panics
    /// If the buckets were not those the layout was planned for.
    pub fn finish(mut self) -> Option<Layout> {
        let buckets = std::mem::take(&mut self.buckets);
        let mut p = Pending { used: PAGE_HEADER, ..Default::default() };
        for (name, root) in &buckets {
            if p.sizes.is_empty() {
                p.first.extend_from_slice(name);
            }
            // A bucket's value: its root page and its sequence.
            p.sizes.push((name.len() as u32, 16));
            p.used += ELEMENT + name.len() + 16;
            p.data.extend_from_slice(name);
            p.data.extend_from_slice(&root.to_le_bytes());
            p.data.extend_from_slice(&0u64.to_le_bytes());
        }
        let (_, root) = self.flush(&mut p, LEAF, BUCKET_FLAG);
        let layout = Layout { root, pages: self.next };
        if let Some(planned) = self.planned {
            assert_eq!(planned, layout, "bbolt: the buckets written are not those planned");
        }
        self.ok.then_some(layout)
    }
}

/// Pages 0 to 2 of a file laid out as `layout`: the two meta pages and an empty freelist.
fn head(layout: Layout) -> Vec<u8> {
    let mut out = vec![0u8; 3 * PAGE_SIZE];
    let at = 2 * PAGE_SIZE;
    out[at..at + 8].copy_from_slice(&2u64.to_le_bytes());
    out[at + 8..at + 10].copy_from_slice(&FREELIST.to_le_bytes());
    for (id, txid) in [(0u64, 0u64), (1, 1)] {
        let at = id as usize * PAGE_SIZE;
        out[at..at + 8].copy_from_slice(&id.to_le_bytes());
        out[at + 8..at + 10].copy_from_slice(&META.to_le_bytes());
        let m = at + PAGE_HEADER;
        let mut meta = Vec::with_capacity(64);
        meta.extend_from_slice(&MAGIC.to_le_bytes());
        meta.extend_from_slice(&VERSION.to_le_bytes());
        meta.extend_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
        meta.extend_from_slice(&0u32.to_le_bytes());
        meta.extend_from_slice(&layout.root.to_le_bytes());
        meta.extend_from_slice(&0u64.to_le_bytes());
        meta.extend_from_slice(&2u64.to_le_bytes());
        meta.extend_from_slice(&layout.pages.to_le_bytes());
        meta.extend_from_slice(&txid.to_le_bytes());
        let sum = fnv1a64(&meta);
        meta.extend_from_slice(&sum.to_le_bytes());
        out[m..m + 64].copy_from_slice(&meta);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole file in memory: `buckets` is called twice, to plan and to write.
    fn write_all(buckets: impl Fn(&mut Writer)) -> Vec<u8> {
        let mut plan = Writer::plan();
        buckets(&mut plan);
        let layout = plan.finish().expect("planning writes nothing");
        let mut out = Vec::with_capacity(layout.bytes() as usize);
        let mut sink = |b: &[u8]| {
            out.extend_from_slice(b);
            true
        };
        let mut w = Writer::new(layout, &mut sink);
        buckets(&mut w);
        w.finish().expect("a Vec takes everything");
        out
    }

    fn all(db: &Db, name: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        let found = db
            .for_each(name, &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                Ok(())
            })
            .unwrap();
        assert!(found);
        out
    }

    #[test]
    fn written_buckets_read_back_in_order_across_branch_and_overflow_pages() {
        let many: Vec<(Vec<u8>, Vec<u8>)> = (0..20_000u32)
            .map(|i| (format!("k{i:08}").into_bytes(), vec![i as u8; (i % 300) as usize]))
            .collect();
        let big = vec![(b"huge".to_vec(), vec![7u8; 3 * PAGE_SIZE + 5])];
        let file = write_all(|w| {
            w.bucket(b"a", Vec::<(Vec<u8>, Vec<u8>)>::new());
            w.bucket(b"key", many.iter().cloned());
            w.bucket(b"lease", big.iter().cloned());
        });
        assert_eq!(file.len() % PAGE_SIZE, 0);
        let db = Db::open(&file).unwrap();
        assert_eq!(db.buckets().unwrap(), vec![b"a".to_vec(), b"key".to_vec(), b"lease".to_vec()]);
        assert!(all(&db, b"a").is_empty());
        assert_eq!(all(&db, b"key"), many);
        assert_eq!(all(&db, b"lease"), big);
        assert!(!db.for_each(b"nope", &mut |_, _| Ok(())).unwrap());
    }

    #[test]
    fn damaged_files_are_refused_not_misread() {
        let file =
            write_all(|w| w.bucket(b"key", (0..5000u32).map(|i| (i.to_be_bytes(), [1u8; 40]))));
        let e = Db::open(&file[..file.len() - PAGE_SIZE]).unwrap_err().0;
        assert!(e.contains("truncated"), "{e}");
        let e = Db::open(&file[..100]).unwrap_err().0;
        assert!(e.contains("truncated"), "{e}");
        let e = Db::open(&file[..50]).unwrap_err().0;
        assert!(e.contains("not a bbolt database"), "{e}");
        let e = Db::open(&[7u8; 8192]).unwrap_err().0;
        assert!(e.contains("not a bbolt database: no bbolt magic"), "{e}");
        // One meta page damaged: the other one still opens it, as bbolt does.
        let mut one = file.clone();
        one[PAGE_HEADER + 20] ^= 1;
        assert!(Db::open(&one).is_ok());
        one[PAGE_SIZE + PAGE_HEADER + 20] ^= 1;
        assert!(Db::open(&one).unwrap_err().0.contains("checksum"));
        // A tree page overwritten with something else.
        let mut page = file.clone();
        let at = 5 * PAGE_SIZE;
        page[at + 8] = 0x04;
        let db = Db::open(&page).unwrap();
        let e = db.for_each(b"key", &mut |_, _| Ok(())).unwrap_err().0;
        assert!(e.contains("flags"), "{e}");
    }
}
