//! A global allocator that survives absurd speculative allocations.
//!
//! Why: the `kafka-protocol` 0.18 decoders pre-size vectors from array counts read off the
//! wire (`Vec::with_capacity(n)` before decoding one element; upstream PRs #152/#161/#200 are
//! unmerged). An 18-byte request claiming 2^32 topics asks for hundreds of GiB; the system
//! allocator refuses, and Rust aborts the whole broker. We cannot patch the crate, so the
//! process contains it: allocations of 1 GiB or more (no legitimate allocation in Sluice comes
//! near that; frames are capped at `socket.request.max.bytes`) are served by an anonymous
//! `MAP_NORESERVE` mapping, which Linux grants lazily. The decoder then touches a few pages,
//! runs out of input, returns an error, and the mapping is unmapped.
//!
//! Everything else goes to the system allocator unchanged.
#![allow(unsafe_code)] // the one crate that may: a GlobalAlloc is unsafe by definition

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;

/// Allocations at least this large are mapped lazily.
pub const HUGE_BYTES: usize = 1 << 30;
const PAGE_BYTES: usize = 4096;

#[derive(Debug, Default, Clone, Copy)]
pub struct GuardedAlloc;

fn is_huge(size: usize, align: usize) -> bool {
    size >= HUGE_BYTES && align <= PAGE_BYTES
}

fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping with no address hint has no preconditions.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        p.cast()
    }
}

// SAFETY: every block is either the system allocator's (small or over-aligned) or a mapping
// of exactly `layout.size()` bytes (huge), and `dealloc`/`realloc` tell them apart by the same
// `is_huge(layout)` test that `alloc` used, since Rust passes back the allocation's layout.
unsafe impl GlobalAlloc for GuardedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_huge(layout.size(), layout.align()) {
            map(layout.size())
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_huge(layout.size(), layout.align()) {
            map(layout.size()) // anonymous mappings are zero-filled
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_huge(layout.size(), layout.align()) {
            // SAFETY: `ptr` came from `map(layout.size())`.
            unsafe {
                libc::munmap(ptr.cast(), layout.size());
            }
        } else {
            // SAFETY: `ptr` came from the system allocator with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !is_huge(layout.size(), layout.align()) && !is_huge(new_size, layout.align()) {
            // SAFETY: forwarded with the caller's guarantees.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller guarantees `new_size` with this alignment is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a fresh allocation of a non-zero size.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the copied length and do not overlap.
            unsafe {
                ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static ALLOC: GuardedAlloc = GuardedAlloc;

    #[test]
    fn an_absurd_capacity_is_granted_lazily_and_released() {
        for _ in 0..3 {
            let mut v: Vec<[u8; 256]> = Vec::with_capacity(u32::MAX as usize);
            v.push([7; 256]);
            assert_eq!(v[0][255], 7);
            assert!(v.capacity() >= u32::MAX as usize);
        }
    }

    #[test]
    fn growth_across_the_threshold_keeps_the_contents() {
        let mut v: Vec<u8> = vec![1, 2, 3];
        v.reserve_exact(HUGE_BYTES);
        assert_eq!(&v[..], &[1, 2, 3]);
        v.shrink_to_fit();
        assert_eq!(&v[..], &[1, 2, 3]);
        let z: Vec<u64> = vec![0; HUGE_BYTES / 8];
        assert_eq!(z[HUGE_BYTES / 8 - 1], 0);
    }
}
