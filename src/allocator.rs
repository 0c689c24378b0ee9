//! The daemon's allocator: mimalloc, called so that a store's buffers take their own size class,
//! and a thread of its own that hands freed memory back to the kernel.
//!
//! Why mimalloc: every gRPC request allocates and frees a few buffers (tonic's 8 KiB encode
//! buffer, the decode buffer, the reply) on one worker thread and often frees them on another.
//! glibc's malloc grows and trims its per-thread arenas around that pattern (mprotect,
//! sysmalloc): a quarter of the server's CPU per put in a profile. mimalloc's thread-local free
//! lists make it a few ns.
//!
//! Why not the `mimalloc` crate's allocator: it passes every layout to `mi_malloc_aligned`, and
//! mimalloc 3 serves an aligned request from the plain free list only while the size class's
//! page has a free block at hand; otherwise (each time a page's list runs out, which a growing
//! store hits all the time) it over-allocates by the alignment, into the next size class unless
//! the block size is a power of two. A version of a 16-byte key with a 300-byte value (a 320-byte
//! buffer, 4-aligned) then took 384 or 448 bytes: 72 bytes a key, a sixth of the store, in a
//! million-key load (benches/README.md, "Memory per key"). mimalloc's plain allocation already
//! returns 16-byte-aligned blocks for 16 bytes and more (every size class above 8 bytes is a
//! multiple of 16, and pages start aligned) and 8-aligned below, so a layout whose alignment is
//! at most 16 and at most its size takes the plain path, as Rust's own `System` allocator does
//! with the C library's malloc; only larger alignments go through the aligned calls.
//!
//! The project's unsafe code lives here and in `mvcc::kv_buf` only.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;
use std::time::Duration;

use libmimalloc_sys as mi;

/// The largest alignment every mimalloc block of at least that size has (`MI_MAX_ALIGN_SIZE`).
const PLAIN_ALIGN: usize = 16;

/// Whether a block of `size` bytes from mimalloc's plain path is aligned for `align`.
fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

/// mimalloc, each layout served by its plain calls where their blocks are aligned enough.
#[derive(Debug)]
pub struct MiMalloc;

// SAFETY: every block comes from mimalloc and goes back to it (mi_free takes blocks of either
// path); the plain path is taken only where its alignment covers the layout's (see the header).
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: FFI calls with no pointer arguments.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for alloc.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` is a block this allocator returned (GlobalAlloc's contract).
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` is a block this allocator returned with `layout` (GlobalAlloc's
        // contract); the new block's alignment is chosen as alloc chooses it.
        unsafe {
            if plain(layout.align(), new_size) {
                mi::mi_realloc(ptr.cast(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
            }
        }
    }
}

/// mimalloc's `mi_option_purge_delay` (v3's `mi_option_e`; the -sys crate names no constant).
const MI_OPTION_PURGE_DELAY: mi::mi_option_t = 15;

/// mimalloc returns freed memory to the kernel ("purging": madvise, page tables unmapped, other
/// cores' TLBs flushed) a delay after it is freed, on whichever thread frees a page next: a
/// request thread, possibly holding a partition's lock. After a compaction freed 1M versions of
/// a 5M-object store that took a worker 300 ms in the kernel and every put waited behind it
/// (renewals up to 330 ms). So the automatic delay is set too long to expire, and a thread of
/// its own purges whatever was freed, once a second: memory goes back as soon as it did, and no
/// request pays for it.
pub fn start_purge() {
    const PURGE_EVERY: Duration = Duration::from_secs(1);
    // SAFETY: setting an option and collecting are thread-safe mimalloc calls.
    unsafe { mi::mi_option_set(MI_OPTION_PURGE_DELAY, 3_600_000) };
    let spawned = std::thread::Builder::new().name("mimalloc-purge".into()).spawn(|| {
        // mimalloc collects through the calling thread's heap, set up by its first allocation.
        drop(std::hint::black_box(vec![0u8; 64]));
        loop {
            std::thread::sleep(PURGE_EVERY);
            // SAFETY: as above; forced, so everything freed meanwhile goes back now.
            unsafe { mi::mi_collect(true) };
        }
    });
    if let Err(e) = spawned {
        // Without the thread nothing would ever be returned: back to mimalloc's own purging.
        // SAFETY: as above.
        unsafe { mi::mi_option_set(MI_OPTION_PURGE_DELAY, 1_000) };
        eprintln!("mem_etcd: no allocator purge thread ({e}); mimalloc purges on its own");
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout};

    use super::MiMalloc;

    /// The usable size mimalloc gives the block at `p`.
    fn usable(p: *mut u8) -> usize {
        // SAFETY: `p` is a live mimalloc block.
        unsafe { super::mi::mi_usable_size(p.cast_const().cast()) }
    }

    /// Many blocks of one store buffer's layout, as a growing store asks for them (each page's
    /// free list runs out again and again): every one in its own size class, none over-allocated.
    #[test]
    fn a_growing_stores_buffers_keep_their_size_class() {
        let layout = Layout::from_size_align(320, 4).unwrap();
        let blocks: Vec<*mut u8> = (0..100_000)
            // SAFETY: a non-zero-size layout; each block is freed below.
            .map(|_| unsafe { MiMalloc.alloc(layout) })
            .collect();
        let over = blocks.iter().filter(|&&p| usable(p) != 320).count();
        for p in blocks {
            // SAFETY: allocated above with `layout`.
            unsafe { MiMalloc.dealloc(p, layout) };
        }
        assert_eq!(over, 0, "blocks of 320 bytes given a larger size class");
    }

    /// Every block honours its layout's alignment, through alloc, alloc_zeroed and realloc, for
    /// sizes on both sides of the plain path's limits and alignments up to a page.
    #[test]
    fn every_block_is_aligned_as_its_layout_asks() {
        for align in (0..=12).map(|s| 1usize << s) {
            for size in [1, 3, 8, 12, 16, 24, 40, 100, 320, 4_000, 70_000] {
                let layout = Layout::from_size_align(size, align).unwrap();
                for _ in 0..64 {
                    // SAFETY: non-zero sizes; each block freed with its own layout.
                    unsafe {
                        let p = MiMalloc.alloc(layout);
                        let z = MiMalloc.alloc_zeroed(layout);
                        assert_eq!(p as usize % align, 0, "alloc({size}, {align})");
                        assert_eq!(z as usize % align, 0, "alloc_zeroed({size}, {align})");
                        assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                        p.write_bytes(7, size);
                        let r = MiMalloc.realloc(p, layout, size * 3);
                        assert_eq!(
                            r as usize % align,
                            0,
                            "realloc({size} -> {}, {align})",
                            size * 3
                        );
                        assert!(std::slice::from_raw_parts(r, size).iter().all(|&b| b == 7));
                        MiMalloc.dealloc(r, Layout::from_size_align(size * 3, align).unwrap());
                        MiMalloc.dealloc(z, layout);
                    }
                }
            }
        }
    }
}
