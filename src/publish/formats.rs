//! Structural checks of known checkpoint formats, so a source that is truncated or still being
//! written is refused before it is published: a torch zip (`.pt`, `.pth`, `.ckpt`, `.bin`) must
//! end with its end-of-central-directory record, a `.safetensors` header must parse and its
//! tensor offsets must cover exactly the bytes that follow it. Other files pass unchecked.

use anyhow::{Context, Result};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// What was checked, for the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    TorchZip,
    /// Pre-1.6 torch.save (a pickle stream): no structure to check.
    TorchLegacy,
    Safetensors,
    Unchecked,
}

const ZIP_LOCAL: &[u8; 4] = b"PK\x03\x04";
const ZIP_EOCD: &[u8; 4] = b"PK\x05\x06";
const ZIP64_LOCATOR: &[u8; 4] = b"PK\x06\x07";
const ZIP64_EOCD: &[u8; 4] = b"PK\x06\x06";
/// EOCD is 22 bytes plus a comment of at most 65535.
const EOCD_SEARCH: u64 = 22 + 65535;
/// Bigger headers than this are not a real safetensors file (the format caps it at 100 MB).
const SAFETENSORS_MAX_HEADER: u64 = 100_000_000;

/// Check one file by its extension; an error says what is wrong and what to do.
pub fn validate(path: &Path) -> Result<Format> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let torch_ext = matches!(ext.as_str(), "pt" | "pth" | "ckpt");
    if !(torch_ext || ext == "bin" || ext == "safetensors") {
        return Ok(Format::Unchecked);
    }
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let size = f.metadata()?.len();
    let why = if ext == "safetensors" {
        check_safetensors(&mut f, size).map(|()| Format::Safetensors)
    } else {
        let mut magic = [0u8; 4];
        let n = read_up_to(&mut f, &mut magic)?;
        if n == 4 && &magic == ZIP_LOCAL {
            check_zip(&mut f, size).map(|()| Format::TorchZip)
        } else if n >= 1 && magic[0] == 0x80 && torch_ext {
            Ok(Format::TorchLegacy)
        } else if torch_ext {
            Err(format!(
                "not a torch checkpoint: {n} byte(s) read, expected a zip archive (PK\\x03\\x04) or a pickle stream"
            ))
        } else {
            // `.bin` is also used for non-torch blobs: only zips are checked.
            Ok(Format::Unchecked)
        }
    };
    why.map_err(|w| {
        anyhow::anyhow!(
            "{}: refusing to publish: {w} (truncated, or still being written? publish it after the save has finished)",
            path.display()
        )
    })
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

fn u16_at(b: &[u8], i: usize) -> u64 {
    u16::from_le_bytes([b[i], b[i + 1]]) as u64
}
fn u32_at(b: &[u8], i: usize) -> u64 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes")) as u64
}
fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

/// The zip's end-of-central-directory record must be there and its central directory must lie
/// inside the file (zip64 when torch writes files over 4 GiB).
fn check_zip(f: &mut File, size: u64) -> Result<(), String> {
    let tail_len = size.min(EOCD_SEARCH);
    let start = size - tail_len;
    let mut tail = vec![0u8; tail_len as usize];
    f.seek(SeekFrom::Start(start)).map_err(|e| e.to_string())?;
    f.read_exact(&mut tail).map_err(|e| e.to_string())?;
    let Some(pos) = (0..tail.len().saturating_sub(21)).rev().find(|&i| {
        &tail[i..i + 4] == ZIP_EOCD && i + 22 + u16_at(&tail, i + 20) as usize == tail.len()
    }) else {
        return Err("zip end-of-central-directory record missing".into());
    };
    let eocd_at = start + pos as u64;
    let (mut cd_size, mut cd_offset) = (u32_at(&tail, pos + 12), u32_at(&tail, pos + 16));
    let mut cd_end_limit = eocd_at;
    if cd_size == 0xFFFF_FFFF || cd_offset == 0xFFFF_FFFF {
        // zip64: a 20-byte locator right before the EOCD points at the zip64 EOCD record.
        let loc_at = eocd_at
            .checked_sub(20)
            .ok_or("zip64 locator missing before the end-of-central-directory record")?;
        let mut loc = [0u8; 20];
        f.seek(SeekFrom::Start(loc_at)).map_err(|e| e.to_string())?;
        f.read_exact(&mut loc).map_err(|e| e.to_string())?;
        if &loc[..4] != ZIP64_LOCATOR {
            return Err("zip64 locator missing before the end-of-central-directory record".into());
        }
        let rec_at = u64_at(&loc, 8);
        if rec_at + 56 > loc_at {
            return Err(format!("zip64 record offset {rec_at} is outside the file"));
        }
        let mut rec = [0u8; 56];
        f.seek(SeekFrom::Start(rec_at)).map_err(|e| e.to_string())?;
        f.read_exact(&mut rec).map_err(|e| e.to_string())?;
        if &rec[..4] != ZIP64_EOCD {
            return Err("zip64 end-of-central-directory record missing".into());
        }
        cd_size = u64_at(&rec, 40);
        cd_offset = u64_at(&rec, 48);
        cd_end_limit = rec_at;
    }
    match cd_offset.checked_add(cd_size) {
        Some(end) if end <= cd_end_limit => Ok(()),
        _ => Err(format!(
            "zip central directory ({cd_size} bytes at offset {cd_offset}) lies outside the {size}-byte file"
        )),
    }
}

/// 8-byte little-endian header length, a JSON object of tensors with `data_offsets`, and the
/// byte buffer after it indexed entirely (what the safetensors library itself insists on).
fn check_safetensors(f: &mut File, size: u64) -> Result<(), String> {
    let mut len = [0u8; 8];
    if read_up_to(f, &mut len).map_err(|e| e.to_string())? < 8 {
        return Err(format!("{size} bytes: too short for a safetensors header"));
    }
    let n = u64::from_le_bytes(len);
    if n > SAFETENSORS_MAX_HEADER || 8 + n > size {
        return Err(format!(
            "safetensors header length {n} does not fit the {size}-byte file"
        ));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).map_err(|e| e.to_string())?;
    let json: serde_json::Value = serde_json::from_slice(&header)
        .map_err(|e| format!("safetensors header is not valid JSON: {e}"))?;
    let obj = json
        .as_object()
        .ok_or("safetensors header is not a JSON object")?;
    let data_len = size - 8 - n;
    let mut end_max = 0u64;
    for (name, t) in obj.iter().filter(|(k, _)| k.as_str() != "__metadata__") {
        let off = t
            .get("data_offsets")
            .and_then(|o| o.as_array())
            .filter(|a| a.len() == 2)
            .and_then(|a| Some((a[0].as_u64()?, a[1].as_u64()?)))
            .ok_or_else(|| format!("tensor {name:?} has no valid data_offsets"))?;
        if off.0 > off.1 || off.1 > data_len {
            return Err(format!(
                "tensor {name:?} data_offsets [{}, {}] do not fit the {data_len} data bytes",
                off.0, off.1
            ));
        }
        end_max = end_max.max(off.1);
    }
    if end_max != data_len {
        return Err(format!(
            "tensors cover {end_max} of the {data_len} data bytes after the header"
        ));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal valid zip: one stored member, central directory, EOCD.
    pub fn tiny_zip(payload: &[u8]) -> Vec<u8> {
        let mut z = Vec::new();
        let name = b"archive/data.pkl";
        z.extend_from_slice(ZIP_LOCAL);
        z.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        z.extend_from_slice(&[0; 4]); // crc (not checked here)
        z.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        z.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        z.extend_from_slice(&(name.len() as u16).to_le_bytes());
        z.extend_from_slice(&[0, 0]);
        z.extend_from_slice(name);
        z.extend_from_slice(payload);
        let cd_offset = z.len() as u32;
        z.extend_from_slice(b"PK\x01\x02");
        z.extend_from_slice(&[20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        z.extend_from_slice(&[0; 4]);
        z.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        z.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        z.extend_from_slice(&(name.len() as u16).to_le_bytes());
        z.extend_from_slice(&[0; 12]);
        z.extend_from_slice(&[0; 4]); // local header offset 0
        z.extend_from_slice(name);
        let cd_size = z.len() as u32 - cd_offset;
        z.extend_from_slice(ZIP_EOCD);
        z.extend_from_slice(&[0, 0, 0, 0, 1, 0, 1, 0]);
        z.extend_from_slice(&cd_size.to_le_bytes());
        z.extend_from_slice(&cd_offset.to_le_bytes());
        z.extend_from_slice(&[0, 0]);
        z
    }

    pub fn tiny_safetensors(data: &[u8]) -> Vec<u8> {
        let header = format!(
            "{{\"w\":{{\"dtype\":\"U8\",\"shape\":[{}],\"data_offsets\":[0,{}]}},\"__metadata__\":{{\"format\":\"pt\"}}}}",
            data.len(),
            data.len()
        );
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header.as_bytes());
        v.extend_from_slice(data);
        v
    }

    fn check(name: &str, bytes: &[u8]) -> Result<Format> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        validate(&p)
    }

    #[test]
    fn torch_zip_whole_and_truncated() {
        let z = tiny_zip(&[7u8; 1000]);
        assert_eq!(check("a.pt", &z).unwrap(), Format::TorchZip);
        assert_eq!(check("a.bin", &z).unwrap(), Format::TorchZip);
        for cut in [z.len() - 1, z.len() - 22, z.len() / 2, 4] {
            let e = check("a.pt", &z[..cut]).unwrap_err().to_string();
            assert!(e.contains("refusing to publish"), "{cut}: {e}");
        }
        // A zip comment after the EOCD is fine.
        let mut c = z.clone();
        let n = c.len();
        c[n - 2] = 5;
        c.extend_from_slice(b"hello");
        assert_eq!(check("a.ckpt", &c).unwrap(), Format::TorchZip);
    }

    #[test]
    fn torch_non_zip() {
        assert_eq!(
            check("old.pth", &[0x80, 2, 0x8a, 0x0a]).unwrap(),
            Format::TorchLegacy
        );
        let e = check("x.pt", b"").unwrap_err().to_string();
        assert!(e.contains("0 byte(s) read"), "{e}");
        assert!(check("x.pt", b"hello world").is_err());
        assert_eq!(check("x.bin", b"hello").unwrap(), Format::Unchecked);
        assert_eq!(check("x.txt", b"").unwrap(), Format::Unchecked);
    }

    #[test]
    fn zip64_locator_is_followed() {
        // Hand-built zip64 tail: zip64 EOCD record, locator, EOCD with 0xFFFFFFFF fields.
        let mut z = vec![0u8; 100]; // stands in for members + central directory at 10..60
        let rec_at = z.len() as u64;
        z.extend_from_slice(ZIP64_EOCD);
        let mut rec = vec![0u8; 52];
        rec[36..44].copy_from_slice(&50u64.to_le_bytes()); // cd size
        rec[44..52].copy_from_slice(&10u64.to_le_bytes()); // cd offset
        z.extend_from_slice(&rec);
        z.extend_from_slice(ZIP64_LOCATOR);
        z.extend_from_slice(&[0; 4]);
        z.extend_from_slice(&rec_at.to_le_bytes());
        z.extend_from_slice(&[1, 0, 0, 0]);
        z.extend_from_slice(ZIP_EOCD);
        z.extend_from_slice(&[0xFF; 8]);
        z.extend_from_slice(&[0xFF; 8]);
        z.extend_from_slice(&[0, 0]);
        z[..4].copy_from_slice(ZIP_LOCAL);
        assert!(check_zip(&mut tmp(&z), z.len() as u64).is_ok());
        // The record claims a central directory past its own start: refused.
        let mut bad = z.clone();
        let i = rec_at as usize + 4 + 44;
        bad[i..i + 8].copy_from_slice(&100u64.to_le_bytes());
        assert!(check_zip(&mut tmp(&bad), bad.len() as u64).is_err());
    }

    fn tmp(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, bytes).unwrap();
        f
    }

    #[test]
    fn safetensors_whole_truncated_and_padded() {
        let s = tiny_safetensors(&[1u8; 64]);
        assert_eq!(check("m.safetensors", &s).unwrap(), Format::Safetensors);
        let e = check("m.safetensors", &s[..s.len() - 1])
            .unwrap_err()
            .to_string();
        assert!(e.contains("do not fit the 63 data bytes"), "{e}");
        let e = check("m.safetensors", &s[..20]).unwrap_err().to_string();
        assert!(e.contains("does not fit"), "{e}");
        let mut padded = s.clone();
        padded.push(0);
        let e = check("m.safetensors", &padded).unwrap_err().to_string();
        assert!(e.contains("cover 64 of the 65"), "{e}");
        let mut bad_json = s.clone();
        bad_json[8] = b'[';
        assert!(check("m.safetensors", &bad_json).is_err());
    }
}
