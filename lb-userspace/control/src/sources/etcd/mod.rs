//! Services and EndpointSlices from an etcd prefix (`[node.etcd]`).
//!
//! [`run`] lists the prefix, then watches it from the next revision and forwards what
//! it sees as [`EtcdMessage`]s. When the watch reports a compaction, or the connection
//! fails, it lists again: a list is a complete picture at one revision, so nothing is
//! lost or applied twice however long the node was away. While etcd is unreachable the
//! node keeps what it has (the data plane keeps forwarding) and retries with backoff.

pub mod mirror;

use std::time::Duration;

use etcd_client::{
    Certificate, Client, ConnectOptions, EventType, GetOptions, Identity, TlsOptions, WatchOptions,
};
use tokio::sync::mpsc::UnboundedSender;

pub use mirror::EtcdMirror;

use lb_model::config::EtcdConfig;

/// What the watcher reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtcdMessage {
    /// Every key under the prefix at `revision`: replaces what the node held.
    Snapshot {
        /// The store's revision of the list.
        revision: i64,
        /// Keys and values.
        kvs: Vec<(String, Vec<u8>)>,
    },
    /// Changes since the previous message, in order (`None`: deleted).
    Changes {
        /// The revision after the last change.
        revision: i64,
        /// Keys and new values.
        changes: Vec<(String, Option<Vec<u8>>)>,
    },
    /// The connection failed; the watcher retries.
    Down {
        /// Why.
        error: String,
    },
}

const FIRST_RETRY: Duration = Duration::from_millis(200);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// Watches the prefix until `tx`'s receiver is gone. Errors are sent as
/// [`EtcdMessage::Down`] and retried with exponential backoff (0.2 s to 5 s).
pub async fn run(settings: EtcdConfig, tx: UnboundedSender<EtcdMessage>) {
    let mut retry = FIRST_RETRY;
    loop {
        let error = match session(&settings, &tx, &mut retry).await {
            Ok(()) => return,
            Err(e) => e,
        };
        if tx.send(EtcdMessage::Down { error }).is_err() {
            return;
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(MAX_RETRY);
    }
}

/// The connection options: credentials and TLS material read from their files.
///
/// # Errors
/// A file that cannot be read, named.
pub fn connect_options(settings: &EtcdConfig) -> Result<ConnectOptions, String> {
    let read = |what: &str, path: &str| {
        std::fs::read(path).map_err(|e| format!("node.etcd.{what} {path}: {e}"))
    };
    let mut opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
        .with_keep_alive_while_idle(true);
    if !settings.username.is_empty() {
        let password = read("password_file", &settings.password_file)?;
        let password = String::from_utf8(password).map_err(|_| {
            format!(
                "node.etcd.password_file {}: not UTF-8",
                settings.password_file
            )
        })?;
        opts = opts.with_user(
            settings.username.clone(),
            password.trim_end_matches(['\n', '\r']),
        );
    }
    if !settings.ca_file.is_empty() || !settings.cert_file.is_empty() {
        let mut tls = TlsOptions::new();
        if !settings.ca_file.is_empty() {
            tls = tls.ca_certificate(Certificate::from_pem(read("ca_file", &settings.ca_file)?));
        }
        if !settings.cert_file.is_empty() {
            tls = tls.identity(Identity::from_pem(
                read("cert_file", &settings.cert_file)?,
                read("key_file", &settings.key_file)?,
            ));
        }
        opts = opts.with_tls(tls);
    }
    Ok(opts)
}

/// Keys per page of a list at first: a reply is limited to 4 MiB by the gRPC client,
/// and a prefix of thousands of slices is several times that.
const PAGE: i64 = 256;

/// Every key under `prefix` at one revision, read in pages (each page pinned to the
/// first one's revision, so the pages make one consistent picture). A page too large
/// for one reply is asked for again in smaller pieces.
async fn list(
    client: &mut Client,
    prefix: &str,
) -> Result<(i64, Vec<(String, Vec<u8>)>), etcd_client::Error> {
    let end = prefix_end(prefix);
    let mut from = prefix.as_bytes().to_vec();
    let mut revision = 0;
    let mut limit = PAGE;
    let mut out = Vec::new();
    loop {
        let mut opts = GetOptions::new().with_range(end.clone()).with_limit(limit);
        if revision > 0 {
            opts = opts.with_revision(revision);
        }
        let page = match client.get(from.clone(), Some(opts)).await {
            Err(e) if limit > 1 && e.to_string().contains("message length too large") => {
                limit = (limit / 4).max(1);
                continue;
            }
            result => result?,
        };
        if revision == 0 {
            revision = page.header().map_or(0, |h| h.revision());
        }
        let Some(last) = page.kvs().last() else {
            break;
        };
        from = last.key().to_vec();
        from.push(0);
        out.extend(
            page.kvs()
                .iter()
                .filter_map(|kv| Some((kv.key_str().ok()?.to_owned(), kv.value().to_vec()))),
        );
        if !page.more() {
            break;
        }
        limit = PAGE;
    }
    Ok((revision, out))
}

/// The first key after every key starting with `prefix` (its last byte plus one).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// One connection: list, watch, list again after a compaction. Returns `Ok` only when
/// the receiver is gone.
async fn session(
    settings: &EtcdConfig,
    tx: &UnboundedSender<EtcdMessage>,
    retry: &mut Duration,
) -> Result<(), String> {
    let opts = connect_options(settings)?;
    let endpoints = settings.endpoints.join(",");
    let mut client = Client::connect(&settings.endpoints, Some(opts))
        .await
        .map_err(|e| format!("connecting to {endpoints}: {e}"))?;
    let prefix = format!("{}/", settings.prefix);
    loop {
        let (revision, kvs) = list(&mut client, &prefix)
            .await
            .map_err(|e| format!("listing {prefix} on {endpoints}: {e}"))?;
        if tx.send(EtcdMessage::Snapshot { revision, kvs }).is_err() {
            return Ok(());
        }
        *retry = FIRST_RETRY;
        let mut stream = client
            .watch(
                prefix.as_str(),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(revision + 1),
                ),
            )
            .await
            .map_err(|e| format!("watching {prefix} on {endpoints}: {e}"))?;
        loop {
            let msg = stream
                .message()
                .await
                .map_err(|e| format!("watching {prefix} on {endpoints}: {e}"))?
                .ok_or_else(|| format!("{endpoints} closed the watch of {prefix}"))?;
            if msg.compact_revision() > 0 || msg.canceled() {
                tracing::warn!(
                    source = "etcd",
                    prefix = %prefix,
                    revision = msg.compact_revision(),
                    reason = %msg.cancel_reason(),
                    "etcd watch ended (history compacted or cancelled), listing the prefix again"
                );
                break;
            }
            if msg.events().is_empty() {
                continue;
            }
            let mut revision = 0;
            let changes = msg
                .events()
                .iter()
                .filter_map(|ev| {
                    let kv = ev.kv()?;
                    revision = revision.max(kv.mod_revision());
                    let key = kv.key_str().ok()?.to_owned();
                    Some(match ev.event_type() {
                        EventType::Put => (key, Some(kv.value().to_vec())),
                        EventType::Delete => (key, None),
                    })
                })
                .collect();
            let revision = msg
                .header()
                .map_or(revision, |h| h.revision().max(revision));
            if tx.send(EtcdMessage::Changes { revision, changes }).is_err() {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_first_key_past_the_prefix() {
        assert_eq!(prefix_end("/lb/"), b"/lb0");
        assert_eq!(prefix_end("a\u{7f}"), [b'a', 0x80]);
    }

    #[test]
    fn credentials_come_from_files_that_are_named_when_missing() {
        let settings = EtcdConfig {
            endpoints: vec!["http://198.18.0.5:2379".into()],
            prefix: "/lb".into(),
            username: "lb".into(),
            password_file: "/nonexistent/etcd-password".into(),
            ca_file: String::new(),
            cert_file: String::new(),
            key_file: String::new(),
        };
        let err = connect_options(&settings).expect_err("no file");
        assert!(
            err.starts_with("node.etcd.password_file /nonexistent/etcd-password: "),
            "{err}"
        );
    }
}
