//! Configuration errors: each says what was wrong and where.

/// A configuration file could not be used. The agent keeps its last good state.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// Path of the file.
        file: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The TOML is malformed or does not match the schema (unknown field, wrong type,
    /// unparsable address or duration, unknown enum value).
    #[error("{file}:{line}:{column}: {at}{message}", at = field_prefix(field.as_deref()))]
    Syntax {
        /// Path of the file.
        file: String,
        /// 1-based line, 0 when unknown.
        line: usize,
        /// 1-based column, 0 when unknown.
        column: usize,
        /// Dotted path of the value at that position (`service[0].fade_in.window`),
        /// when the position is in a value.
        field: Option<String>,
        /// The parser's message.
        message: String,
    },
    /// A value parses but is not acceptable.
    #[error("{file}:{line}: {field}: {problem}")]
    Invalid {
        /// Path of the file.
        file: String,
        /// 1-based line of the enclosing table, 0 when not tied to one.
        line: usize,
        /// Dotted path of the offending field.
        field: String,
        /// What is wrong and what would be accepted.
        problem: String,
    },
}

/// `"field: "` for a known field, else nothing.
fn field_prefix(field: Option<&str>) -> String {
    field.map_or_else(String::new, |f| format!("{f}: "))
}
