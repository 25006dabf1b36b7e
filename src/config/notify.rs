//! `[notify]`: who is told, how, and when (off unless a channel or a dead-man URL is set).
//! Secrets stay out of the TOML: every URL and header value may name an environment variable
//! instead (`url_env`, `headers_env`), read when sending and never written to the ledger.

use super::units::Dur;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// After a page, the same (kind, cause) of the run waits this long before paging again.
    pub cooldown: Dur,
    /// Quiet hours on the local clock, e.g. ["22:00", "07:00"]: pages become digest items
    /// then, except a run that stopped.
    pub quiet_hours: Option<[String; 2]>,
    /// Local time the daily digest (`roger report --text`) goes out, e.g. "08:00".
    pub digest_at: Option<String>,
    /// "kind" or "kind:cause" -> "page" | "digest" | "ignore", over the defaults.
    pub route: BTreeMap<String, String>,
    /// Dead-man switch: a GET after each tick in which roger could observe the run.
    pub deadman_url: Option<String>,
    pub deadman_url_env: Option<String>,
    pub webhook: Vec<WebhookConfig>,
    pub command: Vec<CommandConfig>,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        NotifyConfig {
            cooldown: Dur::secs(3600),
            quiet_hours: None,
            digest_at: None,
            route: BTreeMap::new(),
            deadman_url: None,
            deadman_url_env: None,
            webhook: Vec::new(),
            command: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    Slack,
    Discord,
    Ntfy,
    #[default]
    Generic,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// The channel's name in the outbox, the ledger and `roger notify test` (default "webhook").
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub preset: Preset,
    /// http://... or https://...
    pub url: Option<String>,
    /// The environment variable holding the URL (keeps a Slack/ntfy secret out of the TOML).
    pub url_env: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Header name -> environment variable holding its value (e.g. Authorization).
    #[serde(default)]
    pub headers_env: BTreeMap<String, String>,
    /// Send-and-answer limit.
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
}

fn default_timeout() -> Dur {
    Dur::secs(10)
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CommandConfig {
    #[serde(default)]
    pub name: Option<String>,
    /// argv, no shell; the event JSON comes on stdin.
    pub argv: Vec<String>,
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
}

impl NotifyConfig {
    pub fn enabled(&self) -> bool {
        !self.webhook.is_empty() || !self.command.is_empty() || self.deadman().is_some()
    }

    /// The dead-man URL, read from its variable when named that way.
    pub fn deadman(&self) -> Option<String> {
        self.deadman_url.clone().or_else(|| {
            self.deadman_url_env
                .as_ref()
                .and_then(|v| std::env::var(v).ok())
        })
    }

    /// Called by validate: names, times, routes and URLs that cannot work are refused at load.
    pub fn check(&self) -> Result<(), String> {
        if let Some([from, to]) = &self.quiet_hours {
            parse_hhmm(from).map_err(|e| format!("[notify] quiet_hours: {e}"))?;
            parse_hhmm(to).map_err(|e| format!("[notify] quiet_hours: {e}"))?;
        }
        if let Some(at) = &self.digest_at {
            parse_hhmm(at).map_err(|e| format!("[notify] digest_at: {e}"))?;
        }
        for (k, v) in &self.route {
            if !matches!(v.as_str(), "page" | "digest" | "ignore") {
                return Err(format!(
                    "[notify] route {k:?} = {v:?}: expected \"page\", \"digest\" or \"ignore\""
                ));
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, w) in self.webhook.iter().enumerate() {
            match (&w.url, &w.url_env) {
                (Some(_), Some(_)) | (None, None) => {
                    return Err(format!(
                        "[[notify.webhook]] #{}: set exactly one of url and url_env",
                        i + 1
                    ))
                }
                (Some(u), None) if !u.starts_with("http://") && !u.starts_with("https://") => {
                    return Err(format!(
                        "[[notify.webhook]] #{}: url {u:?} must start with http:// or https://",
                        i + 1
                    ))
                }
                _ => {}
            }
            if !names.insert(self.webhook_name(i)) {
                return Err(format!(
                    "[notify]: two channels named {:?}; give each a distinct name",
                    self.webhook_name(i)
                ));
            }
        }
        for (i, c) in self.command.iter().enumerate() {
            if c.argv.is_empty() {
                return Err(format!("[[notify.command]] #{}: argv is empty", i + 1));
            }
            if !names.insert(self.command_name(i)) {
                return Err(format!(
                    "[notify]: two channels named {:?}; give each a distinct name",
                    self.command_name(i)
                ));
            }
        }
        Ok(())
    }

    pub fn webhook_name(&self, i: usize) -> String {
        self.webhook[i].name.clone().unwrap_or_else(|| {
            if i == 0 {
                "webhook".into()
            } else {
                format!("webhook{}", i + 1)
            }
        })
    }

    pub fn command_name(&self, i: usize) -> String {
        self.command[i].name.clone().unwrap_or_else(|| {
            if i == 0 {
                "command".into()
            } else {
                format!("command{}", i + 1)
            }
        })
    }
}

/// "HH:MM" on the local clock.
pub fn parse_hhmm(s: &str) -> Result<chrono::NaiveTime, String> {
    chrono::NaiveTime::parse_from_str(s.trim(), "%H:%M")
        .map_err(|_| format!("expected a time like \"08:00\", got {s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Result<NotifyConfig, String> {
        let c: NotifyConfig = toml::from_str(t).map_err(|e| e.to_string())?;
        c.check().map(|()| c)
    }

    #[test]
    fn reads_channels_and_refuses_what_cannot_work() {
        let c = parse(
            "cooldown = \"30m\"\nquiet_hours = [\"22:00\", \"07:00\"]\ndigest_at = \"08:00\"\n[route]\n\"verdict:fail\" = \"page\"\n[[webhook]]\npreset = \"slack\"\nurl_env = \"SLACK_URL\"\n[[command]]\nargv = [\"mail\", \"-s\", \"roger\", \"me\"]\n",
        )
        .unwrap();
        assert_eq!(c.cooldown, Dur::secs(1800));
        assert_eq!(c.webhook[0].preset, Preset::Slack);
        assert_eq!(c.webhook_name(0), "webhook");
        assert!(c.enabled());
        assert!(!NotifyConfig::default().enabled());
        for (bad, says) in [
            ("cooldown = \"30\"", "unit"),
            ("digest_at = \"8am\"", "08:00"),
            ("[route]\nbreaker = \"wake\"", "expected \"page\""),
            ("[[webhook]]\nurl = \"ftp://x\"", "http://"),
            ("[[webhook]]\nurl = \"http://x\"\nurl_env = \"X\"", "exactly one"),
            ("[[command]]\nargv = []", "argv is empty"),
            ("[[webhook]]\nurl = \"http://x\"\n[[webhook]]\nname = \"webhook\"\nurl = \"http://y\"", "two channels"),
            ("bogus = 1", "unknown field"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
