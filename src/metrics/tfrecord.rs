//! TFRecord framing, the container of TensorBoard event files: each record is a u64 length,
//! the masked CRC-32C of those 8 bytes, the payload and the payload's masked CRC-32C (all
//! little-endian). [`scan`] splits a buffer into records and says where it had to stop: a
//! record cut off by the end of the buffer is left for the next read (the writer is still
//! writing it); a record whose checksum is wrong is reported with its offset and skipped.

/// Header: length (8) + its CRC (4).
pub const HEADER: usize = 12;
/// A record longer than this is taken for a damaged length, not a real event.
pub const MAX_RECORD: u64 = 256 << 20;

/// CRC-32C masked as TensorFlow stores it.
pub fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    (crc.rotate_right(15)).wrapping_add(0xa282_ead8)
}

/// One record of a buffer.
#[derive(Debug, PartialEq)]
pub enum Item<'a> {
    /// A good record: its byte offset (within the buffer) and payload.
    Record(u64, &'a [u8]),
    /// Damaged bytes from `offset`: what was wrong; `skipped` bytes are passed over.
    Damaged {
        offset: u64,
        skipped: u64,
        why: String,
    },
}

/// Split `buf` into records. Returns them and how many bytes were used: everything up to the
/// first record not complete in `buf` (a torn tail, retried when more bytes come).
pub fn scan(buf: &[u8]) -> (Vec<Item<'_>>, usize) {
    let mut items = Vec::new();
    let mut at = 0usize;
    while buf.len() - at >= HEADER {
        let head = &buf[at..at + HEADER];
        let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let len_crc = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
        if masked_crc(&head[..8]) != len_crc || len > MAX_RECORD {
            // The length cannot be trusted: look for the next place a header checks out.
            let next = resync(buf, at + 1);
            match next {
                Some(n) => {
                    items.push(Item::Damaged {
                        offset: at as u64,
                        skipped: (n - at) as u64,
                        why: "the record's length fails its CRC-32C".into(),
                    });
                    at = n;
                    continue;
                }
                // No good header after it yet: maybe the rest is still being written.
                None => break,
            }
        }
        let end = at + HEADER + len as usize + 4;
        if end > buf.len() {
            break; // torn: the writer has not finished this record
        }
        let data = &buf[at + HEADER..end - 4];
        let data_crc = u32::from_le_bytes(buf[end - 4..end].try_into().expect("4 bytes"));
        let found = masked_crc(data);
        if found != data_crc {
            items.push(Item::Damaged {
                offset: at as u64,
                skipped: (end - at) as u64,
                why: format!(
                    "the record's {len}-byte payload fails its CRC-32C (stored {data_crc:#010x}, computed {found:#010x})"
                ),
            });
        } else {
            items.push(Item::Record(at as u64, data));
        }
        at = end;
    }
    (items, at)
}

/// The first offset from `from` where a complete record checks out (both CRCs).
fn resync(buf: &[u8], from: usize) -> Option<usize> {
    (from..buf.len().saturating_sub(HEADER - 1)).find(|&i| {
        let len = u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
        let crc = u32::from_le_bytes(buf[i + 8..i + 12].try_into().expect("4 bytes"));
        if len > MAX_RECORD || masked_crc(&buf[i..i + 8]) != crc {
            return false;
        }
        let end = i + HEADER + len as usize + 4;
        end <= buf.len()
            && masked_crc(&buf[i + HEADER..end - 4])
                == u32::from_le_bytes(buf[end - 4..end].try_into().expect("4 bytes"))
    })
}

/// Frame one payload (tests and the benchmark write event files with it).
pub fn frame(data: &[u8], out: &mut Vec<u8>) {
    let len = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_published_check_value() {
        // CRC-32C of "123456789" is 0xe3069283 (RFC 3720); TensorFlow masks it.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(
            masked_crc(b"123456789"),
            0xe306_9283u32.rotate_right(15).wrapping_add(0xa282_ead8)
        );
    }

    #[test]
    fn torn_tail_waits_and_bad_crcs_are_skipped_with_their_offset() {
        let mut buf = Vec::new();
        for p in [&b"one"[..], b"two", b"three"] {
            frame(p, &mut buf);
        }
        let whole = buf.len();
        let (items, used) = scan(&buf);
        assert_eq!(used, whole);
        assert_eq!(items.len(), 3);
        // Torn: the last record cut anywhere is left for later.
        for cut in [whole - 1, whole - 6, whole - 12, whole - 17] {
            let (items, used) = scan(&buf[..cut]);
            assert_eq!((items.len(), used), (2, 38), "cut at {cut}");
        }
        // A flipped payload byte in the middle record: reported at its offset, the rest read.
        let mut bad = buf.clone();
        bad[19 + HEADER] ^= 0x40;
        let (items, used) = scan(&bad);
        assert_eq!(used, whole);
        assert!(
            matches!(items[1], Item::Damaged { offset: 19, .. }),
            "{items:?}"
        );
        assert_eq!(items[2], Item::Record(38, &b"three"[..]));
        // A flipped length byte: the reader finds the next good header.
        let mut bad = buf.clone();
        bad[19] ^= 0x01;
        let (items, _) = scan(&bad);
        assert!(
            matches!(
                items[1],
                Item::Damaged {
                    offset: 19,
                    skipped: 19,
                    ..
                }
            ),
            "{items:?}"
        );
        assert_eq!(items[2], Item::Record(38, &b"three"[..]));
    }
}
