//! Stacks from every rank, grouped: parse `py-spy dump` output (innermost frame first), key
//! each rank by the innermost frame of its main thread, and name the odd group — the rank
//! that is somewhere else while the others wait in the collective.

use serde::{Deserialize, Serialize};

/// One frame as py-spy prints it: `    all_reduce (torch/distributed/distributed_c10d.py:1541)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    pub function: String,
    pub file: String,
    pub line: Option<u32>,
}

impl Frame {
    /// `all_reduce` or `slow_loader` (train.py:35): the file's last component only.
    pub fn short(&self) -> String {
        let file = self.file.rsplit('/').next().unwrap_or(&self.file);
        match self.line {
            Some(l) => format!("`{}` ({file}:{l})", self.function),
            None => format!("`{}` ({file})", self.function),
        }
    }
}

/// A thread's stack, innermost frame first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Thread {
    pub name: String,
    pub frames: Vec<Frame>,
}

/// Threads of one dump, in the order printed (py-spy prints the main thread first).
pub fn parse_dump(text: &str) -> Vec<Thread> {
    let mut out: Vec<Thread> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Thread ") {
            let name = rest
                .split_once('"')
                .and_then(|(_, n)| n.strip_suffix('"').or(Some(n)))
                .unwrap_or("")
                .to_string();
            out.push(Thread {
                name,
                frames: Vec::new(),
            });
            continue;
        }
        let (Some(t), true) = (out.last_mut(), line.starts_with("    ")) else {
            continue;
        };
        if let Some(f) = parse_frame(line.trim()) {
            t.frames.push(f);
        }
    }
    out
}

fn parse_frame(s: &str) -> Option<Frame> {
    // "func (file:line)"; the function may itself hold parentheses (`<lambda>`, `f.<locals>`).
    let open = s.rfind(" (")?;
    let inner = s[open + 2..].strip_suffix(')')?;
    let (file, line) = match inner.rsplit_once(':') {
        Some((f, l)) if l.bytes().all(|b| b.is_ascii_digit()) && !l.is_empty() => {
            (f.to_string(), l.parse().ok())
        }
        _ => (inner.to_string(), None),
    };
    Some(Frame {
        function: s[..open].trim().to_string(),
        file,
        line,
    })
}

/// The frame a rank is "in": the innermost frame of its main thread (else its first thread
/// with a Python stack).
pub fn innermost(threads: &[Thread]) -> Option<&Frame> {
    threads
        .iter()
        .find(|t| t.name == "MainThread" && !t.frames.is_empty())
        .or_else(|| threads.iter().find(|t| !t.frames.is_empty()))
        .and_then(|t| t.frames.first())
}

/// Ranks that share an innermost frame (same function in the same file; the line may differ).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    pub ranks: Vec<u32>,
    /// The first rank's frame (None: no stack could be read for these ranks).
    pub frame: Option<Frame>,
}

/// Group each rank's dump (rank, py-spy output or why none) by innermost frame; largest
/// group first, then by lowest rank.
pub fn group(dumps: &[(u32, Result<String, String>)]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (rank, dump) in dumps {
        let frame = dump
            .as_ref()
            .ok()
            .and_then(|d| innermost(&parse_dump(d)).cloned());
        let key = frame.as_ref().map(|f| (f.function.clone(), f.file.clone()));
        match groups.iter_mut().find(|g| {
            g.frame
                .as_ref()
                .map(|f| (f.function.clone(), f.file.clone()))
                == key
        }) {
            Some(g) => g.ranks.push(*rank),
            None => groups.push(Group {
                ranks: vec![*rank],
                frame,
            }),
        }
    }
    for g in &mut groups {
        g.ranks.sort_unstable();
    }
    groups.sort_by(|a, b| {
        b.ranks
            .len()
            .cmp(&a.ranks.len())
            .then(a.ranks.cmp(&b.ranks))
    });
    groups
}

/// The odd group: the one smallest group when there are two or more and it is strictly
/// smaller than every other (a 2–2 split has no odd one).
pub fn odd(groups: &[Group]) -> Option<&Group> {
    if groups.len() < 2 {
        return None;
    }
    let min = groups.iter().map(|g| g.ranks.len()).min()?;
    let smallest: Vec<&Group> = groups.iter().filter(|g| g.ranks.len() == min).collect();
    let biggest = groups.iter().map(|g| g.ranks.len()).max()?;
    (smallest.len() == 1 && biggest > min).then(|| smallest[0])
}

/// In words, odd group first: "rank 2 in `slow_loader` (train.py:35) for 41 s; ranks 0,1,3
/// in `all_reduce` (distributed_c10d.py:1541)".
pub fn summary(groups: &[Group], silent_s: f64) -> String {
    let odd = odd(groups);
    let where_ = |g: &Group| match &g.frame {
        Some(f) => format!("in {}", f.short()),
        None => "with no stack read".to_string(),
    };
    let mut parts = Vec::new();
    if let Some(o) = odd {
        parts.push(format!(
            "{} {} for {:.0} s",
            super::rank_list(&o.ranks),
            where_(o),
            silent_s
        ));
    }
    for g in groups.iter().filter(|g| Some(*g) != odd) {
        parts.push(format!("{} {}", super::rank_list(&g.ranks), where_(g)));
    }
    parts.join("; ")
}
