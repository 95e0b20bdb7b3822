//! Fuzz target: the object-store decoders that read bytes from disk — the object header
//! (`linerate_cache::format::decode_header`) and the index journal/snapshot parser.
//! Nothing may panic, overflow or allocate without bound; a header that decodes must
//! re-encode to bytes that decode to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_cache::format::{decode_header, peek_header_len};
use linerate_cache::journal;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = decode_header(data) {
        let len = peek_header_len(data).expect("decoded header has a valid length");
        assert!(len <= data.len());
        assert!(h.body_offset >= len as u64);
        let again = h.encode().expect("a decoded header re-encodes");
        assert_eq!(decode_header(&again).as_ref(), Ok(&h));
    }
    let _ = journal::parse(data, false);
    let _ = journal::parse(data, true);
});
