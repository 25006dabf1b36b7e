//! Dense spec peaks of common NVIDIA GPUs: TFLOPS per dtype with FP32 accumulate (no
//! sparsity) and memory bandwidth, from NVIDIA's datasheets and architecture whitepapers.
//! Names are matched longest pattern first, on word boundaries ('-' and ' ' alike), so "A100"
//! is not taken for "A10" and "H100 PCIe" is not taken for "H100". A variant word right after
//! the model ("Ti", "D", "SUPER", "Laptop") makes it another part; MIG partitions and laptop
//! parts get no spec at all, with the reason.

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
    s("RTX 3090 Ti", 40.0, Some(40.0), 80.0, Some(80.0), 1008.0),
    s("RTX 3090", 35.6, Some(35.6), 71.0, Some(71.0), 936.0),
    s("V100S", 16.4, None, 130.0, None, 1134.0),
    s("V100-PCIE", 14.0, None, 112.0, None, 900.0),
    s("V100", 15.7, None, 125.0, None, 900.0),
    s("T4", 8.1, None, 65.0, None, 320.0),
];

/// The spec for a GPU name as NVML/nvidia-smi report it, longest pattern first.
pub fn lookup(name: &str) -> Option<&'static Spec> {
    match_spec(name).ok()
}

/// Words after a model name that make it a different part than the table's row.
const VARIANTS: [&str; 7] = ["ti", "super", "d", "laptop", "mobile", "max", "xt"];

/// Lower case, '-' and '_' as spaces: NVML says "V100-PCIE-16GB", datasheets "V100 PCIe".
fn normalise(name: &str) -> String {
    name.to_ascii_lowercase().replace(['-', '_'], " ")
}

/// The spec for a GPU name, or why there is none to compare with.
pub fn match_spec(name: &str) -> Result<&'static Spec, String> {
    let hay = normalise(name);
    let words: Vec<&str> = hay.split_whitespace().collect();
    if words.contains(&"mig") {
        return Err(format!("{name} is a MIG partition: it has a fraction of the GPU's SMs and memory bandwidth, so the full GPU's spec does not apply (no ratio)"));
    }
    if let Some(w) = words
        .iter()
        .find(|w| ["laptop", "mobile", "max q"].contains(w) || w.starts_with("max"))
    {
        return Err(format!("{name} is a laptop part ({w}): its clocks and power limit are set by the laptop maker, so no datasheet figure applies (no ratio)"));
    }
    let mut rows: Vec<&Spec> = TABLE.iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.model.len()));
    let mut variant = None;
    for r in rows {
        match match_at(&hay, &normalise(r.model)) {
            Some(Some(next)) if VARIANTS.contains(&next) => {
                variant.get_or_insert((r.model, next.to_string()));
            }
            Some(_) => return Ok(r),
            None => {}
        }
    }
    Err(match variant {
        Some((model, v)) => format!("{name} is not the {model} (the '{v}' variant is a different part) and is not in the spec table (no ratio)"),
        None => format!("{name} is not in the spec table (no ratio)"),
    })
}

/// Where `pat` occurs in `hay` on word boundaries: Some(the next word, if any), else None.
fn match_at<'h>(hay: &'h str, pat: &str) -> Option<Option<&'h str>> {
    let b = hay.as_bytes();
    let mut found = None;
    for (i, _) in hay.match_indices(pat) {
        let before = i.checked_sub(1).map(|j| b[j]);
        let after = b.get(i + pat.len()).copied();
        if before.is_some_and(|c| c.is_ascii_alphanumeric())
            || after.is_some_and(|c| c.is_ascii_alphanumeric())
        {
            continue;
        }
        let next = hay[i + pat.len()..].split_whitespace().next();
        // A plain occurrence wins over one followed by a variant word.
        if !next.is_some_and(|w| VARIANTS.contains(&w)) {
            return Some(next);
        }
        found = Some(next);
    }
    found
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
        assert_eq!(model("NVIDIA GeForce RTX 3090 Ti"), Some("RTX 3090 Ti"));
        assert_eq!(model("NVIDIA GeForce RTX 3080"), None);
    }

    #[test]
    fn partitions_laptops_and_variants_get_no_spec_with_the_reason() {
        // Each of these took a full or desktop part's figures before (false fails).
        let why = |n: &str| match_spec(n).err().unwrap_or_else(|| panic!("{n} matched"));
        assert!(why("NVIDIA H200 MIG 1g.18gb").contains("MIG partition"));
        assert!(why("NVIDIA H100 80GB HBM3 MIG 3g.40gb").contains("MIG partition"));
        assert!(why("NVIDIA GeForce RTX 4090 Laptop GPU").contains("laptop part"));
        assert!(why("NVIDIA GeForce RTX 3080 Ti Max-Q").contains("laptop part"));
        let d = why("NVIDIA GeForce RTX 4090 D");
        assert!(
            d.contains("not the RTX 4090") && d.contains("'d' variant"),
            "{d}"
        );
        assert!(why("NVIDIA GeForce RTX 4090 SUPER").contains("variant"));
        assert!(why("NVIDIA GeForce RTX 3080").contains("not in the spec table"));
        assert_eq!(model("NVIDIA GeForce RTX 3090 Ti"), Some("RTX 3090 Ti"));
        assert_eq!(model("NVIDIA GeForce RTX 4090"), Some("RTX 4090"));
    }

    #[test]
    fn v100_pcie_and_sxm2_are_told_apart() {
        let pcie = lookup("Tesla V100-PCIE-16GB").unwrap();
        assert_eq!(
            (pcie.model, pcie.fp16, pcie.fp32),
            ("V100-PCIE", 112.0, 14.0)
        );
        assert_eq!(model("Tesla V100 PCIe 32GB"), Some("V100-PCIE"));
        assert_eq!(lookup("Tesla V100-SXM2-32GB").unwrap().fp16, 125.0);
        assert_eq!(lookup("Tesla V100S-PCIE-32GB").unwrap().mem_bw, 1134.0);
        assert_eq!(model("NVIDIA A100-SXM4-80GB"), Some("A100-SXM4-80GB"));
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
