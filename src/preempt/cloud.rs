//! Cloud metadata notices: AWS IMDSv2 `spot/instance-action`, GCE `instance/preempted`, Azure
//! Scheduled Events. Parsing the answers is pure (body and `now` in, a notice or none out);
//! `poll` is the HTTP edge, through the crate's `ureq`, against configurable base URLs.

use super::{Notice, Source};
use crate::config::preempt::Cloud;
use std::time::Duration;

/// AWS gives two minutes' notice of a spot interruption.
pub const AWS_WINDOW_S: f64 = 120.0;
/// GCE gives 30 s between preemption notice and stop.
pub const GCE_WINDOW_S: f64 = 30.0;
/// Azure Spot eviction: at least 30 s (NotBefore says exactly when).
pub const AZURE_WINDOW_S: f64 = 30.0;

fn parse_rfc3339(s: &str) -> Option<f64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|d| d.timestamp_millis() as f64 / 1000.0)
}

/// `GET /latest/meta-data/spot/instance-action` answered 200 with
/// `{"action": "terminate", "time": "2017-09-18T08:22:00Z"}`.
pub fn aws(body: &str, now: f64) -> Option<Notice> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let action = v.get("action")?.as_str()?;
    let time = v.get("time").and_then(|t| t.as_str());
    let deadline = time.and_then(parse_rfc3339).unwrap_or(now + AWS_WINDOW_S);
    Some(Notice {
        source: Source::Aws,
        detail: format!("spot instance-action {action} at {}", time.unwrap_or("?")),
        received_at: now,
        deadline,
    })
}

/// `GET /computeMetadata/v1/instance/preempted` answers `TRUE` or `FALSE`.
pub fn gce(body: &str, now: f64) -> Option<Notice> {
    (body.trim() == "TRUE").then(|| Notice {
        source: Source::Gce,
        detail: "instance/preempted = TRUE".into(),
        received_at: now,
        deadline: now + GCE_WINDOW_S,
    })
}

/// `GET /metadata/scheduledevents`: the first `Preempt` or `Terminate` event; its NotBefore
/// (RFC 1123) is the deadline.
pub fn azure(body: &str, now: f64) -> Option<Notice> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let ev = v.get("Events")?.as_array()?.iter().find(|e| {
        matches!(
            e.get("EventType").and_then(|t| t.as_str()),
            Some("Preempt" | "Terminate")
        )
    })?;
    let kind = ev.get("EventType").and_then(|t| t.as_str()).unwrap_or("?");
    let nb = ev.get("NotBefore").and_then(|t| t.as_str()).unwrap_or("");
    let deadline = chrono::DateTime::parse_from_rfc2822(nb)
        .ok()
        .map(|d| d.timestamp_millis() as f64 / 1000.0)
        .unwrap_or(now + AZURE_WINDOW_S);
    Some(Notice {
        source: Source::Azure,
        detail: format!("scheduled event {kind} not before {nb}"),
        received_at: now,
        deadline,
    })
}

/// Ask one metadata service once. Ok(None): no notice; Err: the service could not be asked
/// (reported once by the caller, never a notice).
pub fn poll(cloud: Cloud, base: &str, now: f64) -> Result<Option<Notice>, String> {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(2))
        .build();
    let base = base.trim_end_matches('/');
    let get = |req: ureq::Request| -> Result<Option<String>, String> {
        match req.call() {
            Ok(r) => r.into_string().map(Some).map_err(|e| e.to_string()),
            Err(ureq::Error::Status(404, _)) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    };
    match cloud {
        Cloud::Aws => {
            // IMDSv2: a session token first (PUT), then the GET with it.
            let token = agent
                .put(&format!("{base}/latest/api/token"))
                .set("X-aws-ec2-metadata-token-ttl-seconds", "300")
                .call()
                .map_err(|e| format!("IMDSv2 token: {e}"))?
                .into_string()
                .map_err(|e| e.to_string())?;
            let body = get(agent
                .get(&format!("{base}/latest/meta-data/spot/instance-action"))
                .set("X-aws-ec2-metadata-token", token.trim()))?;
            Ok(body.and_then(|b| aws(&b, now)))
        }
        Cloud::Gce => {
            let body = get(agent
                .get(&format!("{base}/computeMetadata/v1/instance/preempted"))
                .set("Metadata-Flavor", "Google"))?;
            Ok(body.and_then(|b| gce(&b, now)))
        }
        Cloud::Azure => {
            let body = get(agent
                .get(&format!(
                    "{base}/metadata/scheduledevents?api-version=2020-07-01"
                ))
                .set("Metadata", "true"))?;
            Ok(body.and_then(|b| azure(&b, now)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_instance_action_gives_its_time_as_the_deadline() {
        let n = aws(
            r#"{"action": "terminate", "time": "2023-11-14T22:15:20Z"}"#,
            1_700_000_000.0,
        )
        .unwrap();
        assert_eq!(n.source, Source::Aws);
        assert_eq!(n.deadline, 1_700_000_120.0);
        assert!(n.detail.contains("terminate"));
        assert!(aws("not json", 0.0).is_none());
        assert!(aws("{}", 0.0).is_none());
    }

    #[test]
    fn gce_true_is_a_30s_notice_and_false_is_none() {
        assert_eq!(gce("TRUE\n", 10.0).unwrap().deadline, 40.0);
        assert!(gce("FALSE", 10.0).is_none());
    }

    #[test]
    fn azure_preempt_uses_not_before_and_ignores_other_events() {
        let body = r#"{"DocumentIncarnation":2,"Events":[
            {"EventId":"a","EventType":"Freeze","NotBefore":""},
            {"EventId":"b","EventType":"Preempt","NotBefore":"Tue, 14 Nov 2023 22:14:30 GMT"}]}"#;
        let n = azure(body, 1_700_000_000.0).unwrap();
        assert_eq!(n.deadline, 1_700_000_070.0);
        assert!(n.detail.contains("Preempt"));
        let none = r#"{"DocumentIncarnation":1,"Events":[{"EventType":"Reboot"}]}"#;
        assert!(azure(none, 0.0).is_none());
        let no_time = r#"{"Events":[{"EventType":"Terminate","NotBefore":""}]}"#;
        assert_eq!(azure(no_time, 5.0).unwrap().deadline, 35.0);
    }
}
