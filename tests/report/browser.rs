//! The page in a real browser (Debian's chromium-headless-shell, offline): the DOM it builds
//! has the headline, the incident rows and one `<svg>` per plot, and its screenshot is a
//! picture (pixel variance), not a blank page. Without a browser: skipped, saying so (a failure
//! under CI).

use super::{browser, chromium};
use crate::util::Env;
use std::path::Path;

/// Luminance variance of a PNG, and its size.
fn variance(png_bytes: &[u8]) -> (f64, u32, u32) {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    let channels = info.color_type.samples();
    let data = &buf[..info.buffer_size()];
    let lum: Vec<f64> = data
        .chunks(channels)
        .map(|p| {
            if channels >= 3 {
                0.299 * p[0] as f64 + 0.587 * p[1] as f64 + 0.114 * p[2] as f64
            } else {
                p[0] as f64
            }
        })
        .collect();
    let mean = lum.iter().sum::<f64>() / lum.len() as f64;
    let var = lum.iter().map(|l| (l - mean) * (l - mean)).sum::<f64>() / lum.len() as f64;
    (var, info.width, info.height)
}

fn screenshot(env: &Env, bin: &Path, page: &Path, out: &Path) -> Vec<u8> {
    let shot = format!("--screenshot={}", out.display());
    let o = chromium(env, bin, &[&shot, "--window-size=1280,2200"], page);
    let png = std::fs::read(out).unwrap_or_else(|e| {
        panic!(
            "no screenshot ({e}): {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    png
}

fn no_browser() {
    crate::util::missing(
        &crate::util::this_test(),
        "chromium-headless-shell (or chromium) on PATH",
        "apt-get install chromium-headless-shell; .ci/run does",
    );
}

/// DOM and screenshot checks for a report page with these incident kinds (CSS-class form).
pub(crate) fn check_page(env: &Env, page: &Path, incidents: &[&str]) {
    let Some(bin) = browser() else {
        no_browser();
        return;
    };
    let o = chromium(env, &bin, &["--dump-dom"], page);
    let dom = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && dom.contains("</html>"),
        "chromium --dump-dom failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(dom.contains("class=\"badge\""), "no headline badge");
    assert!(dom.contains("id=\"why\""), "no headline sentence");
    for k in incidents {
        assert!(
            dom.contains(&format!("incident k-{k}")),
            "no {k} row in the DOM"
        );
    }
    // One <svg> per plot, parsed as SVG (the browser puts them in the SVG namespace).
    let plots = dom.matches("<figure class=\"plot\"").count();
    assert_eq!(plots, 5, "plots in the DOM");
    let svgs_in_plots = dom
        .split("<figure class=\"plot\"")
        .skip(1)
        .filter(|f| f.split("</figure>").next().unwrap_or("").contains("<svg"))
        .count();
    assert_eq!(svgs_in_plots, 5, "an <svg> in each plot");
    let png = screenshot(env, &bin, page, &env.path("shot.png"));
    let (var, w, h) = variance(&png);
    assert_eq!((w, h), (1280, 2200));
    // A blank page is 0; text, lines and bars on it give hundreds.
    assert!(
        var > 100.0,
        "the screenshot looks blank: luminance variance {var:.1}"
    );
}

/// docs/report.md's picture of the example night, made by the same browser.
pub(crate) fn screenshot_to_docs(env: &Env, page: &Path) {
    let Some(bin) = browser() else {
        no_browser();
        return;
    };
    let dir = crate::util::repo_root().join("docs");
    std::fs::create_dir_all(&dir).unwrap();
    screenshot(env, &bin, page, &dir.join("report-night.png"));
}

#[test]
fn a_blank_page_has_no_variance() {
    // The check above must be able to fail: a uniform image scores 0.
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, 8, 8);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().unwrap();
        w.write_image_data(&[200u8; 8 * 8 * 3]).unwrap();
    }
    assert_eq!(variance(&out).0, 0.0);
}
