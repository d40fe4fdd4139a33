//! lbd's log: `tracing` events on stderr, as text for people or as one JSON object a
//! line for machines (`lbd --log-format text|json`), filtered by `RUST_LOG`.
//!
//! [`init`] installs the process-wide subscriber once, before anything logs:
//!
//! - **Filter**: `RUST_LOG` in `tracing-subscriber`'s `EnvFilter` syntax (`debug`,
//!   `info,lb_l7=debug`, `warn,lb_control::agent=trace`); unset or empty means `info`.
//!   A value that does not parse is not fatal: lbd logs at `info` and says so in a
//!   warning (a typo in an environment variable must not stop a load balancer).
//! - **Text** (the default): `2024-05-01T12:00:00.123456Z  WARN lb_l7::proxy::listen:
//!   malformed request answered with 400 service=web client=198.18.0.1:40000
//!   error=…` — timestamp, level, target (the module), message, then the fields as
//!   `name=value`. Colour only when stderr is a terminal.
//! - **JSON**: one object a line, `{"timestamp":…,"level":"WARN","fields":{"message":
//!   …,"service":"web",…},"target":"lb_l7::proxy::listen"}`, plus `span` and `spans`
//!   (name and fields of the enclosing spans) for events inside spans. Every line on
//!   stderr is such an object once `init` has run (lbd's last words on a fatal
//!   error included, see `lbd.rs`).
//! - **`log` bridge**: records of the `log` facade (dependencies such as aya, and any
//!   call site not converted yet) become `tracing` events with their own target, so
//!   they are filtered and formatted like the rest. In JSON their fields also hold
//!   `log.target`, `log.module_path`, `log.file` and `log.line` (tracing-subscriber's
//!   JSON writer keeps them); text shows the target only.
//!
//! Tests must not depend on the wording of any of this: they wait on the admin API
//! (`/v1/status`, `/v1/backends`), which is the contract. The fields below are the
//! structured part of the log, for people grepping it and for log pipelines.
//!
//! # Field conventions
//!
//! Every call site in lbd uses these names, so one query finds every event about a
//! thing. Values are recorded with Display (`%value`) unless they are numbers or
//! booleans; never interpolate into the message what a field already carries.
//!
//! | field | what | example |
//! |---|---|---|
//! | `service` | a service's name from the config | `web` |
//! | `vip` | a VIP as `lbctl` shows it (`addr:port/proto`), or the address alone | `198.18.0.10:80/tcp` |
//! | `listen` | an address lbd listens on (l7 service, metrics) | `198.18.0.10:80` |
//! | `backend` | a backend's address (`addr:port` for an l7 endpoint) | `198.18.1.2` |
//! | `client` | the peer of a client connection | `198.18.0.1:40312` |
//! | `source` | where services or endpoints come from, as in `lbctl status`: `config`, `endpointslices`, `etcd`, `routes` | `endpointslices` |
//! | `file` | a file lbd read or refused (config, EndpointSlice, route file, state file) | `/etc/lbd/lbd.toml` |
//! | `path` | any other filesystem location: a directory, a pin, a socket, a mount point | `/sys/fs/bpf/lb` |
//! | `interface` | a network interface | `eth0` |
//! | `listener` | which of lbd's own sockets (`admin`, `metrics`, `handover`, `l7`) | `admin` |
//! | `key`, `prefix`, `revision` | an etcd key, the watched prefix, a revision | `/lb/services/web` |
//! | `map` | a BPF map, by its pinned name | `LB_CONNTRACK_V2` |
//! | `reason` | why something was skipped, when that is not an error | |
//! | `error` | the error, Display (`%err`): one line, its causes as the error type prints them | |
//! | `elapsed_ms` | how long the operation the event ends took, milliseconds as `f64` (sub-millisecond reconciles show) | `3.42` |
//! | `*_ms` | any other duration, milliseconds | `retry_ms = 10` |
//! | `suppressed` | events like this one held back by a throttle since the last one logged | `17` |
//! | counts | plain names: `services`, `programmed`, `unchanged`, `removed`, `flows`, `entries` | |
//!
//! Spans name an operation and carry its context, which then appears on every event
//! inside it: `reconcile` with `trigger` (`start`, `reload`, `endpointslices`,
//! `health`, `fade-in`, `etcd`: the admin API's `ReconcileRecord::trigger`) and
//! `reload` with `file`. Span close events are off (they would add a line per fade-in
//! step); the event that ends an operation carries its `elapsed_ms`.
//!
//! Levels: `error` — lbd could not do something and keeps running without it (an
//! input refused, a write failed); `warn` — degraded but handled (a throttled client
//! error, a fallback); `info` — the node's state changed (attached, reloaded,
//! listening, a backend's health); `debug` — per connection or per document detail.
//! Messages are lower-case sentences without a final period that say what happened
//! and what lbd does about it: `reload rejected, keeping the running config`.

use std::io::IsTerminal as _;

use tracing_log::AsLog as _;
use tracing_subscriber::{
    EnvFilter, Layer as _, filter::LevelFilter, fmt::MakeWriter, layer::SubscriberExt as _,
};

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event for people: time, level, module, message, `name=value`
    /// fields.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (the message
    /// under `message`), and `span`/`spans` inside spans.
    Json,
}

/// Why the log could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// A subscriber is already installed (`init` ran before, or a test installed one).
    #[error("a tracing subscriber is already installed")]
    Subscriber(#[source] tracing::subscriber::SetGlobalDefaultError),
    /// A `log` logger is already installed, so `log` records cannot be bridged.
    #[error("a `log` logger is already installed")]
    LogBridge(#[source] log::SetLoggerError),
}

/// The filter `RUST_LOG` asks for: `value` in `EnvFilter` syntax, `info` when unset or
/// empty.
///
/// # Errors
/// `value` is not a valid filter; the error says which directive.
pub fn filter(value: Option<&str>) -> Result<EnvFilter, tracing_subscriber::filter::ParseError> {
    EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .parse(value.unwrap_or_default())
}

/// Installs lbd's subscriber (format `format`, filter from `RUST_LOG`, writing to
/// stderr) and the `log` bridge. Call once, first thing in `main`.
///
/// # Errors
/// [`InitError`]: something installed a subscriber or a logger before.
pub fn init(format: LogFormat) -> Result<(), InitError> {
    let wanted = std::env::var("RUST_LOG").ok();
    let (filter, refused) = match filter(wanted.as_deref()) {
        Ok(f) => (f, None),
        Err(e) => (EnvFilter::new("info"), Some(e)),
    };
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing::subscriber::set_global_default(subscriber(format, filter, std::io::stderr, ansi))
        .map_err(InitError::Subscriber)?;
    // `log` records below the filter's most verbose level are dropped before they are
    // formatted, as env_logger did.
    tracing_log::LogTracer::builder()
        .with_max_level(LevelFilter::current().as_log())
        .init()
        .map_err(InitError::LogBridge)?;
    if let Some(error) = refused {
        tracing::warn!(
            rust_log = wanted.as_deref().unwrap_or_default(),
            %error,
            "RUST_LOG is not a valid filter, logging at info"
        );
    }
    Ok(())
}

/// Reports the error that ends lbd: `lbd: error: …` on stderr as before for text; for
/// JSON an `error` event (`lbd stopped`, the error in `error`), so that every stderr
/// line stays a JSON object.
pub fn fatal(format: LogFormat, error: &dyn std::fmt::Display) {
    match format {
        LogFormat::Text => eprintln!("lbd: error: {error}"),
        LogFormat::Json => tracing::error!(target: "lbd", %error, "lbd stopped"),
    }
}

/// The subscriber [`init`] installs, writing to `writer`.
fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    ansi: bool,
) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let fmt = tracing_subscriber::fmt::layer().with_writer(writer);
    let fmt = match format {
        LogFormat::Text => fmt.with_ansi(ansi).boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    tracing_subscriber::registry().with(filter).with(fmt)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Lines written by a subscriber, shared with the test.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Captured {
        type Writer = Self;
        fn make_writer(&'w self) -> Self {
            self.clone()
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("lock").clone()).expect("utf-8")
        }
    }

    /// Runs `f` with a subscriber of `format` and `filter`; what it wrote.
    fn capture(format: LogFormat, filter: &str, f: impl FnOnce()) -> String {
        let out = Captured::default();
        let sub = subscriber(
            format,
            super::filter(Some(filter)).expect("filter"),
            out.clone(),
            false,
        );
        tracing::subscriber::with_default(sub, f);
        out.text()
    }

    #[test]
    fn rust_log_unset_or_empty_means_info_and_garbage_is_refused() {
        for value in [None, Some("")] {
            let f = filter(value).expect("filter");
            assert_eq!(f.max_level_hint(), Some(LevelFilter::INFO), "{value:?}");
        }
        let f = filter(Some("warn,lb_l7=debug")).expect("filter");
        assert_eq!(f.max_level_hint(), Some(LevelFilter::DEBUG));
        let e = filter(Some("lb_l7=loud")).expect_err("not a level");
        assert!(!e.to_string().is_empty());
    }

    #[test]
    fn json_lines_carry_level_target_message_and_fields() {
        let out = capture(LogFormat::Json, "info", || {
            let span = tracing::info_span!("reload", file = "/etc/lbd/lbd.toml");
            let _entered = span.enter();
            tracing::error!(
                file = "/etc/lbd/lbd.toml",
                error = %"line 3: expected a string",
                "reload rejected, keeping the running config"
            );
            tracing::debug!("filtered out at info");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{out}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON line");
        assert_eq!(v["level"], "ERROR", "{v}");
        assert_eq!(v["target"], module_path!(), "{v}");
        assert_eq!(
            v["fields"]["message"],
            "reload rejected, keeping the running config"
        );
        assert_eq!(v["fields"]["file"], "/etc/lbd/lbd.toml");
        assert_eq!(v["fields"]["error"], "line 3: expected a string");
        assert_eq!(v["span"]["name"], "reload", "{v}");
        assert!(v["timestamp"].is_string(), "{v}");
    }

    #[test]
    fn log_records_arrive_as_events_of_their_own_target() {
        // Process-wide, as in lbd; the subscriber below is this thread's only.
        let _ = tracing_log::LogTracer::init();
        let out = capture(LogFormat::Json, "info", || {
            log::warn!(target: "aya::maps", "a dependency says {}", 42);
            log::debug!(target: "aya::maps", "below the filter");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{out}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON line");
        assert_eq!(v["level"], "WARN", "{v}");
        assert_eq!(v["target"], "aya::maps", "{v}");
        assert_eq!(v["fields"]["message"], "a dependency says 42", "{v}");
        // JSON keeps where the record came from as fields of its own.
        assert_eq!(v["fields"]["log.module_path"], module_path!(), "{v}");
        // Text folds them into the line's target.
        let out = capture(LogFormat::Text, "info", || {
            log::warn!(target: "aya::maps", "a dependency says {}", 42);
        });
        assert!(
            out.trim_end()
                .ends_with(" WARN aya::maps: a dependency says 42"),
            "{out}"
        );
    }

    #[test]
    fn text_lines_show_the_message_then_the_fields() {
        let out = capture(LogFormat::Text, "debug", || {
            tracing::warn!(service = %"web", suppressed = 3, "malformed request answered with 400");
            tracing::trace!("filtered out at debug");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{out}");
        assert!(
            lines[0].contains(" WARN ")
                && lines[0]
                    .ends_with("malformed request answered with 400 service=web suppressed=3"),
            "{out}"
        );
        assert!(!out.contains('\u{1b}'), "no colour codes: {out:?}");
    }
}
