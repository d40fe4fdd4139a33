//! TLS to `https://` backends: the connector of the TLS client pool (one per worker,
//! beside the plain one, so a plain request never passes through any of this).
//!
//! As Go's transport does for skipper: TCP first (`connect_timeout`), then a
//! handshake with the URL's host as SNI (none for an IP address, which is checked
//! against the certificate's IP names instead), offering ALPN `http/1.1` only (the
//! backend side speaks HTTP/1.1), and the certificate verified against the system's
//! trust store plus `node.l7.backend_ca_file`, unless
//! `node.l7.backend_tls_insecure_skip_verify` says not to. The handshake gets
//! `connect_timeout` too. The trust store is read once, when the proxy starts;
//! nothing is fetched.
//!
//! A failed TCP connect and a failed handshake are told apart ([`ConnectError`]):
//! the first is retried on the next endpoint like a plain one's, the second is not
//! (skipper's dialer marks only the TCP dial as retryable; the handshake runs after
//! it, in Go's transport) and is answered as skipper answers it
//! ([`super::forward::Failure::handshake`]).

use std::{
    error::Error as StdError,
    future::Future,
    io,
    path::{Path, PathBuf},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use http::Uri;
use hyper_util::{
    client::legacy::connect::{Connected, Connection, HttpConnector},
    rt::TokioIo,
};
use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::CryptoProvider,
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject},
};
use tokio::net::TcpStream;

/// Why the TLS client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// `backend_ca_file` cannot be read or is not PEM certificates.
    #[error(
        "node.l7.backend_ca_file {}: {problem} (give a PEM file of CA certificates)",
        path.display()
    )]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// rustls refused the protocol versions (never with its own defaults).
    #[error("TLS client setup: {0}")]
    Rustls(String),
}

/// The TLS client settings every worker's pool shares.
///
/// # Errors
/// The CA file cannot be read, holds no certificate or one that does not parse.
pub(super) fn client_config(
    ca_file: Option<&Path>,
    insecure: bool,
) -> Result<Arc<ClientConfig>, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError::Rustls(e.to_string()))?;
    let mut config = if insecure {
        tracing::warn!(
            "node.l7.backend_tls_insecure_skip_verify: https backends' certificates are not verified"
        );
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
            .with_no_client_auth()
    } else {
        builder
            .with_root_certificates(roots(ca_file)?)
            .with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The system's trust store and the operator's CAs. A store that cannot be read is
/// a warning, not an error: only https backends need it, and with a CA file they may
/// not.
fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, TlsSetupError> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::warn!(error = %e, "reading the system's trust store for https backends");
    }
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    if added == 0 && ca_file.is_none() {
        tracing::warn!(
            "no trusted CA certificate found in the system's store: https backends will not verify (set node.l7.backend_ca_file)"
        );
    }
    if let Some(path) = ca_file {
        let fail = |problem: String| TlsSetupError::CaFile {
            path: path.to_owned(),
            problem,
        };
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| fail(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| fail(e.to_string()))?;
        if certs.is_empty() {
            return Err(fail("holds no certificate".into()));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| fail(format!("a certificate does not parse: {e}")))?;
        }
    }
    Ok(roots)
}

/// `backend_tls_insecure_skip_verify`: any certificate is taken, but the handshake's
/// signatures are still checked (the connection is encrypted to whoever holds the
/// key of the certificate presented).
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Why a TLS endpoint could not be reached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// The TCP connect failed (refused, unreachable, timed out): as for a plain
    /// endpoint, nothing was sent and the next endpoint may be tried.
    #[error("connecting failed")]
    Connect(#[source] Box<dyn StdError + Send + Sync>),
    /// The handshake failed or took longer than `connect_timeout` (`TimedOut`).
    #[error("TLS handshake failed")]
    Handshake(#[source] io::Error),
    /// The URL's host is not a name or address TLS can verify.
    #[error("{0:?} is not a TLS server name")]
    ServerName(String),
}

/// Connects TCP, then TLS ([module docs](self)).
#[derive(Clone)]
pub(crate) struct TlsConnector {
    tcp: HttpConnector,
    tls: tokio_rustls::TlsConnector,
    handshake_timeout: Duration,
}

impl TlsConnector {
    /// Over `tcp` (which must accept `https` URIs: `enforce_http(false)`).
    pub(super) fn new(tcp: HttpConnector, config: Arc<ClientConfig>, timeout: Duration) -> Self {
        Self {
            tcp,
            tls: tokio_rustls::TlsConnector::from(config),
            handshake_timeout: timeout,
        }
    }
}

/// A TLS connection to a backend, as hyper's client reads and writes it.
pub(crate) struct TlsStream(tokio_rustls::client::TlsStream<TcpStream>);

impl Connection for TlsStream {
    fn connected(&self) -> Connected {
        self.0.get_ref().0.connected()
    }
}

impl tokio::io::AsyncRead for TlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

impl tower_service::Service<Uri> for TlsConnector {
    type Response = TokioIo<TlsStream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        self.tcp
            .poll_ready(cx)
            .map_err(|e| ConnectError::Connect(Box::new(e)))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        // SNI is the URL's host, as in Go (`tlsHost`), never the Host header: a
        // `preserveHost` route still verifies the backend by its own name.
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let connecting = self.tcp.call(uri);
        let (tls, limit) = (self.tls.clone(), self.handshake_timeout);
        Box::pin(async move {
            let name =
                ServerName::try_from(host.clone()).map_err(|_| ConnectError::ServerName(host))?;
            let tcp = connecting
                .await
                .map_err(|e| ConnectError::Connect(Box::new(e)))?
                .into_inner();
            let stream = tokio::time::timeout(limit, tls.connect(name, tcp))
                .await
                .map_err(|_| {
                    ConnectError::Handshake(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "TLS handshake timed out",
                    ))
                })?
                .map_err(ConnectError::Handshake)?;
            Ok(TokioIo::new(TlsStream(stream)))
        })
    }
}
