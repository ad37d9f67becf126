//! A real gateway for the tests: Debian's `nginx`, started on loopback as a TLS-terminating
//! reverse proxy in front of a simulator, with certificates made by `openssl` for the test.
//!
//! Everything lives in one temporary directory (configuration, certificates, logs, nginx's
//! temporary files, its pid file), so it runs as root without touching `/var`. nginx runs in the
//! foreground as the test's child (`daemon off; master_process off;`) and is killed when the
//! [`Gateway`] is dropped. A machine without nginx fails the test, saying how to install it.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The header value server (c) requires in `X-Gateway-Token`.
pub const GATEWAY_TOKEN: &str = "s3cret";
/// The only name server (d)'s certificate is issued for.
pub const OTHER_NAME: &str = "llm.internal.test";

/// The certificates of a test: a CA and its server certificate for `localhost` and
/// `127.0.0.1`, the same CA's certificate for [`OTHER_NAME`] only, another CA and its server
/// certificate, a client CA and its client certificate.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
    pub fn other_ca(&self) -> PathBuf {
        self.dir.join("other-ca.pem")
    }
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("client.pem")
    }
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client.key")
    }
    /// Every private key's and certificate's PEM body lines (long enough to be unique), which no
    /// file a run writes may hold.
    pub fn secret_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for entry in std::fs::read_dir(&self.dir).expect("the PKI directory") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|x| x == "pem" || x == "key") {
                let text = std::fs::read_to_string(&path).expect("a PEM file");
                lines.extend(text.lines().filter(|l| l.len() >= 40 && !l.starts_with("-----")).map(str::to_string));
            }
        }
        assert!(!lines.is_empty());
        lines
    }

    /// Make every certificate in `dir` with the `openssl` command line.
    pub fn make(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).expect("the PKI directory");
        let pki = Pki { dir: dir.to_path_buf() };
        pki.ca_named("ca", "anvil test CA");
        pki.ca_named("other-ca", "anvil other CA");
        pki.ca_named("client-ca", "anvil client CA");
        pki.leaf("server", "ca", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1", "serverAuth");
        pki.leaf("named", "ca", OTHER_NAME, &format!("subjectAltName=DNS:{OTHER_NAME}"), "serverAuth");
        pki.leaf("other-server", "other-ca", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1", "serverAuth");
        pki.leaf("client", "client-ca", "anvil-load client", "subjectAltName=DNS:client.anvil.test", "clientAuth");
        pki
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .expect("openssl runs (apt-get install openssl)");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn ca_named(&self, name: &str, cn: &str) {
        let (key, pem, subject) = (format!("{name}.key"), format!("{name}.pem"), format!("/CN={cn}"));
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &pem,
            "-days",
            "2",
            "-subj",
            &subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
    }

    fn leaf(&self, name: &str, ca: &str, cn: &str, san: &str, usage: &str) {
        let (key, csr, pem, ext) =
            (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"), format!("{name}.ext"));
        let subject = format!("/CN={cn}");
        std::fs::write(
            self.dir.join(&ext),
            format!("{san}\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n"),
        )
        .expect("the extensions file");
        self.openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &subject,
        ]);
        let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &ext,
        ]);
    }
}

/// The servers nginx runs, each on its own loopback port, all proxying to the simulator.
#[derive(Debug, Clone, Copy)]
pub enum Server {
    /// (a) The CA's certificate for localhost and 127.0.0.1.
    Tls,
    /// (b) As (a), and a client certificate signed by the client CA is required.
    ClientCertificate,
    /// (c) As (a), and `X-Gateway-Token: s3cret` is required (401 otherwise).
    Header,
    /// (d) The CA's certificate for [`OTHER_NAME`] only.
    OtherName,
    /// (e) A certificate of the other CA.
    OtherCa,
}

const SERVERS: [Server; 5] =
    [Server::Tls, Server::ClientCertificate, Server::Header, Server::OtherName, Server::OtherCa];

/// nginx running in front of a simulator; killed on drop.
pub struct Gateway {
    pub pki: Pki,
    ports: Vec<u16>,
    child: Child,
    dir: PathBuf,
}

impl Gateway {
    /// nginx in `dir`, proxying to `upstream` (`127.0.0.1:port` of the simulator).
    pub fn start(dir: &Path, upstream: SocketAddr) -> Gateway {
        let nginx = nginx_binary();
        let pki = Pki::make(&dir.join("pki"));
        let ports: Vec<u16> = SERVERS.iter().map(|_| free_port()).collect();
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(dir, &pki, &ports, upstream)).expect("nginx.conf");
        let child = Command::new(&nginx)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nginx starts");
        let mut gateway = Gateway { pki, ports, child, dir: dir.to_path_buf() };
        gateway.wait_until_listening();
        gateway
    }

    /// The base URL of `server` (`https://127.0.0.1:port/v1`).
    pub fn base_url(&self, server: Server) -> String {
        format!("https://127.0.0.1:{}/v1", self.port(server))
    }

    pub fn port(&self, server: Server) -> u16 {
        self.ports[server as usize]
    }

    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default();
                panic!("nginx exited ({status}) before listening:\n{log}");
            }
            let up = self.ports.iter().all(|p| TcpStream::connect(("127.0.0.1", *p)).is_ok());
            if up {
                return;
            }
            assert!(Instant::now() < deadline, "nginx did not listen within 15 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The nginx binary, or a failure that says how to install it: never a skip.
fn nginx_binary() -> PathBuf {
    let candidates = ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx", "/usr/local/bin/nginx"];
    let found = candidates.iter().map(PathBuf::from).find(|p| p.exists()).or_else(|| {
        let out = Command::new("sh").args(["-c", "command -v nginx"]).output().ok()?;
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !path.is_empty()).then(|| PathBuf::from(path))
    });
    let Some(nginx) = found else { panic!("nginx is not installed: apt-get install nginx") };
    let version = Command::new(&nginx).arg("-V").output().expect("nginx -V runs");
    let text = String::from_utf8_lossy(&version.stderr).into_owned() + &String::from_utf8_lossy(&version.stdout);
    assert!(
        text.contains("http_ssl_module"),
        "{} has no TLS (http_ssl_module): apt-get install nginx\n{text}",
        nginx.display()
    );
    nginx
}

/// A loopback port free right now (bound, then released for nginx).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

fn config(dir: &Path, pki: &Pki, ports: &[u16], upstream: SocketAddr) -> String {
    let d = dir.display();
    let p = pki.dir.display();
    let mut servers = String::new();
    for (server, port) in SERVERS.iter().zip(ports) {
        let (cert, extra) = match server {
            Server::Tls => ("server", String::new()),
            Server::ClientCertificate => {
                ("server", format!("ssl_client_certificate {p}/client-ca.pem;\n        ssl_verify_client on;\n"))
            }
            Server::Header => {
                ("server", format!("if ($http_x_gateway_token != \"{GATEWAY_TOKEN}\") {{ return 401; }}\n"))
            }
            Server::OtherName => ("named", String::new()),
            Server::OtherCa => ("other-server", String::new()),
        };
        servers.push_str(&format!(
            "    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {p}/{cert}.pem;
        ssl_certificate_key {p}/{cert}.key;
        {extra}
        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 60s;
        }}
    }}
"
        ));
    }
    format!(
        "daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_requests 100000;
{servers}}}
"
    )
}
