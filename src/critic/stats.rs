//! Small robust statistics the checks share: median, Theil–Sen slope, least-squares slope.
//! Non-finite inputs are ignored; too few points give `None`.

/// Median of the finite values.
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

/// Theil–Sen slope (median of pairwise slopes) of finite (x, y) points; pairs at the same x
/// are skipped. Robust to a few outliers, which a loss curve has.
pub fn theil_sen(points: &[(f64, f64)]) -> Option<f64> {
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
    median(slopes)
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
