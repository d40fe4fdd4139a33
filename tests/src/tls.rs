//! TLS on the backend side of the L7 proxy: certificate authorities made at test time
//! with the `openssl` command, and an HTTPS backend that reports what the handshake
//! and the request brought (SNI, ALPN, Host). Nothing is fetched; every file lives in
//! a directory removed on drop.

use std::{
    convert::Infallible,
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, body::Incoming};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

use crate::run;

/// A CA and the certificates it signed, in a directory of their own.
#[derive(Debug)]
pub struct Ca {
    dir: PathBuf,
}

impl Drop for Ca {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Ca {
    /// A new self-signed CA named `name` (P-256, valid for a day).
    ///
    /// # Panics
    /// If `openssl` fails.
    pub fn new(name: &str) -> Self {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "lb-tls-{}-{}-{name}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let ca = Self { dir };
        run(
            "openssl",
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "1",
                "-subj",
                &format!("/CN={name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-keyout",
                &ca.path("ca.key"),
                "-out",
                &ca.path("ca.pem"),
            ],
        );
        ca
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).to_string_lossy().into_owned()
    }

    /// The CA certificate's PEM file (`backend_ca_file`).
    pub fn cert_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A server certificate and key for `names` (`DNS:localhost`, `IP:127.0.0.1`,
    /// as subjectAltName entries), signed by this CA.
    ///
    /// # Panics
    /// If `openssl` fails.
    pub fn issue(&self, file: &str, names: &[&str]) -> Identity {
        let (key, csr, cert, ext) = (
            self.path(&format!("{file}.key")),
            self.path(&format!("{file}.csr")),
            self.path(&format!("{file}.pem")),
            self.path(&format!("{file}.ext")),
        );
        std::fs::write(
            &ext,
            format!(
                "subjectAltName={}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
                names.join(",")
            ),
        )
        .expect("write ext");
        run(
            "openssl",
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-subj",
                &format!("/CN={file}"),
                "-keyout",
                &key,
                "-out",
                &csr,
            ],
        );
        run(
            "openssl",
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &self.path("ca.pem"),
                "-CAkey",
                &self.path("ca.key"),
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                &ext,
                "-out",
                &cert,
            ],
        );
        Identity {
            cert: PathBuf::from(cert),
            key: PathBuf::from(key),
        }
    }
}

/// A server's certificate and key files.
#[derive(Clone, Debug)]
pub struct Identity {
    /// PEM certificate.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

fn server_config(id: &Identity) -> rustls::ServerConfig {
    let certs = CertificateDer::pem_file_iter(&id.cert)
        .expect("cert file")
        .collect::<Result<Vec<_>, _>>()
        .expect("certs");
    let key = PrivateKeyDer::from_pem_file(&id.key).expect("key");
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server identity");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// An HTTPS backend answering `200` with its name as the body and what it saw in
/// headers: `x-sni` (the ClientHello's server name, `-` for none), `x-alpn`, `x-host`
/// (the request's Host) and `x-target`. Stops when dropped.
#[derive(Debug)]
pub struct TlsBackend {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Requests answered.
    pub served: Arc<AtomicU64>,
    /// Handshakes that failed (the client refused our certificate, or went away).
    pub failed_handshakes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TlsBackend {
    /// Starts on `addr` with `id` on the current runtime.
    ///
    /// # Panics
    /// If it cannot bind or the identity does not load.
    pub async fn start(addr: SocketAddr, name: &str, id: &Identity) -> Self {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(id)));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        let addr = listener.local_addr().expect("local addr");
        let served = Arc::new(AtomicU64::new(0));
        let failed_handshakes = Arc::new(AtomicU64::new(0));
        let name = Arc::<str>::from(name);
        let (counter, failed) = (Arc::clone(&served), Arc::clone(&failed_handshakes));
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, name, counter, failed) = (
                    acceptor.clone(),
                    Arc::clone(&name),
                    Arc::clone(&counter),
                    Arc::clone(&failed),
                );
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        failed.fetch_add(1, Ordering::Relaxed);
                        return;
                    };
                    let conn = tls.get_ref().1;
                    let sni: Arc<str> = conn.server_name().unwrap_or("-").into();
                    let alpn: Arc<str> = conn
                        .alpn_protocol()
                        .map_or_else(|| "-".into(), |p| String::from_utf8_lossy(p).into());
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        counter.fetch_add(1, Ordering::Relaxed);
                        let mut resp = Response::new(Full::new(Bytes::from(format!("{name}\n"))));
                        let h = resp.headers_mut();
                        let text = |s: &str| s.parse().expect("header value");
                        h.insert("x-sni", text(&sni));
                        h.insert("x-alpn", text(&alpn));
                        h.insert(
                            "x-host",
                            req.headers()
                                .get(http::header::HOST)
                                .cloned()
                                .unwrap_or_else(|| text("-")),
                        );
                        h.insert("x-target", text(&req.uri().to_string()));
                        async move { Ok::<_, Infallible>(resp) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Self {
            addr,
            served,
            failed_handshakes,
            task,
        }
    }
}
