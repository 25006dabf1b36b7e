//! [`Record`]s as one byte string, for the summary cache: a CBOR array of records with
//! thirteen optional numbers each cost a repeated `critic --once` ~0.35 M instructions to
//! decode (serde walks every `Option<f64>` through the format's generic machinery); this
//! is a few thousand. Layout per record, little-endian: step `u64`, a `u16` mask of the
//! numbers present (bit 0 the time, bit 1 + i the slot i), then each present number as
//! `f64` bits (NaN and ±Inf kept exactly). [`pairs`] and [`floats`] do the same for the
//! critic's other per-sample queues (`(step, value)` and plain values).

use super::Record;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::VecDeque;

const SLOTS: usize = super::SLOTS.len();

pub fn pack(records: &VecDeque<Record>) -> Vec<u8> {
    let mut out = Vec::with_capacity(records.len() * (10 + 8 * 4));
    for r in records {
        out.extend_from_slice(&r.step.to_le_bytes());
        let numbers = std::iter::once(r.time).chain(r.values.iter().copied());
        let mask = numbers
            .clone()
            .enumerate()
            .fold(0u16, |m, (i, v)| m | (u16::from(v.is_some()) << i));
        out.extend_from_slice(&mask.to_le_bytes());
        for v in numbers.flatten() {
            out.extend_from_slice(&v.to_bits().to_le_bytes());
        }
    }
    out
}

pub fn unpack(mut bytes: &[u8]) -> Result<VecDeque<Record>, String> {
    let mut out = VecDeque::new();
    while !bytes.is_empty() {
        let step = u64::from_le_bytes(take(&mut bytes, "records")?);
        let mask = u16::from_le_bytes(take(&mut bytes, "records")?);
        if mask >> (SLOTS + 1) != 0 {
            return Err(format!(
                "packed records: mask {mask:#x} names slots past {SLOTS}"
            ));
        }
        let mut number = |bit: usize| -> Result<Option<f64>, String> {
            Ok(if mask & (1 << bit) != 0 {
                Some(f64::from_bits(u64::from_le_bytes(take(
                    &mut bytes, "records",
                )?)))
            } else {
                None
            })
        };
        let time = number(0)?;
        let mut values = [None; SLOTS];
        for (i, v) in values.iter_mut().enumerate() {
            *v = number(i + 1)?;
        }
        out.push_back(Record { step, time, values });
    }
    Ok(out)
}

/// `#[serde(with = "crate::metrics::packed")]` for a `VecDeque<Record>` field.
pub fn serialize<S: Serializer>(records: &VecDeque<Record>, s: S) -> Result<S::Ok, S::Error> {
    serde_bytes::Bytes::new(&pack(records)).serialize(s)
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<VecDeque<Record>, D::Error> {
    let bytes = serde_bytes::ByteBuf::deserialize(d)?;
    unpack(&bytes).map_err(serde::de::Error::custom)
}

fn take<const N: usize>(bytes: &mut &[u8], what: &str) -> Result<[u8; N], String> {
    let (head, rest) = bytes
        .split_first_chunk::<N>()
        .ok_or_else(|| format!("packed {what}: {} bytes left, {N} expected", bytes.len()))?;
    *bytes = rest;
    Ok(*head)
}

/// `#[serde(with = "crate::metrics::packed::pairs")]` for a `VecDeque<(u64, f64)>`.
pub mod pairs {
    use super::*;

    pub fn serialize<S: Serializer>(v: &VecDeque<(u64, f64)>, s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = v
            .iter()
            .flat_map(|&(step, x)| [step.to_le_bytes(), x.to_bits().to_le_bytes()])
            .flatten()
            .collect();
        serde_bytes::Bytes::new(&bytes).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<VecDeque<(u64, f64)>, D::Error> {
        let buf = serde_bytes::ByteBuf::deserialize(d)?;
        let mut bytes = buf.as_slice();
        let mut out = VecDeque::with_capacity(bytes.len() / 16);
        while !bytes.is_empty() {
            let step = take(&mut bytes, "pairs").map_err(serde::de::Error::custom)?;
            let x = take(&mut bytes, "pairs").map_err(serde::de::Error::custom)?;
            out.push_back((
                u64::from_le_bytes(step),
                f64::from_bits(u64::from_le_bytes(x)),
            ));
        }
        Ok(out)
    }
}

/// `#[serde(with = "crate::metrics::packed::floats")]` for a `VecDeque<f64>`.
pub mod floats {
    use super::*;

    pub fn serialize<S: Serializer>(v: &VecDeque<f64>, s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect();
        serde_bytes::Bytes::new(&bytes).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<VecDeque<f64>, D::Error> {
        let buf = serde_bytes::ByteBuf::deserialize(d)?;
        let mut bytes = buf.as_slice();
        let mut out = VecDeque::with_capacity(bytes.len() / 8);
        while !bytes.is_empty() {
            let x = take(&mut bytes, "floats").map_err(serde::de::Error::custom)?;
            out.push_back(f64::from_bits(u64::from_le_bytes(x)));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: u64, time: Option<f64>, set: &[(usize, f64)]) -> Record {
        let mut values = [None; SLOTS];
        for &(i, v) in set {
            values[i] = Some(v);
        }
        Record { step, time, values }
    }

    #[test]
    fn records_come_back_bit_for_bit_nan_and_infinities_included() {
        let records: VecDeque<Record> = [
            record(0, None, &[]),
            record(7, Some(1.7e9), &[(0, 2.5), (10, -0.0)]),
            record(
                u64::MAX,
                Some(f64::NAN),
                &[(1, f64::INFINITY), (2, f64::NEG_INFINITY)],
            ),
            record(
                9,
                None,
                &(0..SLOTS)
                    .map(|i| (i, i as f64 * 1e-300))
                    .collect::<Vec<_>>(),
            ),
        ]
        .into();
        let back = unpack(&pack(&records)).unwrap();
        assert_eq!(back.len(), records.len());
        for (a, b) in records.iter().zip(&back) {
            assert_eq!(a.step, b.step);
            let bits = |r: &Record| {
                std::iter::once(r.time)
                    .chain(r.values)
                    .map(|v| v.map(f64::to_bits))
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(a), bits(b));
        }
    }

    #[test]
    fn a_cut_or_foreign_byte_string_is_an_error_not_a_guess() {
        let packed = pack(&[record(3, Some(1.0), &[(0, 2.0)])].into());
        for cut in 1..packed.len() {
            let err = unpack(&packed[..cut]).unwrap_err();
            assert!(err.contains("expected"), "{cut}: {err}");
        }
        let mut foreign = 5u64.to_le_bytes().to_vec();
        foreign.extend_from_slice(&0xf000u16.to_le_bytes());
        assert!(unpack(&foreign).unwrap_err().contains("mask"));
        assert!(unpack(&[]).unwrap().is_empty());
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Queues {
        #[serde(with = "pairs")]
        pairs: VecDeque<(u64, f64)>,
        #[serde(with = "floats")]
        floats: VecDeque<f64>,
    }

    #[test]
    fn queues_survive_cbor_and_a_cut_one_is_refused() {
        let q = Queues {
            pairs: [(1, 0.5), (u64::MAX, f64::INFINITY), (3, -2.0)].into(),
            floats: [1.0, f64::NEG_INFINITY, 1e-310].into(),
        };
        let mut bytes = Vec::new();
        ciborium::into_writer(&q, &mut bytes).unwrap();
        let back: Queues = ciborium::from_reader(bytes.as_slice()).unwrap();
        assert_eq!(back, q);
        let nan = Queues {
            pairs: [(7, f64::NAN)].into(),
            floats: [f64::NAN].into(),
        };
        let mut bytes = Vec::new();
        ciborium::into_writer(&nan, &mut bytes).unwrap();
        let back: Queues = ciborium::from_reader(bytes.as_slice()).unwrap();
        assert!(back.pairs[0].1.is_nan() && back.floats[0].is_nan() && back.pairs[0].0 == 7);
        // A byte string one short of a whole entry: the cache is refused, never half-read.
        let mut cut = Vec::new();
        let short = serde_bytes::ByteBuf::from(vec![0u8; 15]);
        ciborium::into_writer(
            &ciborium::Value::Map(vec![
                ("pairs".into(), ciborium::Value::Bytes(short.to_vec())),
                ("floats".into(), ciborium::Value::Bytes(vec![])),
            ]),
            &mut cut,
        )
        .unwrap();
        let err = ciborium::from_reader::<Queues, _>(cut.as_slice()).unwrap_err();
        assert!(err.to_string().contains("packed pairs"), "{err}");
    }
}
