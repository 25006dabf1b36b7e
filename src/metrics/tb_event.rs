//! The parts of TensorBoard's `Event` protobuf a scalar needs, declared by hand for `prost`
//! (field numbers from tensorflow/core/util/event.proto, summary.proto, tensor.proto; no
//! `protoc` at build time), and [`scalars`]: an event's (tag, value) pairs, whether written
//! as `simple_value` (TF1, tensorboardX, PyTorch's SummaryWriter) or as a one-element
//! `tensor` (TF2 `tf.summary.scalar`, `new_style=True`) of float, double, half or bfloat16.

use prost::Message;

#[derive(Clone, PartialEq, Message)]
pub struct Event {
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    #[prost(int64, tag = "2")]
    pub step: i64,
    /// Set on the first event of a file ("brain.Event:2").
    #[prost(string, optional, tag = "3")]
    pub file_version: Option<String>,
    #[prost(message, optional, tag = "5")]
    pub summary: Option<Summary>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<SummaryValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SummaryValue {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(float, optional, tag = "2")]
    pub simple_value: Option<f32>,
    #[prost(message, optional, tag = "8")]
    pub tensor: Option<Tensor>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Tensor {
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShape>,
    #[prost(bytes = "vec", tag = "4")]
    pub tensor_content: Vec<u8>,
    #[prost(float, repeated, tag = "5")]
    pub float_val: Vec<f32>,
    #[prost(double, repeated, tag = "6")]
    pub double_val: Vec<f64>,
    /// Text summaries (`add_text`): the strings, UTF-8.
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub string_val: Vec<Vec<u8>>,
    /// Half and bfloat16 values, their 16 bits in an int32 each.
    #[prost(int32, repeated, tag = "13")]
    pub half_val: Vec<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TensorShape {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Dim {
    #[prost(int64, tag = "1")]
    pub size: i64,
}

/// tensorflow.DataType values read as scalars.
const DT_FLOAT: i32 = 1;
const DT_DOUBLE: i32 = 2;
const DT_BFLOAT16: i32 = 14;
const DT_HALF: i32 = 19;

/// An IEEE half (binary16) from its bits.
pub fn half_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let frac = f64::from(bits & 0x3ff);
    match exp {
        0 => sign * frac * 2f64.powi(-24),
        31 if frac == 0.0 => sign * f64::INFINITY,
        31 => f64::NAN,
        e => sign * (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    }
}

impl Tensor {
    /// The value of a one-element float tensor; `None` for anything else (histograms,
    /// text, images, integer tensors).
    pub fn scalar(&self) -> Option<f64> {
        let elements: i64 = self
            .tensor_shape
            .as_ref()
            .map_or(1, |s| s.dim.iter().map(|d| d.size).product());
        if elements != 1 {
            return None;
        }
        let c = &self.tensor_content;
        match self.dtype {
            DT_FLOAT => self
                .float_val
                .first()
                .map(|&v| f64::from(v))
                .or_else(|| Some(f64::from(f32::from_le_bytes(c.get(..4)?.try_into().ok()?)))),
            DT_DOUBLE => self
                .double_val
                .first()
                .copied()
                .or_else(|| Some(f64::from_le_bytes(c.get(..8)?.try_into().ok()?))),
            DT_HALF | DT_BFLOAT16 => {
                let bits = match self.half_val.first() {
                    Some(&b) => b as u16,
                    None => u16::from_le_bytes(c.get(..2)?.try_into().ok()?),
                };
                Some(if self.dtype == DT_HALF {
                    half_to_f64(bits)
                } else {
                    f64::from(f32::from_bits(u32::from(bits) << 16))
                })
            }
            _ => None,
        }
    }
}

/// The scalars an event carries, as (tag, value).
pub fn scalars(event: &Event) -> impl Iterator<Item = (&str, f64)> {
    event.summary.iter().flat_map(|s| &s.value).filter_map(|v| {
        let value = match (v.simple_value, &v.tensor) {
            (Some(x), _) => f64::from(x),
            (None, Some(t)) => t.scalar()?,
            (None, None) => return None,
        };
        Some((v.tag.as_str(), value))
    })
}

/// tensorflow.DataType of a text summary's tensor.
const DT_STRING: i32 = 7;

/// The text summaries an event carries, as (tag, text): `add_text("args", ...)` arrives as
/// tag `args/text_summary`.
pub fn texts(event: &Event) -> impl Iterator<Item = (&str, String)> {
    event.summary.iter().flat_map(|s| &s.value).filter_map(|v| {
        let t = v.tensor.as_ref().filter(|t| t.dtype == DT_STRING)?;
        let text = t.string_val.first()?;
        Some((v.tag.as_str(), String::from_utf8_lossy(text).into_owned()))
    })
}

/// Decode one record's payload.
pub fn decode(payload: &[u8]) -> Result<Event, prost::DecodeError> {
    Event::decode(payload)
}

/// An event with scalars as the writers encode it (tests and the benchmark).
pub fn encode_scalars(wall_time: f64, step: i64, scalars: &[(&str, f32)]) -> Vec<u8> {
    Event {
        wall_time,
        step,
        file_version: None,
        summary: Some(Summary {
            value: scalars
                .iter()
                .map(|(tag, v)| SummaryValue {
                    tag: tag.to_string(),
                    simple_value: Some(*v),
                    tensor: None,
                })
                .collect(),
        }),
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_floats_decode() {
        assert_eq!(half_to_f64(0x3c00), 1.0);
        assert_eq!(half_to_f64(0xc000), -2.0);
        assert_eq!(half_to_f64(0x3555), 0.333_251_953_125);
        assert_eq!(half_to_f64(0x0001), 2f64.powi(-24));
        assert!(half_to_f64(0x7e00).is_nan());
        assert_eq!(half_to_f64(0xfc00), f64::NEG_INFINITY);
    }

    #[test]
    fn tensor_scalars_of_each_dtype_and_layout() {
        let t = |dtype, f: fn(&mut Tensor)| {
            let mut t = Tensor {
                dtype,
                tensor_shape: Some(TensorShape { dim: vec![] }),
                tensor_content: vec![],
                float_val: vec![],
                double_val: vec![],
                string_val: vec![],
                half_val: vec![],
            };
            f(&mut t);
            t.scalar()
        };
        assert_eq!(t(DT_FLOAT, |t| t.float_val = vec![2.5]), Some(2.5));
        assert_eq!(
            t(DT_FLOAT, |t| t.tensor_content =
                2.5f32.to_le_bytes().to_vec()),
            Some(2.5)
        );
        assert_eq!(t(DT_DOUBLE, |t| t.double_val = vec![0.1]), Some(0.1));
        assert_eq!(
            t(DT_DOUBLE, |t| t.tensor_content =
                0.1f64.to_le_bytes().to_vec()),
            Some(0.1)
        );
        assert_eq!(t(DT_HALF, |t| t.half_val = vec![0x3c00]), Some(1.0));
        assert_eq!(t(DT_BFLOAT16, |t| t.half_val = vec![0x3fc0]), Some(1.5));
        assert_eq!(t(3, |t| t.tensor_content = vec![1, 0, 0, 0]), None, "int32");
        assert_eq!(
            t(DT_FLOAT, |t| {
                t.float_val = vec![1.0, 2.0];
                t.tensor_shape = Some(TensorShape {
                    dim: vec![Dim { size: 2 }],
                });
            }),
            None,
            "a vector is no scalar"
        );
        let e = decode(&encode_scalars(5.0, 7, &[("train/loss", 1.5)])).unwrap();
        assert_eq!(
            (e.step, scalars(&e).collect::<Vec<_>>()),
            (7, vec![("train/loss", 1.5)])
        );
        assert!(decode(b"\xff\xff\xff").is_err());
    }
}
