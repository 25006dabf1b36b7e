//! `[export]`: where the daemons write the Prometheus textfile (off unless set).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExportConfig {
    /// The file `roger watch` writes after each tick, e.g.
    /// "/var/lib/prometheus/node-exporter/roger.prom" (relative: to the config's directory).
    /// `roger critic --daemon` writes its sibling `<stem>-critic.prom`, so the two daemons of
    /// one run never replace each other's file. Must end in `.prom` (node_exporter's
    /// textfile collector reads nothing else).
    pub textfile: Option<PathBuf>,
}

impl ExportConfig {
    /// The file a daemon (`watch` or `critic`) writes, if export is on.
    pub fn textfile_for(&self, source: &str) -> Option<PathBuf> {
        let path = self.textfile.as_ref()?;
        if source == "watch" {
            return Some(path.clone());
        }
        let stem = path
            .file_stem()
            .map_or_else(|| "roger".to_string(), |s| s.to_string_lossy().into_owned());
        Some(path.with_file_name(format!("{stem}-{source}.prom")))
    }

    pub(super) fn resolve(mut self, base: &Path) -> Self {
        self.textfile = self.textfile.map(|p| base.join(p));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn critic_gets_a_sibling_file() {
        let e = ExportConfig {
            textfile: Some("/t/roger.prom".into()),
        };
        assert_eq!(e.textfile_for("watch"), Some("/t/roger.prom".into()));
        assert_eq!(
            e.textfile_for("critic"),
            Some("/t/roger-critic.prom".into())
        );
        assert_eq!(ExportConfig::default().textfile_for("watch"), None);
    }
}
