//! HPACK (RFC 7541): decoding the field blocks a client sends and encoding the ones a
//! server answers with.
//!
//! [`Decoder::decode`] hands each field to a callback, borrowed from wherever it already
//! is (the block, the static table, the dynamic table, or one scratch buffer for
//! Huffman-coded strings): no allocation per field. Its memory is bounded: the dynamic
//! table holds at most `max_table_size` bytes of names and values (plus the same again
//! in evicted bytes awaiting compaction, and a small index per entry), and the scratch
//! buffer at most 8/5 of the block's length. A field block that expands to more than
//! the header list limit (an "HPACK bomb": one large dynamic entry referenced thousands
//! of times by one-byte indexes) costs one pass over the block and no memory: fields
//! past the limit are counted, not delivered.
//!
//! The decoder does not judge field names or values (uppercase names, pseudo-header
//! order, connection-specific fields are RFC 9113 §8.2's rules, checked by whoever
//! builds the request), and does not tell the caller which literals were never-indexed:
//! a server that forwards over HTTP/1.1 has no further HPACK hop to protect them on.
//!
//! [`Encoder::encode`] picks, per field: the static or dynamic table entry when name and
//! value match (one byte); never-indexed for credentials (`authorization`,
//! `proxy-authorization`, `cookie`, `set-cookie`: RFC 7541 §7.1.3); literal without
//! indexing for values that change on every response (`date`, `etag`, `last-modified`,
//! `content-length`, `content-range`, `age`, `expires`), which would only churn the
//! table; incremental indexing for the rest (`server`, `content-type`, `accept-ranges`,
//! `cache-control`, `vary`, `cache-status`...), whose values repeat across responses so
//! the second response sends them in one byte. A name comes from the tables when it can,
//! and a string is Huffman-coded when that is shorter.

use super::huffman;

/// `SETTINGS_HEADER_TABLE_SIZE`'s initial value (RFC 9113 §6.5.2), and the most the
/// [`Encoder`] uses whatever larger table a peer allows.
pub const DEFAULT_TABLE_SIZE: usize = 4096;

/// The per-entry overhead of RFC 7541 §4.1, also used for header list sizes (RFC 9113
/// §6.5.2).
pub const ENTRY_OVERHEAD: usize = 32;

/// The static table (RFC 7541 Appendix A), index 1 first.
const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// The dynamic table (RFC 7541 §2.3.2, §4): names and values in one byte buffer, newest
/// at the end, evicted from the front. Evicting only moves `head`; the dead bytes are
/// dropped once they reach the table's size, so insertion is amortised O(entry) and the
/// buffer stays under about twice the table size.
#[derive(Debug, Default)]
struct Table {
    bytes: Vec<u8>,
    /// Where the oldest live entry starts in `bytes`.
    head: usize,
    /// `(start, name length, value length)`, oldest first.
    entries: std::collections::VecDeque<(usize, usize, usize)>,
    /// The §4.1 size: names, values and 32 per entry.
    size: usize,
    /// The current maximum size (§4.2).
    max: usize,
}

impl Table {
    fn new(max: usize) -> Table {
        Table {
            max,
            ..Table::default()
        }
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    /// Entry `i`, 0 being the newest (dynamic index 62 in the address space, §2.3.3).
    fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        let &(start, n, v) = self.entries.get(self.entries.len().checked_sub(i + 1)?)?;
        Some((
            &self.bytes[start..start + n],
            &self.bytes[start + n..start + n + v],
        ))
    }

    fn evict_one(&mut self) {
        if let Some((_, n, v)) = self.entries.pop_front() {
            self.size -= n + v + ENTRY_OVERHEAD;
        }
        match self.entries.front() {
            Some(&(start, _, _)) => self.head = start,
            None => {
                self.bytes.clear();
                self.head = 0;
            }
        }
    }

    /// A new maximum size (§4.3): entries are evicted until the table fits.
    fn set_max(&mut self, max: usize) {
        self.max = max;
        while self.size > self.max {
            self.evict_one();
        }
    }

    /// Adds an entry (§4.4): older entries are evicted to make room; one larger than the
    /// whole table empties it and is not added.
    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max {
            while !self.entries.is_empty() {
                self.evict_one();
            }
            return;
        }
        while self.size + size > self.max {
            self.evict_one();
        }
        if self.head > 0 && self.head >= self.max {
            self.bytes.drain(..self.head);
            for e in &mut self.entries {
                e.0 -= self.head;
            }
            self.head = 0;
        }
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name);
        self.bytes.extend_from_slice(value);
        self.entries.push_back((start, name.len(), value.len()));
        self.size += size;
    }

    /// Newest first.
    fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

/// Why a field block was not decoded in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// A coding error (RFC 7541 §2.3.3, §4.2, §5, §6): the compression context is lost,
    /// so the caller ends the connection with COMPRESSION_ERROR (RFC 9113 §4.3). The
    /// label says which rule (`index_zero`, `huffman_eos`, ...).
    Compression(&'static str),
    /// The fields add up to more than the header list limit (RFC 9113 §6.5.2 sizes):
    /// the ones past it were not delivered, but the block was decoded to its end, so
    /// the dynamic table is in step and the caller answers 431 on that stream only.
    ListTooLarge,
}

impl DecodeError {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            DecodeError::Compression(why) => why,
            DecodeError::ListTooLarge => "header_list_too_large",
        }
    }
}

fn err(why: &'static str) -> DecodeError {
    DecodeError::Compression(why)
}

/// An integer with an `prefix`-bit prefix (§5.1) at `block[*at]`. Values above 2^32-1
/// (and encodings longer than 5 continuation bytes, however small their value) are
/// refused: no index, length or size is that large.
fn integer(block: &[u8], at: &mut usize, prefix: u32) -> Result<usize, DecodeError> {
    let mask = (1u8 << prefix) - 1;
    let Some(&first) = block.get(*at) else {
        return Err(err("integer_truncated"));
    };
    *at += 1;
    let first = first & mask;
    if first < mask {
        return Ok(usize::from(first));
    }
    let mut value = u64::from(mask);
    let mut shift = 0;
    loop {
        let Some(&b) = block.get(*at) else {
            return Err(err("integer_truncated"));
        };
        *at += 1;
        value += u64::from(b & 0x7f) << shift;
        if value > u64::from(u32::MAX) {
            return Err(err("integer_overflow"));
        }
        if b & 0x80 == 0 {
            return usize::try_from(value).map_err(|_| err("integer_overflow"));
        }
        shift += 7;
        if shift > 28 {
            return Err(err("integer_overflow"));
        }
    }
}

/// Appends an integer (§5.1) whose first byte carries `flags` above a `prefix`-bit prefix.
fn write_integer(out: &mut Vec<u8>, flags: u8, prefix: u32, value: usize) {
    let mask = (1usize << prefix) - 1;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Where a decoded name or value lives until it is delivered.
#[derive(Clone, Copy)]
enum Src {
    Block(usize, usize),
    Scratch(usize, usize),
    Static(&'static [u8]),
    /// The name of dynamic entry `i` (0 = newest).
    TableName(usize),
}

fn resolve<'a>(src: Src, block: &'a [u8], scratch: &'a [u8], table: &'a Table) -> &'a [u8] {
    match src {
        Src::Block(a, b) => &block[a..b],
        Src::Scratch(a, b) => &scratch[a..b],
        Src::Static(s) => s,
        // Checked when the Src was made, and the table does not change before use.
        Src::TableName(i) => table.get(i).map_or(&[][..], |(n, _)| n),
    }
}

/// The HPACK decoder of one connection (the client's requests to us).
#[derive(Debug)]
pub struct Decoder {
    /// Our `SETTINGS_HEADER_TABLE_SIZE`: no size update may go above it (§6.3).
    limit: usize,
    table: Table,
    /// Huffman-decoded strings of the field being decoded.
    scratch: Vec<u8>,
    /// A dynamic-table name being copied into a new entry that may evict it (§4.4).
    name_copy: Vec<u8>,
}

impl Decoder {
    /// A decoder whose dynamic table may grow to `max_table_size`: our
    /// `SETTINGS_HEADER_TABLE_SIZE` (default [`DEFAULT_TABLE_SIZE`]). Until the client
    /// has seen our SETTINGS it may use the default 4096, so advertise at least that.
    pub fn new(max_table_size: usize) -> Decoder {
        Decoder {
            limit: max_table_size,
            table: Table::new(max_table_size),
            scratch: Vec::new(),
            name_copy: Vec::new(),
        }
    }

    /// The dynamic table's §4.1 size (names + values + 32 per entry).
    pub fn table_size(&self) -> usize {
        self.table.size
    }

    /// The dynamic table's entries, newest first (index 62 first).
    pub fn table_entries(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.table.iter()
    }

    /// A string literal (§5.2) at `block[*at]`: raw (borrowed from the block) or
    /// Huffman-coded (decoded onto the scratch buffer).
    fn string(&mut self, block: &[u8], at: &mut usize) -> Result<Src, DecodeError> {
        let huffman = block.get(*at).is_some_and(|b| b & 0x80 != 0);
        let len = integer(block, at, 7)?;
        if len > block.len() - *at {
            return Err(err("string_truncated"));
        }
        let (start, end) = (*at, *at + len);
        *at = end;
        if !huffman {
            return Ok(Src::Block(start, end));
        }
        let from = self.scratch.len();
        huffman::decode(&block[start..end], &mut self.scratch).map_err(err)?;
        Ok(Src::Scratch(from, self.scratch.len()))
    }

    /// The name of index `i` (§2.3.3), static or dynamic.
    fn name(&self, i: usize) -> Result<Src, DecodeError> {
        match i {
            0 => Err(err("index_zero")),
            1..=61 => Ok(Src::Static(STATIC[i - 1].0)),
            _ if i - 62 < self.table.len() => Ok(Src::TableName(i - 62)),
            _ => Err(err("index_out_of_range")),
        }
    }

    /// Decode one whole header block (HEADERS + CONTINUATION fragments joined by the
    /// caller). Calls `field(name, value)` for each field in order (borrowed: from the
    /// block, the static table, the dynamic table, or a scratch buffer for Huffman
    /// strings).
    ///
    /// Fields past `max_list_size` (RFC 9113 §6.5.2 sizes: name + value + 32 each) are
    /// not delivered, but the block is still decoded to its end so the dynamic table
    /// stays in step: then `Err(DecodeError::ListTooLarge)` (the caller answers 431 on
    /// that stream and the connection lives). Any coding error:
    /// `Err(DecodeError::Compression(reason))` (the caller ends the connection with
    /// COMPRESSION_ERROR); fields before it may have been delivered.
    pub fn decode(
        &mut self,
        block: &[u8],
        max_list_size: usize,
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), DecodeError> {
        let mut at = 0;
        let mut list = 0usize;
        let mut fields_seen = false;
        while let Some(&b) = block.get(at) {
            if b & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only before the first field (§4.2).
                if fields_seen {
                    return Err(err("table_size_update_not_at_start"));
                }
                let max = integer(block, &mut at, 5)?;
                if max > self.limit {
                    return Err(err("table_size_update_too_large"));
                }
                self.table.set_max(max);
                continue;
            }
            fields_seen = true;
            self.scratch.clear();
            let (name, value, index) = if b & 0x80 != 0 {
                // Indexed field (§6.1).
                let i = integer(block, &mut at, 7)?;
                match i {
                    0 => return Err(err("index_zero")),
                    1..=61 => {
                        let (n, v) = STATIC[i - 1];
                        (Src::Static(n), Src::Static(v), false)
                    }
                    _ => {
                        let Some((n, v)) = self.table.get(i - 62) else {
                            return Err(err("index_out_of_range"));
                        };
                        list = list.saturating_add(n.len() + v.len() + ENTRY_OVERHEAD);
                        if list <= max_list_size {
                            field(n, v);
                        }
                        continue;
                    }
                }
            } else {
                // Literal (§6.2): with incremental indexing (01), without (0000) or
                // never indexed (0001).
                let index = b & 0x40 != 0;
                let i = integer(block, &mut at, if index { 6 } else { 4 })?;
                let name = if i == 0 {
                    self.string(block, &mut at)?
                } else {
                    self.name(i)?
                };
                let value = self.string(block, &mut at)?;
                (name, value, index)
            };
            let (n, v) = (
                resolve(name, block, &self.scratch, &self.table),
                resolve(value, block, &self.scratch, &self.table),
            );
            list = list.saturating_add(n.len() + v.len() + ENTRY_OVERHEAD);
            if list <= max_list_size {
                field(n, v);
            }
            if index {
                // Resolved again without the table, so that it can change.
                let no_table = Table::default();
                let v = resolve(value, block, &self.scratch, &no_table);
                if let Src::TableName(i) = name {
                    // The entry it names may be evicted by this insertion (§4.4).
                    self.name_copy.clear();
                    if let Some((n, _)) = self.table.get(i) {
                        self.name_copy.extend_from_slice(n);
                    }
                    self.table.insert(&self.name_copy, v);
                } else {
                    let n = resolve(name, block, &self.scratch, &no_table);
                    self.table.insert(n, v);
                }
            }
        }
        if list > max_list_size {
            return Err(DecodeError::ListTooLarge);
        }
        Ok(())
    }
}

/// How a literal is sent (§6.2).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Literal {
    /// With incremental indexing: `01` + 6-bit name index.
    Indexed,
    /// Without indexing: `0000` + 4-bit name index.
    NotIndexed,
    /// Never indexed: `0001` + 4-bit name index.
    Never,
}

/// Fields whose values are credentials: never indexed, by us or any later hop (§7.1.3).
fn is_sensitive(name: &[u8]) -> bool {
    matches!(
        name,
        b"authorization" | b"proxy-authorization" | b"cookie" | b"set-cookie"
    )
}

/// Fields whose values differ on (nearly) every response: indexing them would evict the
/// entries that do repeat.
fn is_volatile(name: &[u8]) -> bool {
    matches!(
        name,
        b"date"
            | b"etag"
            | b"last-modified"
            | b"content-length"
            | b"content-range"
            | b"age"
            | b"expires"
            | b":path"
    )
}

/// The HPACK encoder of one connection (our responses to the client).
#[derive(Debug)]
pub struct Encoder {
    table: Table,
    /// Size updates owed at the start of the next block (§4.2): the smallest size since
    /// the last block and the final one.
    pending: Option<(usize, usize)>,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

impl Encoder {
    /// An encoder with the peer's initial table size, [`DEFAULT_TABLE_SIZE`].
    pub fn new() -> Encoder {
        Encoder {
            table: Table::new(DEFAULT_TABLE_SIZE),
            pending: None,
        }
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE: the encoder shrinks its table (or grows it
    /// up to [`DEFAULT_TABLE_SIZE`], never more) and emits a size update at the start of
    /// the next block (RFC 7541 §4.2, §6.3).
    pub fn set_max_table_size(&mut self, n: usize) {
        let n = n.min(DEFAULT_TABLE_SIZE);
        let low = self.pending.map_or(n, |(low, _)| low.min(n));
        self.pending = Some((low, n));
    }

    /// Encode `fields` (lowercase names; the caller puts `:status` first) into `out`.
    pub fn encode<'f>(
        &mut self,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
        out: &mut Vec<u8>,
    ) {
        if let Some((low, last)) = self.pending.take() {
            if low < self.table.max {
                write_integer(out, 0x20, 5, low);
                self.table.set_max(low);
            }
            if last != self.table.max {
                write_integer(out, 0x20, 5, last);
                self.table.set_max(last);
            }
        }
        for (name, value) in fields {
            self.field(name, value, out);
        }
    }

    fn field(&mut self, name: &[u8], value: &[u8], out: &mut Vec<u8>) {
        let mut name_index = 0;
        for (i, &(n, v)) in STATIC.iter().enumerate() {
            if n == name {
                if v == value {
                    write_integer(out, 0x80, 7, i + 1);
                    return;
                }
                if name_index == 0 {
                    name_index = i + 1;
                }
            }
        }
        let sensitive = is_sensitive(name);
        for (i, (n, v)) in self.table.iter().enumerate() {
            if n == name {
                if v == value && !sensitive {
                    write_integer(out, 0x80, 7, i + 62);
                    return;
                }
                if name_index == 0 {
                    name_index = i + 62;
                }
            }
        }
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        let how = if sensitive {
            Literal::Never
        } else if is_volatile(name) || size > self.table.max / 4 {
            // A large entry would evict most of what repeats.
            Literal::NotIndexed
        } else {
            Literal::Indexed
        };
        match how {
            Literal::Indexed => write_integer(out, 0x40, 6, name_index),
            Literal::NotIndexed => write_integer(out, 0x00, 4, name_index),
            Literal::Never => write_integer(out, 0x10, 4, name_index),
        }
        if name_index == 0 {
            write_string(out, name);
        }
        write_string(out, value);
        if how == Literal::Indexed {
            self.table.insert(name, value);
        }
    }
}

/// A string literal (§5.2), Huffman-coded when that is shorter.
fn write_string(out: &mut Vec<u8>, s: &[u8]) {
    let coded = huffman::encoded_len(s);
    if coded < s.len() {
        write_integer(out, 0x80, 7, coded);
        huffman::encode(s, out);
    } else {
        write_integer(out, 0x00, 7, s.len());
        out.extend_from_slice(s);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::h2::frame;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    type Fields = Vec<(String, String)>;

    fn pairs(p: &[(&str, &str)]) -> Fields {
        p.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn decode(d: &mut Decoder, block: &[u8]) -> Result<Fields, DecodeError> {
        let mut out = Vec::new();
        d.decode(block, usize::MAX, |n, v| {
            out.push((
                String::from_utf8(n.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            ))
        })?;
        Ok(out)
    }

    /// The dynamic table as (name, value, size), newest first, as Appendix C prints it.
    fn table(d: &Decoder) -> Vec<(String, String, usize)> {
        let t: Vec<_> = d
            .table_entries()
            .map(|(n, v)| {
                (
                    String::from_utf8(n.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                    n.len() + v.len() + 32,
                )
            })
            .collect();
        assert_eq!(d.table_size(), t.iter().map(|e| e.2).sum::<usize>());
        t
    }

    fn entries(e: &[(&str, &str, usize)]) -> Vec<(String, String, usize)> {
        e.iter()
            .map(|(n, v, s)| (n.to_string(), v.to_string(), *s))
            .collect()
    }

    // --- RFC 7541 Appendix C.1: integers

    #[test]
    fn rfc7541_c_1_integers() {
        let mut out = Vec::new();
        write_integer(&mut out, 0, 5, 10);
        assert_eq!(out, [0x0a]);
        out.clear();
        write_integer(&mut out, 0, 5, 1337);
        assert_eq!(out, [0x1f, 0x9a, 0x0a]);
        out.clear();
        write_integer(&mut out, 0, 7, 42);
        assert_eq!(out, [0x2a]);
        let mut at = 0;
        assert_eq!(integer(&[0x1f, 0x9a, 0x0a], &mut at, 5), Ok(1337));
        assert_eq!(at, 3);
        // The prefix boundary: 31 with a 5-bit prefix takes a second byte of 0.
        out.clear();
        write_integer(&mut out, 0xe0, 5, 31);
        assert_eq!(out, [0xff, 0x00]);
        let mut at = 0;
        assert_eq!(integer(&out, &mut at, 5), Ok(31));
    }

    #[test]
    fn integers_round_trip_and_overflow_bound() {
        for v in [
            0,
            1,
            14,
            15,
            16,
            126,
            127,
            128,
            255,
            16_383,
            1 << 20,
            u32::MAX as usize,
        ] {
            for prefix in [4, 5, 6, 7] {
                let mut out = vec![];
                write_integer(&mut out, 0, prefix, v);
                let mut at = 0;
                assert_eq!(integer(&out, &mut at, prefix), Ok(v), "{v} {prefix}");
                assert_eq!(at, out.len());
            }
        }
        // 2^32: refused.
        let mut out = vec![];
        write_integer(&mut out, 0, 7, u32::MAX as usize + 1);
        assert_eq!(integer(&out, &mut 0, 7), Err(err("integer_overflow")));
        // Endless continuation bytes of zero: refused after 5, whatever the value.
        let long = [0x7f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert_eq!(integer(&long, &mut 0, 7), Err(err("integer_overflow")));
        let five = [0x7f, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert_eq!(integer(&five, &mut 0, 7), Ok(127));
        // Truncated.
        assert_eq!(integer(&[0x7f], &mut 0, 7), Err(err("integer_truncated")));
        assert_eq!(
            integer(&[0x7f, 0x80], &mut 0, 7),
            Err(err("integer_truncated"))
        );
        // As a decoder sees it: an index that overflows.
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &hex("ff ff ff ff ff ff 0f")),
            Err(err("integer_overflow"))
        );
    }

    // --- RFC 7541 Appendix C.2: one field each

    #[test]
    fn rfc7541_c_2_1_literal_with_indexing() {
        let mut d = Decoder::new(4096);
        let f = decode(
            &mut d,
            &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"),
        );
        assert_eq!(f, Ok(pairs(&[("custom-key", "custom-header")])));
        assert_eq!(table(&d), entries(&[("custom-key", "custom-header", 55)]));
    }

    #[test]
    fn rfc7541_c_2_2_literal_without_indexing() {
        let mut d = Decoder::new(4096);
        let f = decode(&mut d, &hex("040c 2f73 616d 706c 652f 7061 7468"));
        assert_eq!(f, Ok(pairs(&[(":path", "/sample/path")])));
        assert_eq!(table(&d), []);
    }

    #[test]
    fn rfc7541_c_2_3_literal_never_indexed() {
        let mut d = Decoder::new(4096);
        let f = decode(&mut d, &hex("1008 7061 7373 776f 7264 0673 6563 7265 74"));
        assert_eq!(f, Ok(pairs(&[("password", "secret")])));
        assert_eq!(table(&d), []);
    }

    #[test]
    fn rfc7541_c_2_4_indexed() {
        let mut d = Decoder::new(4096);
        assert_eq!(decode(&mut d, &hex("82")), Ok(pairs(&[(":method", "GET")])));
        assert_eq!(table(&d), []);
    }

    // --- RFC 7541 Appendix C.3 (plain) and C.4 (Huffman): three requests, one table

    fn requests(blocks: [&str; 3]) {
        let want = [
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ]),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache"),
            ]),
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ]),
        ];
        let tables = [
            entries(&[(":authority", "www.example.com", 57)]),
            entries(&[
                ("cache-control", "no-cache", 53),
                (":authority", "www.example.com", 57),
            ]),
            entries(&[
                ("custom-key", "custom-value", 54),
                ("cache-control", "no-cache", 53),
                (":authority", "www.example.com", 57),
            ]),
        ];
        let sizes = [57, 110, 164];
        let mut d = Decoder::new(4096);
        for i in 0..3 {
            assert_eq!(
                decode(&mut d, &hex(blocks[i])),
                Ok(want[i].clone()),
                "request {i}"
            );
            assert_eq!(table(&d), tables[i], "request {i}");
            assert_eq!(d.table_size(), sizes[i]);
        }
    }

    #[test]
    fn rfc7541_c_3_requests_without_huffman() {
        requests([
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ]);
    }

    #[test]
    fn rfc7541_c_4_requests_with_huffman() {
        requests([
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ]);
    }

    // --- RFC 7541 Appendix C.5 (plain) and C.6 (Huffman): three responses, a 256-byte
    // table, so entries are evicted

    const DATE1: &str = "Mon, 21 Oct 2013 20:13:21 GMT";
    const DATE2: &str = "Mon, 21 Oct 2013 20:13:22 GMT";
    const URL: &str = "https://www.example.com";
    const COOKIE: &str = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";

    fn responses(blocks: [&str; 3]) {
        let want = [
            pairs(&[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", DATE1),
                ("location", URL),
            ]),
            pairs(&[
                (":status", "307"),
                ("cache-control", "private"),
                ("date", DATE1),
                ("location", URL),
            ]),
            pairs(&[
                (":status", "200"),
                ("cache-control", "private"),
                ("date", DATE2),
                ("location", URL),
                ("content-encoding", "gzip"),
                ("set-cookie", COOKIE),
            ]),
        ];
        let tables = [
            entries(&[
                ("location", URL, 63),
                ("date", DATE1, 65),
                ("cache-control", "private", 52),
                (":status", "302", 42),
            ]),
            entries(&[
                (":status", "307", 42),
                ("location", URL, 63),
                ("date", DATE1, 65),
                ("cache-control", "private", 52),
            ]),
            entries(&[
                ("set-cookie", COOKIE, 98),
                ("content-encoding", "gzip", 52),
                ("date", DATE2, 65),
            ]),
        ];
        let sizes = [222, 222, 215];
        let mut d = Decoder::new(256);
        for i in 0..3 {
            assert_eq!(
                decode(&mut d, &hex(blocks[i])),
                Ok(want[i].clone()),
                "response {i}"
            );
            assert_eq!(table(&d), tables[i], "response {i}");
            assert_eq!(d.table_size(), sizes[i]);
        }
    }

    #[test]
    fn rfc7541_c_5_responses_without_huffman() {
        responses([
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 \
             3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "4803 3330 37c1 c0bf",
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 \
             7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 \
             6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
        ]);
    }

    #[test]
    fn rfc7541_c_6_responses_with_huffman() {
        responses([
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad \
             1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 \
             e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ]);
    }

    // --- h2spec hpack cases

    /// h2spec hpack 2.3.3.1: an indexed field past both tables (index 70).
    #[test]
    fn h2spec_hpack_2_3_3_1_indexed_field_invalid_index() {
        let mut d = Decoder::new(4096);
        assert_eq!(decode(&mut d, &hex("c6")), Err(err("index_out_of_range")));
        // Index 62 with an empty dynamic table; then valid once there is an entry.
        assert_eq!(
            decode(&mut Decoder::new(4096), &hex("be")),
            Err(err("index_out_of_range"))
        );
        let mut d = Decoder::new(4096);
        decode(&mut d, &hex("4001 6101 62")).unwrap();
        assert_eq!(decode(&mut d, &hex("be")), Ok(pairs(&[("a", "b")])));
        assert_eq!(decode(&mut d, &hex("bf")), Err(err("index_out_of_range")));
    }

    /// h2spec hpack 2.3.3.2: a literal whose name index is past both tables (index 70).
    #[test]
    fn h2spec_hpack_2_3_3_2_literal_field_invalid_index() {
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &hex("7f07 00")),
            Err(err("index_out_of_range"))
        );
        // The same for the without-indexing and never-indexed forms (4-bit prefix).
        assert_eq!(
            decode(&mut d, &hex("0f37 00")),
            Err(err("index_out_of_range"))
        );
        assert_eq!(
            decode(&mut d, &hex("1f37 00")),
            Err(err("index_out_of_range"))
        );
    }

    /// h2spec hpack 4.2.1: a dynamic table size update after a field: decoding error.
    #[test]
    fn h2spec_hpack_4_2_1_table_size_update_at_end_of_block() {
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &hex("8286 21")),
            Err(err("table_size_update_not_at_start"))
        );
        // Between fields too.
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &hex("82 21 86")),
            Err(err("table_size_update_not_at_start"))
        );
        // At the start of the block, several (§4.2: the smallest, then the final): fine.
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &hex("20 3fe1 1f 82")),
            Ok(pairs(&[(":method", "GET")]))
        );
    }

    /// h2spec hpack 5.2.1: Huffman padding longer than 7 bits.
    #[test]
    fn h2spec_hpack_5_2_1_huffman_padding_longer_than_7_bits() {
        let mut d = Decoder::new(4096);
        let block = b"\x00\x85\xf2\xb2\x4a\x84\xff\x84\x49\x50\x9f\xff";
        assert_eq!(decode(&mut d, block), Err(err("huffman_padding_too_long")));
    }

    /// h2spec hpack 5.2.2: Huffman padding of zeros.
    #[test]
    fn h2spec_hpack_5_2_2_huffman_padded_by_zero() {
        let mut d = Decoder::new(4096);
        let block = b"\x00\x85\xf2\xb2\x4a\x84\xff\x83\x49\x50\x90";
        assert_eq!(decode(&mut d, block), Err(err("huffman_padding_not_ones")));
        // The same field correctly padded decodes: x-test: test.
        let block = b"\x00\x85\xf2\xb2\x4a\x84\xff\x83\x49\x50\x9f";
        assert_eq!(
            decode(&mut Decoder::new(4096), block),
            Ok(pairs(&[("x-test", "test")]))
        );
    }

    /// h2spec hpack 5.2.3: a Huffman string containing EOS.
    #[test]
    fn h2spec_hpack_5_2_3_huffman_contains_eos() {
        let mut d = Decoder::new(4096);
        let block = b"\x00\x85\xf2\xb2\x4a\x84\xff\x87\x49\x51\xff\xff\xff\xfa\x7f";
        assert_eq!(decode(&mut d, block), Err(err("huffman_eos")));
    }

    /// h2spec hpack 6.1.1: indexed field with index 0.
    #[test]
    fn h2spec_hpack_6_1_1_indexed_field_index_0() {
        let mut d = Decoder::new(4096);
        assert_eq!(decode(&mut d, &hex("80")), Err(err("index_zero")));
    }

    /// h2spec hpack 6.3.1: a size update above our SETTINGS_HEADER_TABLE_SIZE.
    #[test]
    fn h2spec_hpack_6_3_1_table_size_update_above_setting() {
        // 4097.
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &hex("3fe2 1f 82")),
            Err(err("table_size_update_too_large"))
        );
        // 4096 exactly is allowed.
        let mut d = Decoder::new(4096);
        assert!(decode(&mut d, &hex("3fe1 1f 82")).is_ok());
        // A smaller setting: 257 over 256.
        let mut d = Decoder::new(256);
        assert_eq!(
            decode(&mut d, &hex("3fe2 01")),
            Err(err("table_size_update_too_large"))
        );
    }

    /// h2spec http2 4.3.1: a literal cut off before its name: COMPRESSION_ERROR.
    #[test]
    fn h2spec_4_3_1_invalid_header_block_fragment() {
        let mut d = Decoder::new(4096);
        assert_eq!(decode(&mut d, &hex("40")), Err(err("integer_truncated")));
    }

    // --- more decoder rules

    #[test]
    fn string_length_bounded_by_the_block() {
        let mut d = Decoder::new(4096);
        // Name length 10 with 4 bytes left.
        assert_eq!(
            decode(&mut d, &hex("400a 6375 7374")),
            Err(err("string_truncated"))
        );
        // Value length past the end, Huffman flag set.
        assert_eq!(
            decode(&mut d, &hex("4001 61 85 ff")),
            Err(err("string_truncated"))
        );
        // A huge declared length is refused without allocating it.
        assert_eq!(
            decode(&mut d, &hex("00 7f ff ff ff 0f")),
            Err(err("string_truncated"))
        );
        // Literal with a name and no value at all.
        assert_eq!(
            decode(&mut d, &hex("0001 61")),
            Err(err("integer_truncated"))
        );
    }

    #[test]
    fn eviction_in_order_and_entry_larger_than_table() {
        // A 100-byte table: entries of 33+ bytes each.
        let mut d = Decoder::new(100);
        decode(&mut d, &hex("4001 6101 31")).unwrap(); // a: 1 (34)
        decode(&mut d, &hex("4001 6201 32")).unwrap(); // b: 2 (34)
        assert_eq!(table(&d), entries(&[("b", "2", 34), ("a", "1", 34)]));
        decode(&mut d, &hex("4001 6301 33")).unwrap(); // c: 3 evicts a
        assert_eq!(table(&d), entries(&[("c", "3", 34), ("b", "2", 34)]));
        // Index 63 is now b.
        assert_eq!(decode(&mut d, &hex("bf")), Ok(pairs(&[("b", "2")])));
        // An entry of exactly the table size evicts everything else and stays.
        let v = "x".repeat(100 - 32 - 1);
        let mut block = hex("4001 64");
        block.push(v.len() as u8);
        block.extend_from_slice(v.as_bytes());
        decode(&mut d, &block).unwrap();
        assert_eq!(table(&d), entries(&[("d", &v, 100)]));
        // One byte larger: the table is emptied and the entry not added (§4.4), but the
        // field itself is delivered.
        let v = "y".repeat(100 - 32);
        let mut block = hex("4001 65");
        block.push(v.len() as u8);
        block.extend_from_slice(v.as_bytes());
        assert_eq!(decode(&mut d, &block), Ok(pairs(&[("e", &v)])));
        assert_eq!(table(&d), []);
        assert_eq!(d.table_size(), 0);
    }

    /// §4.4: a new entry naming the entry it evicts still gets that name.
    #[test]
    fn new_entry_named_after_the_entry_it_evicts() {
        let mut d = Decoder::new(70);
        decode(&mut d, &hex("4004 6e61 6d65 0131")).unwrap(); // name: 1 (37)
                                                              // Literal with indexing, name index 62 (the entry above), value "22": 38 bytes;
                                                              // 37 + 38 > 70, so inserting evicts the entry whose name it uses.
        assert_eq!(
            decode(&mut d, &hex("7e 02 3232")),
            Ok(pairs(&[("name", "22")]))
        );
        assert_eq!(table(&d), entries(&[("name", "22", 38)]));
    }

    #[test]
    fn table_size_update_evicts_and_zero_clears() {
        let mut d = Decoder::new(4096);
        decode(
            &mut d,
            &hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
        )
        .unwrap();
        decode(&mut d, &hex("4001 6101 62")).unwrap();
        assert_eq!(d.table_size(), 57 + 34);
        // Down to 40: only the newest (34) fits.
        assert_eq!(
            decode(&mut d, &hex("3f09 82")),
            Ok(pairs(&[(":method", "GET")]))
        );
        assert_eq!(table(&d), entries(&[("a", "b", 34)]));
        // 0 clears it; an insertion into a 0-byte table is dropped.
        assert_eq!(decode(&mut d, &hex("20")), Ok(vec![]));
        assert_eq!(table(&d), []);
        assert_eq!(
            decode(&mut d, &hex("4001 6101 62")),
            Ok(pairs(&[("a", "b")]))
        );
        assert_eq!(table(&d), []);
        assert_eq!(decode(&mut d, &hex("be")), Err(err("index_out_of_range")));
        // Back up to 4096 (the setting): entries are kept again.
        decode(&mut d, &hex("3fe1 1f 4001 6101 62")).unwrap();
        assert_eq!(table(&d), entries(&[("a", "b", 34)]));
    }

    #[test]
    fn list_size_limit_stops_delivery_but_keeps_the_table_in_step() {
        let mut d = Decoder::new(4096);
        // :method GET (42), a: b (34, inserted), c: d (34, inserted).
        let block = hex("82 4001 6101 62 4001 6301 64");
        let mut got = Vec::new();
        let r = d.decode(&block, 42 + 34, |n, v| got.push((n.to_vec(), v.to_vec())));
        assert_eq!(r, Err(DecodeError::ListTooLarge));
        assert_eq!(
            got,
            [
                (b":method".to_vec(), b"GET".to_vec()),
                (b"a".to_vec(), b"b".to_vec())
            ]
        );
        // Both literals went into the table, the undelivered one too.
        assert_eq!(table(&d), entries(&[("c", "d", 34), ("a", "b", 34)]));
        // Exactly at the limit is fine.
        let mut d = Decoder::new(4096);
        assert_eq!(d.decode(&block, 42 + 34 + 34, |_, _| {}), Ok(()));
        assert_eq!(DecodeError::ListTooLarge.as_str(), "header_list_too_large");
        assert_eq!(err("index_zero").as_str(), "index_zero");
        // A coding error after the limit is passed is still a coding error.
        let mut d = Decoder::new(4096);
        assert_eq!(
            d.decode(&hex("82 82 80"), 50, |_, _| {}),
            Err(err("index_zero"))
        );
    }

    /// An HPACK bomb: one ~4 KB dynamic entry, then 16,000 one-byte references to it (64
    /// MB of fields from a 20 KB block). Decoding stops delivering at the list limit,
    /// reads the block to its end, and allocates nothing in proportion to the output.
    #[test]
    fn hpack_bomb_stops_at_the_list_limit() {
        let mut d = Decoder::new(4096);
        let value = "v".repeat(4000);
        let mut block = hex("4001 62 7f");
        let mut len = Vec::new();
        write_integer(&mut len, 0, 7, value.len());
        block.truncate(3);
        block.extend(len);
        block.extend_from_slice(value.as_bytes());
        block.extend(std::iter::repeat_n(0xbe, 16_000));
        let mut delivered = 0usize;
        let mut bytes = 0usize;
        let r = d.decode(&block, 16 * 1024, |n, v| {
            delivered += 1;
            bytes += n.len() + v.len() + 32;
        });
        assert_eq!(r, Err(DecodeError::ListTooLarge));
        assert!(bytes <= 16 * 1024);
        assert_eq!(delivered, 4);
        // Nothing grew with the output: the table holds one entry, the scratch buffer
        // never held more than the block's Huffman strings (none here).
        assert_eq!(d.table_size(), 1 + 4000 + 32);
        assert!(d.table.bytes.capacity() < 2 * 4096 + 4096);
        assert_eq!(d.scratch.capacity(), 0);
    }

    /// Memory stays bounded over many insertions: the byte buffer is compacted.
    #[test]
    fn table_bytes_bounded_over_many_insertions() {
        let mut d = Decoder::new(4096);
        for i in 0..10_000u32 {
            let v = format!("{i:0>20}");
            let mut block = hex("4001 61");
            block.push(v.len() as u8);
            block.extend_from_slice(v.as_bytes());
            decode(&mut d, &block).unwrap();
            assert!(d.table_size() <= 4096);
            assert!(
                d.table.bytes.len() <= 2 * 4096 + 21,
                "{}",
                d.table.bytes.len()
            );
        }
        assert_eq!(d.table.len(), 4096 / (1 + 20 + 32));
        assert_eq!(
            decode(&mut d, &hex("be")),
            Ok(pairs(&[("a", "00000000000000009999")]))
        );
    }

    // --- encoder

    fn encode(e: &mut Encoder, fields: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        e.encode(
            fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            &mut out,
        );
        out
    }

    fn response(date: &str, len: &str) -> Vec<(&'static str, String)> {
        vec![
            (":status", "200".into()),
            ("server", "linerate".into()),
            ("date", date.into()),
            ("content-type", "video/mp2t".into()),
            ("content-length", len.into()),
            ("accept-ranges", "bytes".into()),
            ("cache-control", "public, max-age=3600".into()),
            ("etag", format!("\"{len}\"")),
            ("last-modified", DATE1.into()),
            ("set-cookie", COOKIE.into()),
            ("authorization", "Basic x".into()),
        ]
    }

    #[test]
    fn encoder_round_trips_and_mirrors_the_decoder_table() {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        let mut sizes = Vec::new();
        for (i, date) in [DATE1, DATE2, DATE1].iter().enumerate() {
            let len = format!("{}", 1000 + i);
            let fields = response(date, &len);
            let refs: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let block = encode(&mut e, &refs);
            sizes.push(block.len());
            assert_eq!(decode(&mut d, &block), Ok(pairs(&refs)));
            let enc: Vec<_> = e
                .table
                .iter()
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect();
            let dec: Vec<_> = d
                .table_entries()
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect();
            assert_eq!(enc, dec);
        }
        // The repeated fields (server, content-type, accept-ranges, cache-control) cost one
        // byte each after the first response.
        assert!(sizes[1] + 30 < sizes[0], "{sizes:?}");
        assert_eq!(sizes[1], sizes[2]);
        let names: Vec<_> = d.table_entries().map(|(n, _)| n.to_vec()).collect();
        for volatile in [
            &b"date"[..],
            b"content-length",
            b"etag",
            b"last-modified",
            b"set-cookie",
            b"authorization",
        ] {
            assert!(
                !names.iter().any(|n| n == volatile),
                "{}",
                String::from_utf8_lossy(volatile)
            );
        }
        assert_eq!(names.len(), 4);
    }

    #[test]
    fn encoder_representations() {
        let mut e = Encoder::new();
        // Static exact matches: one byte each.
        assert_eq!(
            encode(&mut e, &[(":status", "200"), (":status", "304")]),
            [0x88, 0x8b]
        );
        // Date: literal without indexing, static name 33, Huffman value (shorter).
        let b = encode(&mut e, &[("date", DATE1)]);
        assert_eq!(b[0], 0x0f);
        assert_eq!(b[1], 33 - 15);
        assert_eq!(b[2] & 0x80, 0x80);
        // set-cookie: never indexed (0001), static name 55.
        let b = encode(&mut e, &[("set-cookie", "a=b")]);
        assert_eq!((b[0], b[1]), (0x1f, 55 - 15));
        // authorization: never indexed, static name 23.
        let b = encode(&mut e, &[("authorization", "Basic x")]);
        assert_eq!((b[0], b[1]), (0x1f, 23 - 15));
        // server: incremental indexing with static name 54, then indexed from the table.
        let b = encode(&mut e, &[("server", "linerate")]);
        assert_eq!(b[0], 0x40 | 54);
        assert_eq!(encode(&mut e, &[("server", "linerate")]), [0x80 | 62]);
        // A new name: literal name, incremental indexing; strings raw when Huffman is
        // not shorter.
        let b = encode(&mut e, &[("x-q", "\u{7f}")]);
        assert_eq!(&b[..5], &[0x40, 0x03, b'x', b'-', b'q']);
        assert_eq!(encode(&mut e, &[("x-q", "\u{7f}")]), [0x80 | 62]);
        // A large value is not indexed (it would evict what repeats).
        let big = "z".repeat(2000);
        let b = encode(&mut e, &[("x-big", &big)]);
        assert_eq!(b[0], 0x00);
        assert_eq!(e.table.len(), 2);
    }

    #[test]
    fn encoder_table_size_updates() {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        decode(&mut d, &encode(&mut e, &[("server", "linerate")])).unwrap();
        // The peer lowers its table to 0 then raises it to 200 before our next block: the
        // block starts with the smallest (0) then the final (200 = 31 + 169).
        e.set_max_table_size(0);
        e.set_max_table_size(200);
        let b = encode(&mut e, &[("server", "linerate")]);
        assert_eq!(&b[..4], &[0x20, 0x3f, 0xa9, 0x01]);
        assert_eq!(decode(&mut d, &b), Ok(pairs(&[("server", "linerate")])));
        assert_eq!(table(&d), entries(&[("server", "linerate", 46)]));
        // No change, no update.
        let b = encode(&mut e, &[("server", "linerate")]);
        assert_eq!(b, [0x80 | 62]);
        // A peer allowing more than 4096 gets 4096, said once.
        e.set_max_table_size(1 << 20);
        let b = encode(&mut e, &[]);
        assert_eq!(b, [0x3f, 0xe1, 0x1f]);
        assert_eq!(decode(&mut d, &b), Ok(vec![]));
        e.set_max_table_size(1 << 20);
        assert_eq!(encode(&mut e, &[]), Vec::<u8>::new());
    }

    /// The encoder's output fits the frame layer: a large block split into HEADERS and
    /// CONTINUATION, joined again, decodes to the same fields.
    #[test]
    fn encoded_block_through_frames() {
        let mut e = Encoder::new();
        let long = "q".repeat(40_000);
        let block = encode(&mut e, &[(":status", "200"), ("x-long", &long)]);
        let mut wire = Vec::new();
        frame::write_headers(&mut wire, 1, &block, true, frame::DEFAULT_MAX_FRAME_SIZE);
        let mut joined = Vec::new();
        let mut at = 0;
        while let Some((f, n)) = frame::parse(&wire[at..], frame::DEFAULT_MAX_FRAME_SIZE).unwrap() {
            match f {
                frame::Frame::Headers { block, .. } | frame::Frame::Continuation { block, .. } => {
                    joined.extend_from_slice(block)
                }
                f => panic!("{f:?}"),
            }
            at += n;
        }
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode(&mut d, &joined),
            Ok(pairs(&[(":status", "200"), ("x-long", &long)]))
        );
    }
}
