//! The Huffman code of HPACK (RFC 7541 §5.2, Appendix B): encoding, and decoding that
//! rejects what §5.2 says a decoder must (the EOS symbol, padding longer than 7 bits,
//! padding that is not the most significant bits of EOS, i.e. not all ones).
//!
//! The table is Appendix B's, taken from `h2`'s `src/hpack/huffman/table.rs` (MIT) and
//! checked here: the code is complete (Kraft sum 1) and canonical (codes of one length
//! are consecutive, ordered by symbol), every byte round-trips, and the Appendix C
//! vectors (in `hpack`) decode. Decoding is canonical-Huffman: the left-aligned next 32
//! bits are compared with the first code of each length, no 4 KiB state table.

/// `(code, bits)` of each symbol 0..=255 and EOS (256), RFC 7541 Appendix B.
const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13),     // 0
    (0x7fffd8, 23),   // 1
    (0xfffffe2, 28),  // 2
    (0xfffffe3, 28),  // 3
    (0xfffffe4, 28),  // 4
    (0xfffffe5, 28),  // 5
    (0xfffffe6, 28),  // 6
    (0xfffffe7, 28),  // 7
    (0xfffffe8, 28),  // 8
    (0xffffea, 24),   // 9
    (0x3ffffffc, 30), // 10
    (0xfffffe9, 28),  // 11
    (0xfffffea, 28),  // 12
    (0x3ffffffd, 30), // 13
    (0xfffffeb, 28),  // 14
    (0xfffffec, 28),  // 15
    (0xfffffed, 28),  // 16
    (0xfffffee, 28),  // 17
    (0xfffffef, 28),  // 18
    (0xffffff0, 28),  // 19
    (0xffffff1, 28),  // 20
    (0xffffff2, 28),  // 21
    (0x3ffffffe, 30), // 22
    (0xffffff3, 28),  // 23
    (0xffffff4, 28),  // 24
    (0xffffff5, 28),  // 25
    (0xffffff6, 28),  // 26
    (0xffffff7, 28),  // 27
    (0xffffff8, 28),  // 28
    (0xffffff9, 28),  // 29
    (0xffffffa, 28),  // 30
    (0xffffffb, 28),  // 31
    (0x14, 6),        // ' '
    (0x3f8, 10),      // '!'
    (0x3f9, 10),      // '"'
    (0xffa, 12),      // '#'
    (0x1ff9, 13),     // '$'
    (0x15, 6),        // '%'
    (0xf8, 8),        // '&'
    (0x7fa, 11),      // "'"
    (0x3fa, 10),      // '('
    (0x3fb, 10),      // ')'
    (0xf9, 8),        // '*'
    (0x7fb, 11),      // '+'
    (0xfa, 8),        // ','
    (0x16, 6),        // '-'
    (0x17, 6),        // '.'
    (0x18, 6),        // '/'
    (0x0, 5),         // '0'
    (0x1, 5),         // '1'
    (0x2, 5),         // '2'
    (0x19, 6),        // '3'
    (0x1a, 6),        // '4'
    (0x1b, 6),        // '5'
    (0x1c, 6),        // '6'
    (0x1d, 6),        // '7'
    (0x1e, 6),        // '8'
    (0x1f, 6),        // '9'
    (0x5c, 7),        // ':'
    (0xfb, 8),        // ';'
    (0x7ffc, 15),     // '<'
    (0x20, 6),        // '='
    (0xffb, 12),      // '>'
    (0x3fc, 10),      // '?'
    (0x1ffa, 13),     // '@'
    (0x21, 6),        // 'A'
    (0x5d, 7),        // 'B'
    (0x5e, 7),        // 'C'
    (0x5f, 7),        // 'D'
    (0x60, 7),        // 'E'
    (0x61, 7),        // 'F'
    (0x62, 7),        // 'G'
    (0x63, 7),        // 'H'
    (0x64, 7),        // 'I'
    (0x65, 7),        // 'J'
    (0x66, 7),        // 'K'
    (0x67, 7),        // 'L'
    (0x68, 7),        // 'M'
    (0x69, 7),        // 'N'
    (0x6a, 7),        // 'O'
    (0x6b, 7),        // 'P'
    (0x6c, 7),        // 'Q'
    (0x6d, 7),        // 'R'
    (0x6e, 7),        // 'S'
    (0x6f, 7),        // 'T'
    (0x70, 7),        // 'U'
    (0x71, 7),        // 'V'
    (0x72, 7),        // 'W'
    (0xfc, 8),        // 'X'
    (0x73, 7),        // 'Y'
    (0xfd, 8),        // 'Z'
    (0x1ffb, 13),     // '['
    (0x7fff0, 19),    // '\\'
    (0x1ffc, 13),     // ']'
    (0x3ffc, 14),     // '^'
    (0x22, 6),        // '_'
    (0x7ffd, 15),     // '`'
    (0x3, 5),         // 'a'
    (0x23, 6),        // 'b'
    (0x4, 5),         // 'c'
    (0x24, 6),        // 'd'
    (0x5, 5),         // 'e'
    (0x25, 6),        // 'f'
    (0x26, 6),        // 'g'
    (0x27, 6),        // 'h'
    (0x6, 5),         // 'i'
    (0x74, 7),        // 'j'
    (0x75, 7),        // 'k'
    (0x28, 6),        // 'l'
    (0x29, 6),        // 'm'
    (0x2a, 6),        // 'n'
    (0x7, 5),         // 'o'
    (0x2b, 6),        // 'p'
    (0x76, 7),        // 'q'
    (0x2c, 6),        // 'r'
    (0x8, 5),         // 's'
    (0x9, 5),         // 't'
    (0x2d, 6),        // 'u'
    (0x77, 7),        // 'v'
    (0x78, 7),        // 'w'
    (0x79, 7),        // 'x'
    (0x7a, 7),        // 'y'
    (0x7b, 7),        // 'z'
    (0x7ffe, 15),     // '{'
    (0x7fc, 11),      // '|'
    (0x3ffd, 14),     // '}'
    (0x1ffd, 13),     // '~'
    (0xffffffc, 28),  // 127
    (0xfffe6, 20),    // 128
    (0x3fffd2, 22),   // 129
    (0xfffe7, 20),    // 130
    (0xfffe8, 20),    // 131
    (0x3fffd3, 22),   // 132
    (0x3fffd4, 22),   // 133
    (0x3fffd5, 22),   // 134
    (0x7fffd9, 23),   // 135
    (0x3fffd6, 22),   // 136
    (0x7fffda, 23),   // 137
    (0x7fffdb, 23),   // 138
    (0x7fffdc, 23),   // 139
    (0x7fffdd, 23),   // 140
    (0x7fffde, 23),   // 141
    (0xffffeb, 24),   // 142
    (0x7fffdf, 23),   // 143
    (0xffffec, 24),   // 144
    (0xffffed, 24),   // 145
    (0x3fffd7, 22),   // 146
    (0x7fffe0, 23),   // 147
    (0xffffee, 24),   // 148
    (0x7fffe1, 23),   // 149
    (0x7fffe2, 23),   // 150
    (0x7fffe3, 23),   // 151
    (0x7fffe4, 23),   // 152
    (0x1fffdc, 21),   // 153
    (0x3fffd8, 22),   // 154
    (0x7fffe5, 23),   // 155
    (0x3fffd9, 22),   // 156
    (0x7fffe6, 23),   // 157
    (0x7fffe7, 23),   // 158
    (0xffffef, 24),   // 159
    (0x3fffda, 22),   // 160
    (0x1fffdd, 21),   // 161
    (0xfffe9, 20),    // 162
    (0x3fffdb, 22),   // 163
    (0x3fffdc, 22),   // 164
    (0x7fffe8, 23),   // 165
    (0x7fffe9, 23),   // 166
    (0x1fffde, 21),   // 167
    (0x7fffea, 23),   // 168
    (0x3fffdd, 22),   // 169
    (0x3fffde, 22),   // 170
    (0xfffff0, 24),   // 171
    (0x1fffdf, 21),   // 172
    (0x3fffdf, 22),   // 173
    (0x7fffeb, 23),   // 174
    (0x7fffec, 23),   // 175
    (0x1fffe0, 21),   // 176
    (0x1fffe1, 21),   // 177
    (0x3fffe0, 22),   // 178
    (0x1fffe2, 21),   // 179
    (0x7fffed, 23),   // 180
    (0x3fffe1, 22),   // 181
    (0x7fffee, 23),   // 182
    (0x7fffef, 23),   // 183
    (0xfffea, 20),    // 184
    (0x3fffe2, 22),   // 185
    (0x3fffe3, 22),   // 186
    (0x3fffe4, 22),   // 187
    (0x7ffff0, 23),   // 188
    (0x3fffe5, 22),   // 189
    (0x3fffe6, 22),   // 190
    (0x7ffff1, 23),   // 191
    (0x3ffffe0, 26),  // 192
    (0x3ffffe1, 26),  // 193
    (0xfffeb, 20),    // 194
    (0x7fff1, 19),    // 195
    (0x3fffe7, 22),   // 196
    (0x7ffff2, 23),   // 197
    (0x3fffe8, 22),   // 198
    (0x1ffffec, 25),  // 199
    (0x3ffffe2, 26),  // 200
    (0x3ffffe3, 26),  // 201
    (0x3ffffe4, 26),  // 202
    (0x7ffffde, 27),  // 203
    (0x7ffffdf, 27),  // 204
    (0x3ffffe5, 26),  // 205
    (0xfffff1, 24),   // 206
    (0x1ffffed, 25),  // 207
    (0x7fff2, 19),    // 208
    (0x1fffe3, 21),   // 209
    (0x3ffffe6, 26),  // 210
    (0x7ffffe0, 27),  // 211
    (0x7ffffe1, 27),  // 212
    (0x3ffffe7, 26),  // 213
    (0x7ffffe2, 27),  // 214
    (0xfffff2, 24),   // 215
    (0x1fffe4, 21),   // 216
    (0x1fffe5, 21),   // 217
    (0x3ffffe8, 26),  // 218
    (0x3ffffe9, 26),  // 219
    (0xffffffd, 28),  // 220
    (0x7ffffe3, 27),  // 221
    (0x7ffffe4, 27),  // 222
    (0x7ffffe5, 27),  // 223
    (0xfffec, 20),    // 224
    (0xfffff3, 24),   // 225
    (0xfffed, 20),    // 226
    (0x1fffe6, 21),   // 227
    (0x3fffe9, 22),   // 228
    (0x1fffe7, 21),   // 229
    (0x1fffe8, 21),   // 230
    (0x7ffff3, 23),   // 231
    (0x3fffea, 22),   // 232
    (0x3fffeb, 22),   // 233
    (0x1ffffee, 25),  // 234
    (0x1ffffef, 25),  // 235
    (0xfffff4, 24),   // 236
    (0xfffff5, 24),   // 237
    (0x3ffffea, 26),  // 238
    (0x7ffff4, 23),   // 239
    (0x3ffffeb, 26),  // 240
    (0x7ffffe6, 27),  // 241
    (0x3ffffec, 26),  // 242
    (0x3ffffed, 26),  // 243
    (0x7ffffe7, 27),  // 244
    (0x7ffffe8, 27),  // 245
    (0x7ffffe9, 27),  // 246
    (0x7ffffea, 27),  // 247
    (0x7ffffeb, 27),  // 248
    (0xffffffe, 28),  // 249
    (0x7ffffec, 27),  // 250
    (0x7ffffed, 27),  // 251
    (0x7ffffee, 27),  // 252
    (0x7ffffef, 27),  // 253
    (0x7fffff0, 27),  // 254
    (0x3ffffee, 26),  // 255
    (0x3fffffff, 30), // EOS
];

/// The EOS symbol.
const EOS: u16 = 256;
/// The longest code, in bits (EOS and a few rare bytes).
const MAX_BITS: usize = 30;
/// The shortest code, in bits.
const MIN_BITS: usize = 5;

/// The canonical decoding tables: per code length, the first code of that length, the
/// index in [`Tables::syms`] of its symbol, and the left-aligned 32-bit limit below
/// which a window holds a code of at most that length.
struct Tables {
    first: [u32; MAX_BITS + 1],
    offset: [u16; MAX_BITS + 1],
    limit: [u64; MAX_BITS + 1],
    /// Symbols sorted by (length, code).
    syms: [u16; 257],
}

const fn tables() -> Tables {
    let mut t = Tables {
        first: [0; MAX_BITS + 1],
        offset: [0; MAX_BITS + 1],
        limit: [0; MAX_BITS + 1],
        syms: [0; 257],
    };
    let mut n = 0;
    let mut len = 1;
    while len <= MAX_BITS {
        t.offset[len] = n as u16;
        let mut first = u32::MAX;
        let mut count = 0u64;
        let mut s = 0;
        while s < 257 {
            if CODES[s].1 as usize == len {
                t.syms[n] = s as u16;
                n += 1;
                count += 1;
                if CODES[s].0 < first {
                    first = CODES[s].0;
                }
            }
            s += 1;
        }
        if count == 0 {
            // No code of this length: its limit is the previous one (nothing matches here).
            t.limit[len] = if len == 1 { 0 } else { t.limit[len - 1] };
        } else {
            t.first[len] = first;
            t.limit[len] = (first as u64 + count) << (32 - len);
        }
        len += 1;
    }
    t
}

static TABLES: Tables = tables();

/// Bytes `src` takes once Huffman-coded (padding included).
pub(crate) fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src
        .iter()
        .map(|&b| usize::from(CODES[usize::from(b)].1))
        .sum();
    bits.div_ceil(8)
}

/// Appends the Huffman coding of `src` to `out`, padded with the most significant bits
/// of EOS (ones).
pub(crate) fn encode(src: &[u8], out: &mut Vec<u8>) {
    let mut acc: u64 = 0;
    let mut nbits: u32 = 0;
    for &b in src {
        let (code, bits) = CODES[usize::from(b)];
        acc = (acc << bits) | u64::from(code);
        nbits += u32::from(bits);
        while nbits >= 8 {
            nbits -= 8;
            out.push((acc >> nbits) as u8);
        }
    }
    if nbits > 0 {
        let pad = 8 - nbits;
        out.push(((acc << pad) | ((1 << pad) - 1)) as u8);
    }
}

/// Appends the decoding of `src` to `out` (at most `src.len() * 8 / 5` bytes), or the
/// reason it is not a valid §5.2 string: `huffman_eos`, `huffman_padding_too_long`,
/// `huffman_padding_not_ones`.
pub(crate) fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let t = &TABLES;
    out.reserve(src.len() * 8 / MIN_BITS);
    // The next bits, left-aligned in 64.
    let mut acc: u64 = 0;
    let mut nbits: usize = 0;
    let mut bytes = src.iter();
    loop {
        while nbits <= 56 {
            let Some(&b) = bytes.next() else { break };
            acc |= u64::from(b) << (56 - nbits);
            nbits += 8;
        }
        if nbits == 0 {
            return Ok(());
        }
        let window = acc >> 32;
        let mut len = MIN_BITS;
        // limit[MAX_BITS] is 2^32: every window ends the scan.
        while window >= t.limit[len] {
            len += 1;
        }
        if len > nbits {
            // An incomplete code: the end of the string, so padding (§5.2).
            if nbits > 7 {
                return Err("huffman_padding_too_long");
            }
            if acc >> (64 - nbits) != (1 << nbits) - 1 {
                return Err("huffman_padding_not_ones");
            }
            return Ok(());
        }
        let code = (window >> (32 - len)) as u32;
        let sym = t.syms[usize::from(t.offset[len]) + (code - t.first[len]) as usize];
        if sym == EOS {
            return Err("huffman_eos");
        }
        out.push(sym as u8);
        acc <<= len;
        nbits -= len;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn code_is_complete_and_canonical() {
        // Kraft sum exactly 1: a complete prefix code.
        let kraft: u64 = CODES
            .iter()
            .map(|&(_, bits)| 1u64 << (MAX_BITS - bits as usize))
            .sum();
        assert_eq!(kraft, 1 << MAX_BITS);
        // Canonical: sorted by (length, symbol), each code is the previous one plus one,
        // shifted left by the growth in length.
        let mut order: Vec<usize> = (0..257).collect();
        order.sort_by_key(|&s| (CODES[s].1, s));
        let mut prev: Option<(u32, u8)> = None;
        for s in order {
            let (code, bits) = CODES[s];
            assert!(code < (1 << bits), "symbol {s}");
            if let Some((pc, pb)) = prev {
                assert_eq!(code, (pc + 1) << (bits - pb), "symbol {s}");
            } else {
                assert_eq!(code, 0);
            }
            prev = Some((code, bits));
        }
        assert_eq!(CODES[256], (0x3fff_ffff, 30));
        assert_eq!(TABLES.limit[MAX_BITS], 1 << 32);
    }

    /// Every byte alone, and all 256 in one string, round-trip; the length is predicted.
    #[test]
    fn all_256_bytes_round_trip() {
        for b in 0..=255u8 {
            let mut enc = Vec::new();
            encode(&[b], &mut enc);
            assert_eq!(enc.len(), encoded_len(&[b]));
            let mut dec = Vec::new();
            decode(&enc, &mut dec).unwrap();
            assert_eq!(dec, [b]);
        }
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        let mut enc = Vec::new();
        encode(&all, &mut enc);
        assert_eq!(enc.len(), encoded_len(&all));
        let mut dec = Vec::new();
        decode(&enc, &mut dec).unwrap();
        assert_eq!(dec, all);
    }

    #[test]
    fn rfc_7541_c_4_1_www_example_com() {
        let mut enc = Vec::new();
        encode(b"www.example.com", &mut enc);
        assert_eq!(
            enc,
            [0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff]
        );
        let mut dec = Vec::new();
        decode(&enc, &mut dec).unwrap();
        assert_eq!(dec, b"www.example.com");
    }

    #[test]
    fn empty_string() {
        let mut dec = Vec::new();
        decode(&[], &mut dec).unwrap();
        assert!(dec.is_empty());
        assert_eq!(encoded_len(b""), 0);
    }

    /// h2spec hpack 5.2.1: padding longer than 7 bits.
    #[test]
    fn padding_longer_than_7_bits() {
        // 'a' is 00011 (5 bits): then 11 one bits of padding.
        assert_eq!(
            decode(&[0x1f, 0xff], &mut Vec::new()),
            Err("huffman_padding_too_long")
        );
        // A whole byte of ones alone.
        assert_eq!(
            decode(&[0xff], &mut Vec::new()),
            Err("huffman_padding_too_long")
        );
    }

    /// h2spec hpack 5.2.2: padding with zeros.
    #[test]
    fn padding_not_ones() {
        // 'a' (00011) then 3 bits of padding: 000 and 101 are not the ones of EOS.
        assert_eq!(
            decode(&[0x18], &mut Vec::new()),
            Err("huffman_padding_not_ones")
        );
        assert_eq!(
            decode(&[0x1d], &mut Vec::new()),
            Err("huffman_padding_not_ones")
        );
        assert_eq!(decode(&[0x1f], &mut Vec::new()), Ok(()));
    }

    /// h2spec hpack 5.2.3: the EOS symbol inside a string.
    #[test]
    fn eos_refused() {
        // 30 ones, then 2 ones of padding.
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff], &mut Vec::new()),
            Err("huffman_eos")
        );
        // 'a' then EOS then padding.
        let bits: u64 = (0b00011 << 35) | (0x3fff_ffff << 5) | 0x1f;
        let b = bits.to_be_bytes();
        assert_eq!(decode(&b[3..], &mut Vec::new()), Err("huffman_eos"));
    }

    #[test]
    fn decoded_length_bounded() {
        // 5-bit codes only: 8 bytes = 64 bits = 12 symbols + 4 bits of padding.
        let mut enc = Vec::new();
        encode(b"000000000000", &mut enc);
        assert_eq!(enc.len(), 8);
        let mut dec = Vec::new();
        decode(&enc, &mut dec).unwrap();
        assert!(dec.len() <= enc.len() * 8 / 5);
    }
}
