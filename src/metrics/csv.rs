//! CSV with a header row, as Lightning's `metrics.csv` writes it: one column per metric,
//! empty cells where a row does not carry that metric (train and val rows interleave).
//! Quoted cells (`"a,b"`, `""` for a quote) are understood.

use super::{Fields, Keys, LineParser, Parsed, Target};
use crate::metrics::mapping::MetricsConfig;

#[derive(Clone)]
pub struct CsvParser {
    keys: Keys,
    step_key: String,
    /// Per column: the targets it feeds; None until the header has been read.
    columns: Option<Vec<Vec<Target>>>,
    /// The header's column names, for the report of a cell that is not a number.
    names: Vec<String>,
    cells: Vec<(usize, usize)>,
    unquoted: Vec<u8>,
}

impl CsvParser {
    pub fn new(m: &MetricsConfig) -> CsvParser {
        CsvParser {
            keys: Keys::new(m),
            step_key: m.step.clone(),
            columns: None,
            names: Vec::new(),
            cells: Vec::new(),
            unquoted: Vec::new(),
        }
    }
}

/// Cell spans of one row; quotes are kept in the span and removed by [`unquote`].
fn split(line: &[u8], cells: &mut Vec<(usize, usize)>) {
    cells.clear();
    let mut start = 0;
    let mut quoted = false;
    for (i, &c) in line.iter().enumerate() {
        match c {
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                cells.push((start, i));
                start = i + 1;
            }
            _ => {}
        }
    }
    cells.push((start, line.len()));
}

fn unquote<'a>(cell: &'a [u8], buf: &'a mut Vec<u8>) -> &'a [u8] {
    let cell = cell.trim_ascii();
    match cell.strip_prefix(b"\"").and_then(|c| c.strip_suffix(b"\"")) {
        None => cell,
        Some(inner) => {
            buf.clear();
            let mut i = 0;
            while i < inner.len() {
                buf.push(inner[i]);
                i += if inner[i] == b'"' && inner.get(i + 1) == Some(&b'"') {
                    2
                } else {
                    1
                };
            }
            buf
        }
    }
}

impl LineParser for CsvParser {
    fn parse(&mut self, line: &[u8]) -> Parsed {
        let line = super::clean_line(line);
        if line.trim_ascii().is_empty() {
            return Parsed::Skip;
        }
        split(&line, &mut self.cells);
        let Some(columns) = &self.columns else {
            let mut cols = Vec::with_capacity(self.cells.len());
            self.names.clear();
            for &(s, e) in &self.cells {
                let name = unquote(&line[s..e], &mut self.unquoted);
                cols.push(self.keys.lookup(name).collect());
                self.names.push(String::from_utf8_lossy(name).into_owned());
            }
            let has_step = cols.iter().any(|c: &Vec<Target>| c.contains(&Target::Step));
            self.columns = Some(cols);
            if !has_step {
                return Parsed::Garbage(format!(
                    "CSV header has no `{}` column (set [metrics] step)",
                    self.step_key
                ));
            }
            return Parsed::Skip;
        };
        // The header again: a resumed run's writer appends its header before its rows (timm's
        // summary.csv); a header, not a row of numbers.
        if self.cells.len() == self.names.len()
            && self
                .cells
                .iter()
                .zip(&self.names)
                .all(|(&(s, e), n)| unquote(&line[s..e], &mut self.unquoted) == n.as_bytes())
        {
            return Parsed::Skip;
        }
        if self.cells.len() != columns.len() {
            return Parsed::Garbage(format!(
                "expected {} CSV cells (as in the header), found {}",
                columns.len(),
                self.cells.len()
            ));
        }
        let mut fields = Fields::default();
        for (col, (&(s, e), targets)) in self.cells.iter().zip(columns).enumerate() {
            if targets.is_empty() {
                continue;
            }
            let cell = unquote(&line[s..e], &mut self.unquoted);
            if cell.is_empty() {
                continue;
            }
            for &t in targets {
                match self.keys.value(t, cell) {
                    Some(v) => fields.set(t, v),
                    None if fields.bad.is_none() => {
                        fields.bad = Some(format!(
                            "column `{}` is {:?}, expected a number",
                            self.names.get(col).map_or("?", String::as_str),
                            String::from_utf8_lossy(cell)
                        ))
                    }
                    None => {}
                }
            }
        }
        fields.finish(&self.keys, &self.step_key)
    }

    fn reset(&mut self) {
        self.columns = None;
    }

    fn fork(&self) -> Option<Box<dyn LineParser>> {
        self.columns
            .is_some()
            .then(|| Box::new(self.clone()) as Box<dyn LineParser>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lightning_metrics_csv() {
        let m = MetricsConfig {
            loss: "train_loss".into(),
            eval_loss: "val_loss".into(),
            lr: "lr-AdamW".into(),
            ..Default::default()
        };
        let mut p = CsvParser::new(&m);
        assert_eq!(
            p.parse(b"epoch,step,train_loss,val_loss,lr-AdamW"),
            Parsed::Skip
        );
        let Parsed::Sample(s) = p.parse(b"0,49,2.5,,0.0006") else {
            panic!()
        };
        assert_eq!(
            (s.step, s.get("loss"), s.get("eval_loss")),
            (49, Some(2.5), None)
        );
        let Parsed::Sample(s) = p.parse(b"0,99,,\"2.75\",") else {
            panic!()
        };
        assert_eq!((s.get("loss"), s.get("eval_loss")), (None, Some(2.75)));
        assert!(matches!(p.parse(b"0,1,2"), Parsed::Garbage(w) if w.contains("expected 5")));
        assert!(matches!(p.parse(b"0,x,2,,"), Parsed::Garbage(w) if w.contains("\"x\"")));
        // The header again (a resumed run's writer appended it): no row, no complaint.
        assert_eq!(
            p.parse(b"epoch,step,train_loss,val_loss,lr-AdamW"),
            Parsed::Skip
        );
        assert!(matches!(p.parse(b"1,149,2.25,,"), Parsed::Sample(_)));
        p.reset();
        assert!(matches!(p.parse(b"a,b"), Parsed::Garbage(w) if w.contains("no `step`")));
    }

    #[test]
    fn quoted_cells_with_commas() {
        let mut cells = Vec::new();
        split(br#"1,"a,""b""",3"#, &mut cells);
        assert_eq!(cells.len(), 3);
        let mut buf = Vec::new();
        let line = br#"1,"a,""b""",3"#;
        assert_eq!(
            unquote(&line[cells[1].0..cells[1].1], &mut buf),
            br#"a,"b""#
        );
    }
}
