//! A real etcd server (the Debian `etcd-server` package's binary) for the fleet tests:
//! it runs inside its own namespace, plugged into the test topology's switch, with a
//! temporary data directory; killed and its data removed on drop.

use std::{
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use etcd_client::{Client, CompactionOptions};

use crate::{Netns, lbd::TempDir};

/// The etcd host's address on the topology's segment.
pub const ETCD_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 5);
/// Its IPv6 address.
pub const ETCD_ADDR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 5);
/// The client port.
pub const ETCD_PORT: u16 = 2379;

/// Path of the etcd binary: `$ETCD_BIN`, else `etcd` from `PATH`.
fn etcd_binary() -> String {
    std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into())
}

/// TLS material for a mutual-TLS etcd: a CA, a server certificate for [`ETCD_ADDR`]
/// and a client certificate, made with `openssl` in a directory.
#[derive(Clone, Debug)]
pub struct EtcdTls {
    /// The directory holding `ca.pem`, `server.pem`, `server-key.pem`, `client.pem`
    /// and `client-key.pem`.
    pub dir: std::path::PathBuf,
}

impl EtcdTls {
    /// Generates the CA and both certificates in `dir`.
    pub fn generate(dir: &std::path::Path) -> Self {
        let d = |f: &str| dir.join(f).display().to_string();
        let openssl = |args: &[&str]| crate::run("openssl", args);
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=lbtest-ca",
            "-keyout",
            &d("ca-key.pem"),
            "-out",
            &d("ca.pem"),
        ]);
        for (name, ext) in [
            (
                "server",
                format!("subjectAltName=IP:{ETCD_ADDR}\nextendedKeyUsage=serverAuth\n"),
            ),
            ("client", "extendedKeyUsage=clientAuth\n".to_owned()),
        ] {
            std::fs::write(dir.join(format!("{name}.ext")), ext).expect("ext file");
            openssl(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &d(&format!("{name}-key.pem")),
                "-out",
                &d(&format!("{name}.csr")),
            ]);
            openssl(&[
                "x509",
                "-req",
                "-in",
                &d(&format!("{name}.csr")),
                "-CA",
                &d("ca.pem"),
                "-CAkey",
                &d("ca-key.pem"),
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                &d(&format!("{name}.ext")),
                "-out",
                &d(&format!("{name}.pem")),
            ]);
        }
        Self {
            dir: dir.to_owned(),
        }
    }

    /// A file in the directory, as a string for configs.
    pub fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// A running etcd in `ns`.
#[derive(Debug)]
pub struct EtcdServer {
    ns_name: String,
    dir: TempDir,
    child: Option<Child>,
    tls: Option<EtcdTls>,
    /// User and password once authentication is on.
    auth: Option<(String, String)>,
}

impl EtcdServer {
    /// Starts etcd in `ns` (which must hold [`ETCD_ADDR`]) and waits until it answers.
    pub fn start(ns: &Netns) -> Self {
        Self::start_with(ns, None)
    }

    /// Like [`EtcdServer::start`], serving clients over mutual TLS with `tls`.
    pub fn start_with(ns: &Netns, tls: Option<EtcdTls>) -> Self {
        let mut server = Self {
            ns_name: ns.name().to_owned(),
            dir: TempDir::new("etcd"),
            child: None,
            tls,
            auth: None,
        };
        server.spawn(ns);
        server
    }

    /// The plain-HTTP client URL.
    pub fn url() -> String {
        format!("http://{ETCD_ADDR}:{ETCD_PORT}")
    }

    /// The client URL this server answers on.
    pub fn client_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{ETCD_ADDR}:{ETCD_PORT}")
    }

    /// Turns authentication on with a `root` user of `password`; later operations of
    /// this guard log in as that user.
    pub fn enable_auth(&mut self, password: &str) {
        let pw = password.to_owned();
        self.try_op(move |c| {
            Box::pin(async move {
                c.user_add("root", pw, None).await?;
                let _ = c.role_add("root").await;
                c.user_grant_role("root", "root").await?;
                c.auth_enable().await?;
                Ok(())
            })
        })
        .expect("enable etcd auth");
        self.auth = Some(("root".into(), password.to_owned()));
    }

    fn spawn(&mut self, ns: &Netns) {
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).expect("etcd log");
        let url = self.client_url();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns_name, &etcd_binary()]);
        if let Some(tls) = &self.tls {
            cmd.args(["--cert-file", &tls.file("server.pem")])
                .args(["--key-file", &tls.file("server-key.pem")])
                .args(["--trusted-ca-file", &tls.file("ca.pem")])
                .arg("--client-cert-auth");
        }
        let child = cmd
            .args(["--name", "lbtest"])
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", "http://127.0.0.1:2380"])
            .args(["--initial-advertise-peer-urls", "http://127.0.0.1:2380"])
            .args(["--initial-cluster", "lbtest=http://127.0.0.1:2380"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .expect("spawn etcd (install the etcd-server package: cargo xtask setup)");
        self.child = Some(child);
        let target = SocketAddr::from((ETCD_ADDR, ETCD_PORT));
        let ready = ns.run(move || {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(20) {
                if TcpStream::connect_timeout(&target, Duration::from_millis(200)).is_ok() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        });
        assert!(ready, "etcd did not listen within 20 s:\n{}", self.log());
        // Listening is not yet serving: wait for a read to succeed.
        let start = Instant::now();
        while self
            .try_op(|c| Box::pin(async move { c.get("probe", None).await.map(|_| ()) }))
            .is_err()
        {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "etcd not serving:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// etcd's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// Kills etcd (SIGKILL, as a crash) and waits for it; its data stays.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same data.
    pub fn restart(&mut self, ns: &Netns) {
        self.kill();
        self.spawn(ns);
    }

    /// Runs one client operation against the server (from inside its namespace).
    fn try_op<T: Send + 'static>(
        &self,
        op: impl FnOnce(
            &mut Client,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<T, etcd_client::Error>> + Send + '_>,
        > + Send
        + 'static,
    ) -> Result<T, String> {
        let path = format!("/run/netns/{}", self.ns_name);
        let url = self.client_url();
        let mut opts =
            etcd_client::ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
        if let Some(tls) = &self.tls {
            let read = |f: &str| std::fs::read(tls.dir.join(f)).expect("TLS file");
            opts = opts.with_tls(
                etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(read("ca.pem")))
                    .identity(etcd_client::Identity::from_pem(
                        read("client.pem"),
                        read("client-key.pem"),
                    )),
            );
        }
        if let Some((user, password)) = &self.auth {
            opts = opts.with_user(user.clone(), password.clone());
        }
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).map_err(|e| e.to_string())?;
            // SAFETY: setns on an open namespace fd affects only this thread.
            let rc =
                unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(format!("setns: {}", std::io::Error::last_os_error()));
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async move {
                let mut client = Client::connect([url], Some(opts))
                    .await
                    .map_err(|e| e.to_string())?;
                op(&mut client).await.map_err(|e| e.to_string())
            })
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    /// Puts `value` at `key`; returns the new revision.
    pub fn put(&self, key: &str, value: &str) -> i64 {
        let (key, value) = (key.to_owned(), value.to_owned());
        self.try_op(move |c| {
            Box::pin(async move {
                let r = c.put(key, value, None).await?;
                Ok(r.header().map_or(0, |h| h.revision()))
            })
        })
        .expect("etcd put")
    }

    /// Puts every pair over one connection; returns the last revision.
    pub fn put_many(&self, pairs: Vec<(String, String)>) -> i64 {
        self.try_op(move |c| {
            Box::pin(async move {
                let mut rev = 0;
                for (k, v) in pairs {
                    rev = c
                        .put(k, v, None)
                        .await?
                        .header()
                        .map_or(rev, |h| h.revision());
                }
                Ok(rev)
            })
        })
        .expect("etcd put")
    }

    /// Deletes `key`; returns the new revision.
    pub fn delete(&self, key: &str) -> i64 {
        let key = key.to_owned();
        self.try_op(move |c| {
            Box::pin(async move {
                let r = c.delete(key, None).await?;
                Ok(r.header().map_or(0, |h| h.revision()))
            })
        })
        .expect("etcd delete")
    }

    /// Compacts the history up to the current revision (physically).
    pub fn compact(&self) {
        self.try_op(move |c| {
            Box::pin(async move {
                let rev = c
                    .get("probe", None)
                    .await?
                    .header()
                    .map_or(0, |h| h.revision());
                c.compact(rev, Some(CompactionOptions::new().with_physical()))
                    .await?;
                Ok(())
            })
        })
        .expect("etcd compact");
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Gives `ns` the etcd host's addresses on the switch of a topology.
pub fn plug_etcd_host(switch: &Netns, ns: &Netns) {
    crate::topology::plug(switch, ns, "p-etcd", ETCD_ADDR, ETCD_ADDR6);
}
