//! Any bytes a client can send as one frame: decoding returns a request or an error, never
//! panics or aborts (the broker's allocator guard is installed, as in the binary).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: sluice_alloc::GuardedAlloc = sluice_alloc::GuardedAlloc;

fuzz_target!(|data: &[u8]| {
    let table = sluice_broker::broker::api_table();
    let mut framed = bytes::BytesMut::from(&(data.len() as i32).to_be_bytes()[..]);
    framed.extend_from_slice(data);
    if let Ok(Some(frame)) = sluice_wire::frame::next_frame(&mut framed, 1 << 20) {
        let _ = sluice_wire::decode_request(frame, &table);
    }
});
