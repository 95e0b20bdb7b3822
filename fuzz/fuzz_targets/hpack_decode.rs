//! Fuzz target: HPACK (`h2::hpack`). Decoding arbitrary blocks with a small dynamic table
//! and list limit never panics, keeps the table within its size and delivers at most the
//! list limit; and a field list made from the input, encoded by `Encoder` over several
//! blocks (with table size changes), decodes back to the same fields with the decoder's
//! dynamic table in step.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_http::h2::hpack::{DecodeError, Decoder, Encoder, ENTRY_OVERHEAD};

fuzz_target!(|data: &[u8]| {
    let Some((&[table, limit], rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let table = usize::from(table) * 2;
    let limit = usize::from(limit) * 8;

    // 1. Arbitrary bytes as blocks (split at 0xfe), one decoder, as one connection.
    let mut d = Decoder::new(table);
    for block in rest.split(|&b| b == 0xfe) {
        let mut listed = 0usize;
        let r = d.decode(block, limit, |n, v| {
            listed += n.len() + v.len() + ENTRY_OVERHEAD
        });
        assert!(listed <= limit);
        assert!(d.table_size() <= table);
        match r {
            Ok(()) | Err(DecodeError::ListTooLarge) => {}
            Err(DecodeError::Compression(why)) => {
                assert!(!why.is_empty());
                // The context is lost: a connection would end here.
                break;
            }
        }
    }

    // 2. Encode -> decode: fields are `name 0x00 value` separated by 0xff, blocks by 0xfe;
    // a block starting with 0xfd first sets the peer's table size from its next byte.
    let mut e = Encoder::new();
    let mut d = Decoder::new(4096);
    for block in rest.split(|&b| b == 0xfe) {
        let mut block = block;
        if let [0xfd, size, tail @ ..] = block {
            e.set_max_table_size(usize::from(*size) * 16);
            block = tail;
        }
        let fields: Vec<(&[u8], &[u8])> = block
            .split(|&b| b == 0xff)
            .filter(|f| !f.is_empty())
            .map(|f| match f.iter().position(|&b| b == 0) {
                Some(i) => (&f[..i], &f[i + 1..]),
                None => (f, &[][..]),
            })
            .collect();
        let mut out = Vec::new();
        e.encode(fields.iter().copied(), &mut out);
        let mut got: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        d.decode(&out, usize::MAX, |n, v| got.push((n.to_vec(), v.to_vec())))
            .expect("our own encoding decodes");
        let want: Vec<(Vec<u8>, Vec<u8>)> = fields
            .iter()
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect();
        assert_eq!(got, want);
    }
});
