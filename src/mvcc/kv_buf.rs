//! One version's key and value in a single reference-counted allocation.
//!
//! A key's newest version is what a million-object store is made of, so its fixed cost is
//! the store's memory per key. Held as two `Bytes` views of one buffer it cost the two 32-byte
//! views plus the 24 bytes `bytes` allocates as the buffer's shared header; here the buffer
//! starts with a 4-byte count and the handle carries the two lengths (16 bytes in all). The
//! header is kept that small because the allocator rounds every size up to a size class (four
//! to a power of two): 300-odd bytes of key and value plus 4 stay in the class they were in,
//! plus 12 would not. Readers get `Bytes` views through [`KvBuf::to_bytes`], which pays one
//! small allocation per read for what the store no longer keeps per key.
//!
//! The project's second unsafe code (the first: the daemon's allocator, `allocator.rs`): an `Arc`
//! of unsized bytes whose count takes 4 bytes, where std's takes 16.
#![allow(unsafe_code)]

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering, fence};

use bytes::Bytes;

/// An immutable key and value, shared: cloning counts a reference, the last drop frees.
pub struct KvBuf {
    /// The count of clones alive, followed by the key's bytes, then the value's. Shared by the
    /// record, by later versions that kept its value (`ignore_value`) or that are its
    /// tombstone, and by every `Bytes` view handed to a response or event still in flight.
    ptr: NonNull<AtomicU32>,
    key_len: u32,
    value_len: u32,
}

// The bytes never change after `new`, and the count is atomic: the same reasoning as `Arc`'s.
unsafe impl Send for KvBuf {}
unsafe impl Sync for KvBuf {}

/// Past this many references a count is a leak, not a workload: stop before it wraps.
const MAX_REFS: u32 = i32::MAX as u32;

/// The count's size: the bytes start right after it.
const HEADER: usize = size_of::<AtomicU32>();

fn layout(len: usize) -> Layout {
    let size = HEADER.checked_add(len).expect("a key and value under 4 GiB fit a layout");
    Layout::from_size_align(size, align_of::<AtomicU32>())
        .expect("a key and value under 4 GiB fit a layout")
}

impl KvBuf {
    /// Copies `key` and `value` into a new buffer. A request is at most `--max-request-bytes`
    /// (a 32-bit flag), so both lengths fit 32 bits.
    pub fn new(key: &[u8], value: &[u8]) -> Self {
        let key_len = u32::try_from(key.len()).expect("a key under 4 GiB");
        let value_len = u32::try_from(value.len()).expect("a value under 4 GiB");
        let len = key.len().checked_add(value.len()).expect("a key and value under 4 GiB");
        let layout = layout(len);
        // SAFETY: the layout is never zero-sized (the count takes 4 bytes); the count is
        // written before anything reads it, and the bytes are copied into the room the layout
        // gives after it.
        unsafe {
            let Some(ptr) = NonNull::new(alloc(layout).cast::<AtomicU32>()) else {
                handle_alloc_error(layout)
            };
            ptr.write(AtomicU32::new(1));
            let data = ptr.as_ptr().cast::<u8>().add(HEADER);
            std::ptr::copy_nonoverlapping(key.as_ptr(), data, key.len());
            std::ptr::copy_nonoverlapping(value.as_ptr(), data.add(key.len()), value.len());
            KvBuf { ptr, key_len, value_len }
        }
    }

    fn refs(&self) -> &AtomicU32 {
        // SAFETY: the count lives as long as any clone, this one included.
        unsafe { self.ptr.as_ref() }
    }

    /// The key's bytes followed by the value's.
    fn all(&self) -> &[u8] {
        let len = self.key_len as usize + self.value_len as usize;
        // SAFETY: `new` wrote exactly `len` bytes after the count, never changed since.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<u8>().add(HEADER), len) }
    }

    pub fn key(&self) -> &[u8] {
        &self.all()[..self.key_len as usize]
    }

    pub fn value(&self) -> &[u8] {
        &self.all()[self.key_len as usize..]
    }

    /// `Bytes` views of the key and of the value, sharing this buffer (no copy).
    pub fn to_bytes(&self) -> (Bytes, Bytes) {
        let mut key = Bytes::from_owner(self.clone());
        let value = key.split_off(self.key_len as usize);
        (key, value)
    }

    /// A `Bytes` view of the key alone.
    pub fn key_bytes(&self) -> Bytes {
        Bytes::from_owner(self.clone()).slice(..self.key_len as usize)
    }
}

impl AsRef<[u8]> for KvBuf {
    fn as_ref(&self) -> &[u8] {
        self.all()
    }
}

impl Clone for KvBuf {
    fn clone(&self) -> Self {
        // Relaxed as in `Arc`: a new reference comes from an existing one, which keeps the
        // buffer alive meanwhile.
        if self.refs().fetch_add(1, Ordering::Relaxed) > MAX_REFS {
            std::process::abort();
        }
        KvBuf { ptr: self.ptr, key_len: self.key_len, value_len: self.value_len }
    }
}

impl Drop for KvBuf {
    fn drop(&mut self) {
        if self.refs().fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Every other clone's uses happen before the free (`Arc`'s ordering).
        fence(Ordering::Acquire);
        let len = self.all().len();
        // SAFETY: the last reference: nobody else can reach the buffer, allocated with this
        // layout in `new`.
        unsafe { dealloc(self.ptr.as_ptr().cast::<u8>(), layout(len)) }
    }
}

impl std::fmt::Debug for KvBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvBuf")
            .field("key", &Bytes::copy_from_slice(self.key()))
            .field("value_len", &self.value().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_and_value_come_back_and_outlive_the_buffer_they_were_viewed_from() {
        let b = KvBuf::new(b"/registry/leases/a", b"value");
        assert_eq!((b.key(), b.value()), (&b"/registry/leases/a"[..], &b"value"[..]));
        let (k, v) = b.to_bytes();
        let c = b.clone();
        drop(b);
        assert_eq!(c.refs().load(Ordering::Relaxed), 2, "c and the views' owner");
        drop(c);
        assert_eq!((&k[..], &v[..]), (&b"/registry/leases/a"[..], &b"value"[..]));
        let empty = KvBuf::new(b"", b"");
        assert!(empty.key().is_empty() && empty.value().is_empty());
        assert_eq!(empty.key_bytes(), Bytes::new());
    }

    #[test]
    fn the_last_of_many_clones_across_threads_frees_once() {
        let b = KvBuf::new(b"k", &[7u8; 300]);
        std::thread::scope(|s| {
            for _ in 0..4 {
                let b = b.clone();
                s.spawn(move || {
                    for _ in 0..10_000 {
                        let (_, v) = b.clone().to_bytes();
                        assert_eq!(v.len(), 300);
                    }
                });
            }
        });
        assert_eq!(b.refs().load(Ordering::Relaxed), 1);
        assert_eq!(size_of::<KvBuf>(), 16);
        assert_eq!(size_of::<Option<KvBuf>>(), 16, "a niche for the history's enum");
    }
}
