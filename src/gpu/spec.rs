//! Dense spec peaks of common NVIDIA GPUs: TFLOPS per dtype with FP32 accumulate (no
//! sparsity) and memory bandwidth, from NVIDIA's datasheets and architecture whitepapers.
//! Names are matched longest pattern first, on word boundaries, so "A100" is not taken for
//! "A10" and "H100 PCIe" is not taken for "H100".

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Fp32,
    Tf32,
    Fp16,
    Bf16,
}

impl Dtype {
    pub const ALL: [Dtype; 4] = [Dtype::Fp32, Dtype::Tf32, Dtype::Fp16, Dtype::Bf16];
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::Fp32 => "fp32",
            Dtype::Tf32 => "tf32",
            Dtype::Fp16 => "fp16",
            Dtype::Bf16 => "bf16",
        }
    }
    pub fn parse(s: &str) -> Option<Dtype> {
        Dtype::ALL
            .into_iter()
            .find(|d| d.as_str() == s.to_ascii_lowercase())
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::Fp32 | Dtype::Tf32 => 4,
            Dtype::Fp16 | Dtype::Bf16 => 2,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spec {
    /// The pattern that matched (e.g. "H100 PCIe").
    pub model: &'static str,
    pub fp32: f64,
    /// None: the dtype has no tensor-core path on this GPU.
    pub tf32: Option<f64>,
    pub fp16: f64,
    pub bf16: Option<f64>,
    /// GB/s.
    pub mem_bw: f64,
}

impl Spec {
    pub fn peak(&self, d: Dtype) -> Option<f64> {
        match d {
            Dtype::Fp32 => Some(self.fp32),
            Dtype::Tf32 => self.tf32,
            Dtype::Fp16 => Some(self.fp16),
            Dtype::Bf16 => self.bf16,
        }
    }
}

const fn s(
    model: &'static str,
    fp32: f64,
    tf32: Option<f64>,
    fp16: f64,
    bf16: Option<f64>,
    mem_bw: f64,
) -> Spec {
    Spec {
        model,
        fp32,
        tf32,
        fp16,
        bf16,
        mem_bw,
    }
}

/// Dense TFLOPS (FP32 accumulate) and GB/s. SXM figures where the plain name is ambiguous.
pub const TABLE: &[Spec] = &[
    s("H200 NVL", 60.0, Some(417.5), 835.5, Some(835.5), 4800.0),
    s("H200", 67.0, Some(494.7), 989.4, Some(989.4), 4800.0),
    s("H100 NVL", 60.0, Some(417.5), 835.5, Some(835.5), 3900.0),
    s("H100 PCIe", 51.2, Some(378.0), 756.0, Some(756.0), 2000.0),
    s("H100", 67.0, Some(494.7), 989.4, Some(989.4), 3350.0),
    s(
        "A100-SXM4-80GB",
        19.5,
        Some(156.0),
        312.0,
        Some(312.0),
        2039.0,
    ),
    s(
        "A100 80GB PCIe",
        19.5,
        Some(156.0),
        312.0,
        Some(312.0),
        1935.0,
    ),
    s("A100", 19.5, Some(156.0), 312.0, Some(312.0), 1555.0),
    s("A10", 31.2, Some(62.5), 125.0, Some(125.0), 600.0),
    s("L40S", 91.6, Some(183.0), 362.05, Some(362.05), 864.0),
    s("L40", 90.5, Some(90.5), 181.0, Some(181.0), 864.0),
    s("L4", 30.3, Some(60.0), 121.0, Some(121.0), 300.0),
    s("RTX 4090", 82.6, Some(82.6), 165.2, Some(165.2), 1008.0),
    s("RTX 3090", 35.6, Some(35.6), 71.0, Some(71.0), 936.0),
    s("V100", 15.7, None, 125.0, None, 900.0),
    s("T4", 8.1, None, 65.0, None, 320.0),
];

/// The spec for a GPU name as NVML/nvidia-smi report it, longest pattern first.
pub fn lookup(name: &str) -> Option<&'static Spec> {
    let hay = name.to_ascii_lowercase();
    let mut rows: Vec<&Spec> = TABLE.iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.model.len()));
    rows.into_iter()
        .find(|r| matches_word(&hay, &r.model.to_ascii_lowercase()))
}

/// `pat` occurs in `hay` with no letter or digit right before or after it.
fn matches_word(hay: &str, pat: &str) -> bool {
    let b = hay.as_bytes();
    hay.match_indices(pat).any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| b[j]);
        let after = b.get(i + pat.len()).copied();
        !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !after.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> Option<&'static str> {
        lookup(name).map(|s| s.model)
    }

    #[test]
    fn longest_name_first_on_word_boundaries() {
        assert_eq!(model("NVIDIA A100-SXM4-80GB"), Some("A100-SXM4-80GB"));
        assert_eq!(model("NVIDIA A100-SXM4-40GB"), Some("A100"));
        assert_eq!(model("NVIDIA A100 80GB PCIe"), Some("A100 80GB PCIe"));
        assert_eq!(model("NVIDIA A10"), Some("A10"));
        assert_eq!(model("NVIDIA A10G"), None);
        assert_eq!(model("NVIDIA L40S"), Some("L40S"));
        assert_eq!(model("NVIDIA L4"), Some("L4"));
        assert_eq!(model("NVIDIA H100 PCIe"), Some("H100 PCIe"));
        assert_eq!(model("NVIDIA H100 80GB HBM3"), Some("H100"));
        assert_eq!(model("NVIDIA H200"), Some("H200"));
        assert_eq!(model("NVIDIA GH200 480GB"), None);
        assert_eq!(model("NVIDIA GeForce RTX 4090"), Some("RTX 4090"));
        assert_eq!(model("NVIDIA GeForce RTX 3090 Ti"), Some("RTX 3090"));
        assert_eq!(model("NVIDIA GeForce RTX 3080"), None);
    }

    #[test]
    fn figures_from_the_issue() {
        assert_eq!(
            lookup("NVIDIA H100 80GB HBM3").unwrap().peak(Dtype::Bf16),
            Some(989.4)
        );
        assert_eq!(
            lookup("NVIDIA H200").unwrap().peak(Dtype::Bf16),
            Some(989.4)
        );
        assert_eq!(
            lookup("NVIDIA A100-SXM4-40GB").unwrap().peak(Dtype::Bf16),
            Some(312.0)
        );
        assert_eq!(lookup("NVIDIA A10").unwrap().peak(Dtype::Fp16), Some(125.0));
        assert_eq!(lookup("NVIDIA L4").unwrap().peak(Dtype::Bf16), Some(121.0));
        assert_eq!(
            lookup("NVIDIA GeForce RTX 4090").unwrap().peak(Dtype::Fp16),
            Some(165.2)
        );
        assert_eq!(
            lookup("NVIDIA GeForce RTX 3090").unwrap().peak(Dtype::Bf16),
            Some(71.0)
        );
        assert_eq!(
            lookup("Tesla V100-SXM2-16GB").unwrap().peak(Dtype::Bf16),
            None
        );
    }
}
