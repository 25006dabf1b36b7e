//! roger's own log lines on stderr, through `tracing`: `roger=info,warn` by default
//! (`-v` debug, `-vv` trace, `-q` errors only), `RUST_LOG` overriding.
//!
//! The formatting subscriber (tracing-subscriber's `fmt` with an `EnvFilter`) is built on
//! the first event that passes the filter, not at start: building it cost 67 k instructions
//! and ~14 page faults, a tenth of a repeated `critic --once`, which usually logs nothing.
//! [`Deferred`] answers the filter itself (the same directives, fixed for the whole run)
//! and hands everything else to the real subscriber once it exists. With `RUST_LOG` set,
//! the directives may be anything, so the real one is installed at once.

use std::sync::OnceLock;
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{span, Event, Metadata, Subscriber};
use tracing_subscriber::EnvFilter;

/// The formatting subscriber exists: something was logged (or may be, with `RUST_LOG`).
static BUILT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn formatter_built() -> bool {
    BUILT.load(std::sync::atomic::Ordering::Relaxed)
}

pub fn init(verbose: u8, quiet: bool) {
    let roger = match (quiet, verbose) {
        (true, _) => LevelFilter::ERROR,
        (_, 0) => LevelFilter::INFO,
        (_, 1) => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    let installed = match EnvFilter::try_from_default_env() {
        Ok(filter) => tracing::subscriber::set_global_default(formatter(filter)),
        Err(_) => tracing::subscriber::set_global_default(Deferred {
            roger,
            real: OnceLock::new(),
        }),
    };
    if installed.is_ok() {
        // Records of the `log` crate (ureq) pass through the same filter, as `try_init` did.
        use tracing_log::AsLog;
        let _ = tracing_log::LogTracer::builder()
            .with_max_level(LevelFilter::current().as_log())
            .init();
    }
}

fn formatter(filter: EnvFilter) -> impl Subscriber + Send + Sync {
    BUILT.store(true, std::sync::atomic::Ordering::Relaxed);
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // nohup.out and tmux logs must not fill with colour codes.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .finish()
}

/// `roger=<level>,warn`, answered without building the formatter.
struct Deferred {
    roger: LevelFilter,
    real: OnceLock<Box<dyn Subscriber + Send + Sync>>,
}

impl Deferred {
    fn passes(&self, meta: &Metadata<'_>) -> bool {
        let limit = if meta.target().starts_with("roger") {
            self.roger
        } else {
            LevelFilter::WARN
        };
        limit >= *meta.level()
    }

    fn real(&self) -> &(dyn Subscriber + Send + Sync) {
        &**self.real.get_or_init(|| {
            let filter = EnvFilter::new(format!("roger={},warn", self.roger));
            Box::new(formatter(filter))
        })
    }
}

impl Subscriber for Deferred {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.passes(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }
    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        self.passes(meta)
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.roger.max(LevelFilter::WARN))
    }
    fn new_span(&self, attrs: &span::Attributes<'_>) -> span::Id {
        self.real().new_span(attrs)
    }
    fn record(&self, id: &span::Id, values: &span::Record<'_>) {
        self.real().record(id, values)
    }
    fn record_follows_from(&self, id: &span::Id, follows: &span::Id) {
        self.real().record_follows_from(id, follows)
    }
    fn event_enabled(&self, event: &Event<'_>) -> bool {
        self.real().event_enabled(event)
    }
    fn event(&self, event: &Event<'_>) {
        self.real().event(event)
    }
    fn enter(&self, id: &span::Id) {
        self.real().enter(id)
    }
    fn exit(&self, id: &span::Id) {
        self.real().exit(id)
    }
    fn clone_span(&self, id: &span::Id) -> span::Id {
        self.real().clone_span(id)
    }
    fn try_close(&self, id: span::Id) -> bool {
        self.real().try_close(id)
    }
    fn current_span(&self) -> tracing_core::span::Current {
        match self.real.get() {
            Some(real) => real.current_span(),
            None => tracing_core::span::Current::none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn deferred(roger: LevelFilter) -> Deferred {
        Deferred {
            roger,
            real: OnceLock::new(),
        }
    }

    /// The filter is the one the eager `EnvFilter` had: `roger=<level>,warn`.
    #[test]
    fn the_deferred_filter_is_roger_at_its_level_and_warn_for_the_rest() {
        use tracing::callsite::Callsite;
        let cases = [
            (LevelFilter::INFO, "roger::watch", Level::INFO, true),
            (LevelFilter::INFO, "roger::watch", Level::DEBUG, false),
            (LevelFilter::INFO, "ureq::unit", Level::INFO, false),
            (LevelFilter::INFO, "ureq::unit", Level::WARN, true),
            (LevelFilter::ERROR, "roger::critic", Level::WARN, false),
            (LevelFilter::ERROR, "roger::critic", Level::ERROR, true),
            (LevelFilter::TRACE, "roger", Level::TRACE, true),
            (LevelFilter::TRACE, "other", Level::DEBUG, false),
        ];
        for (roger, target, level, want) in cases {
            struct Site;
            impl Callsite for Site {
                fn set_interest(&self, _: Interest) {}
                fn metadata(&self) -> &Metadata<'_> {
                    unreachable!()
                }
            }
            static SITE: Site = Site;
            let meta = Metadata::new(
                "event",
                target,
                level,
                None,
                None,
                None,
                tracing::field::FieldSet::new(&[], tracing::callsite::Identifier(&SITE)),
                tracing::metadata::Kind::EVENT,
            );
            assert_eq!(
                deferred(roger).passes(&meta),
                want,
                "{roger} {target} {level}"
            );
        }
        // Nothing is built until an event needs it.
        let d = deferred(LevelFilter::INFO);
        assert!(d.current_span().id().is_none());
        assert!(d.real.get().is_none());
        assert_eq!(d.max_level_hint(), Some(LevelFilter::INFO));
        assert_eq!(
            deferred(LevelFilter::ERROR).max_level_hint(),
            Some(LevelFilter::WARN)
        );
    }
}
