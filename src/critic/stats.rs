//! Small robust statistics the checks share: median, Theil–Sen slope (with its confidence
//! interval), least-squares slope, the normal quantile. Non-finite inputs are ignored; too
//! few points give `None`.

/// Median of the finite values.
/// The resolution a log printed these values at: 10^-d for the fewest decimals d (1..=10)
/// that hold every one of them exactly, else 0 (full-precision floats). Whole numbers alone
/// say nothing (test data, a loss of exactly 3), so they give 0 too.
pub fn printed_resolution(values: impl IntoIterator<Item = f64>) -> f64 {
    let decimals = |v: f64| {
        (0..=10).find(|&d| {
            let scaled = v * 10f64.powi(d);
            (scaled - scaled.round()).abs() <= 1e-6 + scaled.abs() * 1e-12
        })
    };
    let mut finest = 0;
    for v in values.into_iter().filter(|v| v.is_finite()) {
        match decimals(v) {
            Some(d) => finest = finest.max(d),
            None => return 0.0,
        }
    }
    if finest == 0 {
        0.0
    } else {
        10f64.powi(-finest)
    }
}

pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The finite points and their pairwise slopes (pairs at the same x skipped), unsorted.
fn pairwise_slopes(points: &[(f64, f64)]) -> (usize, Vec<f64>) {
    let pts: Vec<&(f64, f64)> = points
        .iter()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    let mut slopes = Vec::with_capacity(pts.len() * pts.len() / 2);
    for (i, a) in pts.iter().enumerate() {
        for b in &pts[i + 1..] {
            let dx = b.0 - a.0;
            if dx != 0.0 {
                slopes.push((b.1 - a.1) / dx);
            }
        }
    }
    (pts.len(), slopes)
}

/// Theil–Sen slope (median of pairwise slopes) of finite (x, y) points; pairs at the same x
/// are skipped. Robust to a few outliers, which a loss curve has.
pub fn theil_sen(points: &[(f64, f64)]) -> Option<f64> {
    median(pairwise_slopes(points).1)
}

/// A Theil–Sen slope with its confidence interval; a bound is infinite when too few points
/// leave no order statistic to put it at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlopeInterval {
    pub slope: f64,
    pub lo: f64,
    pub hi: f64,
    /// Finite points, and pairwise slopes among them.
    pub points: usize,
    pub pairs: usize,
}

/// Theil–Sen slope and its nonparametric confidence interval (Sen 1968; Gilbert 1987,
/// §16.5): with n points and their N pairwise slopes sorted, C = z·√(n(n−1)(2n+5)/18), the
/// bounds are the slopes of rank (N−C)/2 and (N+C)/2 + 1 (1-based), rounded outward so the
/// interval is at least as wide as asked. `z` is the two-sided normal quantile (1.96: 95%).
pub fn theil_sen_interval(points: &[(f64, f64)], z: f64) -> Option<SlopeInterval> {
    let (n, mut slopes) = pairwise_slopes(points);
    let slope = median(slopes.iter().copied())?;
    slopes.sort_by(f64::total_cmp);
    let big_n = slopes.len() as f64;
    let nf = n as f64;
    let c = z * (nf * (nf - 1.0) * (2.0 * nf + 5.0) / 18.0).sqrt();
    let lower_rank = ((big_n - c) / 2.0).floor();
    let upper_rank = ((big_n + c) / 2.0 + 1.0).ceil();
    let at = |rank: f64| slopes[rank as usize - 1];
    Some(SlopeInterval {
        slope,
        lo: if lower_rank >= 1.0 {
            at(lower_rank)
        } else {
            f64::NEG_INFINITY
        },
        hi: if upper_rank <= big_n {
            at(upper_rank)
        } else {
            f64::INFINITY
        },
        points: n,
        pairs: slopes.len(),
    })
}

/// The standard normal quantile Φ⁻¹(p) for 0 < p < 1 (Acklam's rational approximation,
/// relative error under 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.38357751867269e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    const LOW: f64 = 0.02425;
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - LOW {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Ordinary least-squares slope of finite points.
pub fn ls_slope(points: &[(f64, f64)]) -> Option<f64> {
    let pts: Vec<&(f64, f64)> = points
        .iter()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    let n = pts.len() as f64;
    if pts.len() < 2 {
        return None;
    }
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_ignores_non_finite() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, f64::NAN, 2.0, 3.0]), Some(2.5));
        assert_eq!(median([f64::NAN]), None);
        assert_eq!(median([]), None);
    }

    /// Worked by hand: x = 0..5, y = [0, 2, 1, 4, 3, 6]. The 15 pairwise slopes, sorted:
    /// -1, -1, 1/3, 1/2, 3/4, 1, 1, 1, 1, 6/5, 4/3, 5/3, 2, 3, 3; median (the 8th) 1.
    /// C = 1.96·√(6·5·17/18) = 10.433; ranks (15−10.433)/2 = 2.28 → 2 and
    /// (15+10.433)/2 + 1 = 13.72 → 14: the interval is [-1, 3].
    #[test]
    fn theil_sen_interval_by_hand() {
        let pts: Vec<(f64, f64)> = [0.0, 2.0, 1.0, 4.0, 3.0, 6.0]
            .iter()
            .enumerate()
            .map(|(i, y)| (i as f64, *y))
            .collect();
        let ci = theil_sen_interval(&pts, 1.96).unwrap();
        assert_eq!(
            (ci.slope, ci.lo, ci.hi, ci.points, ci.pairs),
            (1.0, -1.0, 3.0, 6, 15)
        );
        // Three points: no rank is left for the bounds.
        let ci = theil_sen_interval(&pts[..3], 1.96).unwrap();
        assert_eq!((ci.lo, ci.hi), (f64::NEG_INFINITY, f64::INFINITY));
        assert_eq!(theil_sen_interval(&pts[..1], 1.96), None);
    }

    #[test]
    fn normal_quantiles_from_the_table() {
        for (p, z) in [
            (0.5, 0.0),
            (0.975, 1.959964),
            (0.995, 2.575829),
            (0.95, 1.644854),
            (0.01, -2.326348),
        ] {
            assert!(
                (normal_quantile(p) - z).abs() < 1e-6,
                "{p}: {}",
                normal_quantile(p)
            );
        }
    }

    #[test]
    fn theil_sen_shrugs_off_an_outlier() {
        let mut pts: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 2.0 * i as f64)).collect();
        pts[5].1 = 1000.0;
        assert_eq!(theil_sen(&pts), Some(2.0));
        assert!(ls_slope(&pts).unwrap() > 2.5);
        assert_eq!(theil_sen(&[(1.0, 1.0)]), None);
        assert_eq!(theil_sen(&[(1.0, 1.0), (1.0, 5.0)]), None, "same x only");
        assert_eq!(ls_slope(&[(1.0, 1.0), (1.0, 2.0)]), None);
    }
}
