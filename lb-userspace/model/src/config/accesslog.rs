//! `[node.access_log]`: the access log of `l7` services (the renderer and writer live in
//! the l7 crate).

/// Access-log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessLogFormat {
    /// skipper's default line.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Access-log settings (`[node.access_log]`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessLogConfig {
    /// Log requests of routes without an `enableAccessLog`/`disableAccessLog` (default
    /// true).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// `text` (skipper's line, default) or `json`.
    #[serde(default)]
    pub format: AccessLogFormat,
    /// A file to append to, or `"-"`/empty for stderr.
    #[serde(default)]
    pub file: String,
    /// Leave queries out of logged URIs.
    #[serde(default)]
    pub strip_query: bool,
}

fn yes() -> bool {
    true
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            format: AccessLogFormat::Text,
            file: String::new(),
            strip_query: false,
        }
    }
}
