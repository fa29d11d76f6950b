//! Why the server could not start or stopped with an error.

/// Start-up and serving errors of the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid server configuration: {0}")]
    Config(String),
    #[error("opening the database")]
    Db(#[from] crate::db::DbError),
    #[error("loading keys")]
    Key(#[from] crate::crypto::CryptoError),
    #[error("reading the default devfile {path}")]
    DefaultDevfile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("opening the audit file {path}")]
    AuditFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("connecting to the audit syslog receiver {target}")]
    AuditSyslog {
        target: String,
        #[source]
        source: std::io::Error,
    },
    #[error("serving HTTP")]
    Serve(#[source] std::io::Error),
    #[error("holding the database")]
    DatabaseHeld(#[source] crate::backup::BackupError),
    #[error("loading the TLS certificate")]
    Tls(#[from] warren_tls::TlsError),
    #[error("reading the audit log")]
    AuditLog(#[source] crate::app::AppError),
    #[error("start-up")]
    Startup(#[from] crate::app::AppError),
}
