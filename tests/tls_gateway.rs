//! `[target.tls]` against a real gateway: Debian's nginx started by the test on loopback as a
//! TLS-terminating reverse proxy in front of the simulator, with a CA and certificates the test
//! makes with `openssl` (see `common/nginx.rs`). Each run succeeds with the right trust (the
//! artifact's counts equal the simulator's own) and fails without it with exit code 1 and the
//! TLS reason named. No run writes a key's or a certificate's contents anywhere.

mod common;
#[path = "common/nginx.rs"]
mod nginx;

use std::path::{Path, PathBuf};
use std::process::Output;

use anvil_load::mock::{MockServer, Profile};
use common::{anvil, artifacts, check_artifact, run, text};
use nginx::{Gateway, OTHER_NAME, Server};
use serde_json::Value;

const REQUESTS: u64 = 6;

/// A simulator and nginx in front of it, in `dir`.
async fn gateway(dir: &Path) -> (MockServer, Gateway) {
    let sim = MockServer::start(Profile::named("fast").unwrap()).await.unwrap();
    let upstream = sim.addr();
    let gw = tokio::task::spawn_blocking({
        let dir = dir.join("nginx");
        move || Gateway::start(&dir, upstream)
    })
    .await
    .expect("nginx started");
    (sim, gw)
}

/// A scenario with `tls` as its `[target.tls]` table (none when empty), a few requests.
fn scenario(dir: &Path, tls: &str, extra_target: &str) -> PathBuf {
    let path = dir.join("scenario.toml");
    let tls = if tls.is_empty() { String::new() } else { format!("[target.tls]\n{tls}\n") };
    std::fs::write(
        &path,
        format!(
            "[target]\n{extra_target}\n{tls}[run]\nrequests = {REQUESTS}\nseed = 3\n[load]\nconcurrency = 2\n\
             [workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 16\n"
        ),
    )
    .unwrap();
    path
}

/// The binary against `base_url` with `scenario`, output in `dir/out`.
async fn anvil_run(dir: &Path, scenario: &Path, base_url: &str, more: &[&str]) -> Output {
    let mut cmd = anvil();
    cmd.arg(scenario).args(["--base-url", base_url, "--no-progress", "-o"]).arg(dir.join("out")).args(more);
    run(cmd).await
}

/// A quoted path for TOML.
fn toml_path(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

/// The run succeeded, its one artifact holds, and its counts are the simulator's own.
fn succeeded(dir: &Path, out: &Output, sim: &MockServer) -> Value {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let files = artifacts(&dir.join("out"));
    assert_eq!(files.len(), 1, "{files:?}");
    let a = check_artifact(&files[0]);
    let stats = sim.stats();
    let probes = a["prompt_sizing"]["probes"].as_array().map_or(0, Vec::len) as u64;
    assert_eq!((a["completed"].as_u64(), a["failed"].as_u64()), (Some(REQUESTS), Some(0)), "{}", a["failures"]);
    assert_eq!(stats.requests_completed, REQUESTS + probes, "every request, through nginx, reached the simulator");
    let records = a["request_timings"].as_array().unwrap();
    let prompt: u64 = records.iter().map(|r| r["prompt_tokens"].as_u64().unwrap()).sum();
    let probe_tokens: u64 = a["prompt_sizing"]["probes"]
        .as_array()
        .map_or(0, |p| p.iter().filter_map(|p| p["server_prompt_tokens"].as_u64()).sum());
    assert_eq!(stats.prompt_tokens, prompt + probe_tokens, "{}", a["prompt_sizing"]);
    a
}

/// The run failed before any load with exit code 1, naming `reason`; nothing reached the
/// simulator and no artifact was written.
fn refused(dir: &Path, out: &Output, sim: &MockServer, reason: &str) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(reason), "expected {reason:?} in:\n{stderr}");
    assert_eq!(sim.stats().requests_received, 0, "nothing was generated");
    let out_dir = dir.join("out");
    assert!(!out_dir.exists() || artifacts(&out_dir).is_empty());
    stderr
}

/// No file under `dir/out` holds a line of any key or certificate, nor the key file's path.
fn no_pem_written(dir: &Path, gw: &Gateway, output: &Output) {
    let secrets = gw.pki.secret_lines();
    let key_path = gw.pki.client_key().display().to_string();
    let mut texts = vec![("stdout".to_string(), text(&output.stdout)), ("stderr".to_string(), text(&output.stderr))];
    for entry in walk(&dir.join("out")) {
        texts
            .push((entry.display().to_string(), String::from_utf8_lossy(&std::fs::read(&entry).unwrap()).into_owned()));
    }
    assert!(texts.len() > 2, "the run wrote files");
    for (name, body) in &texts {
        for line in &secrets {
            assert!(!body.contains(line.as_str()), "{name} holds a line of a PEM file");
        }
        assert!(!body.contains(&key_path), "{name} names the client key's path");
        assert!(!body.contains("PRIVATE KEY"), "{name} holds a private key");
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() { out.extend(walk(&path)) } else { out.push(path) }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_ca_file_succeeds_and_without_it_the_unknown_ca_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (sim, gw) = gateway(dir.path()).await;
    let url = gw.base_url(Server::Tls);

    // Without [target.tls]: the bundled WebPKI roots do not know the test's CA.
    let plain = dir.path().join("plain");
    let out = anvil_run(&plain, &scenario(dir.path(), "", ""), &url, &[]).await;
    let stderr = refused(&plain, &out, &sim, "signed by an unknown CA");
    assert!(stderr.contains("target.tls.ca_file"), "the fix is named: {stderr}");

    // The system's trust store does not know it either.
    let system = dir.path().join("system");
    let out = anvil_run(&system, &scenario(dir.path(), "system_roots = true", ""), &url, &[]).await;
    refused(&system, &out, &sim, "signed by an unknown CA");

    // Another CA's file does not help against this server.
    let other = dir.path().join("other");
    let tls = format!("ca_file = {}", toml_path(&gw.pki.other_ca()));
    let out = anvil_run(&other, &scenario(dir.path(), &tls, ""), &url, &[]).await;
    refused(&other, &out, &sim, "signed by an unknown CA");

    // The right CA: the measured requests, the server check and the metrics scraper all trust it.
    let good = dir.path().join("good");
    let tls = format!("ca_file = {}", toml_path(&gw.pki.ca()));
    let out = anvil_run(&good, &scenario(dir.path(), &tls, "metrics = true"), &url, &[]).await;
    let a = succeeded(&good, &out, &sim);
    let t = &a["scenario"]["target"]["tls"];
    assert_eq!(t["roots"], "webpki+ca_file", "{t}");
    assert_eq!(t["ca_file_certificates"], 1, "{t}");
    assert_eq!(t["client_certificate"], false, "{t}");
    assert_eq!(t["insecure_skip_verify"], false, "{t}");
    assert!(!a.to_string().contains("ca.pem"), "the CA file's path is not written");
    assert_eq!(a["server_metrics"]["complete"], true, "scraped over TLS: {}", a["server_metrics"]);
    no_pem_written(&good, &gw, &out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_named_and_server_name_accepts_it() {
    let dir = tempfile::tempdir().unwrap();
    let (sim, gw) = gateway(dir.path()).await;
    let url = gw.base_url(Server::OtherName);
    let ca = format!("ca_file = {}", toml_path(&gw.pki.ca()));

    let mismatch = dir.path().join("mismatch");
    let out = anvil_run(&mismatch, &scenario(dir.path(), &ca, ""), &url, &[]).await;
    let stderr = refused(&mismatch, &out, &sim, "hostname mismatch");
    assert!(stderr.contains("target.tls.server_name"), "{stderr}");

    let named = dir.path().join("named");
    let tls = format!("{ca}\nserver_name = \"{OTHER_NAME}\"");
    let out = anvil_run(&named, &scenario(dir.path(), &tls, ""), &url, &[]).await;
    let a = succeeded(&named, &out, &sim);
    assert_eq!(a["scenario"]["target"]["tls"]["server_name"], OTHER_NAME);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_a_client_certificate_gets_one_and_says_so_without() {
    let dir = tempfile::tempdir().unwrap();
    let (sim, gw) = gateway(dir.path()).await;
    let url = gw.base_url(Server::ClientCertificate);
    let ca = format!("ca_file = {}", toml_path(&gw.pki.ca()));

    let without = dir.path().join("without");
    let out = anvil_run(&without, &scenario(dir.path(), &ca, ""), &url, &[]).await;
    let stderr = refused(&without, &out, &sim, "requires a client certificate");
    assert!(stderr.contains("target.tls.client_cert"), "{stderr}");

    // A certificate the server's client CA did not sign.
    let wrong = dir.path().join("wrong");
    let tls = format!(
        "{ca}\nclient_cert = {}\nclient_key = {}",
        toml_path(&gw.pki.dir.join("other-server.pem")),
        toml_path(&gw.pki.dir.join("other-server.key"))
    );
    let out = anvil_run(&wrong, &scenario(dir.path(), &tls, ""), &url, &[]).await;
    refused(&wrong, &out, &sim, "refused the client certificate");

    let with = dir.path().join("with");
    let tls = format!(
        "{ca}\nclient_cert = {}\nclient_key = {}",
        toml_path(&gw.pki.client_cert()),
        toml_path(&gw.pki.client_key())
    );
    let out = anvil_run(&with, &scenario(dir.path(), &tls, ""), &url, &["--set", "run.records=true"]).await;
    let a = succeeded(&with, &out, &sim);
    assert_eq!(a["scenario"]["target"]["tls"]["client_certificate"], true);
    no_pem_written(&with, &gw, &out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_skip_verify_reaches_a_server_of_an_unknown_ca_and_says_so_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let (sim, gw) = gateway(dir.path()).await;
    let url = gw.base_url(Server::OtherCa);
    let out = anvil_run(dir.path(), &scenario(dir.path(), "insecure_skip_verify = true", ""), &url, &[]).await;
    let a = succeeded(dir.path(), &out, &sim);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("warning: target.tls.insecure_skip_verify = true"), "{stderr}");
    let codes: Vec<&str> = a["warnings"].as_array().unwrap().iter().filter_map(|w| w["code"].as_str()).collect();
    assert!(codes.contains(&"tls_verification_off"), "{codes:?}");
    assert_eq!(a["scenario"]["target"]["tls"]["insecure_skip_verify"], true);
    assert_eq!(a["scenario"]["target"]["tls"]["roots"], "none");
}

/// A gateway that answers 401 without its own header: refused before any load without it (the
/// status named), measured with `--header`, whose value is written nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_checks_a_header_is_passed_with_header() {
    let dir = tempfile::tempdir().unwrap();
    let (sim, gw) = gateway(dir.path()).await;
    let url = gw.base_url(Server::Header);
    let ca = format!("ca_file = {}", toml_path(&gw.pki.ca()));
    let without = anvil_run(dir.path(), &scenario(dir.path(), &ca, ""), &url, &[]).await;
    let stderr = text(&without.stderr);
    assert_ne!(without.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("401"), "the gateway's status is named: {stderr}");
    assert_eq!(sim.stats().requests_received, 0, "nothing reached the server behind the gateway");
    let header = format!("X-Gateway-Token: {}", nginx::GATEWAY_TOKEN);
    let out = anvil_run(dir.path(), &scenario(dir.path(), &ca, ""), &url, &["--header", &header]).await;
    succeeded(dir.path(), &out, &sim);
    for file in walk(&dir.path().join("out")) {
        let body = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        assert!(!body.contains(nginx::GATEWAY_TOKEN), "{} holds the header's value", file.display());
    }
}

/// Each bad `[target.tls]`, with the words its refusal must hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_settings_exit_2_naming_the_key_and_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let pki = tokio::task::spawn_blocking({
        let dir = dir.path().join("pki");
        move || nginx::Pki::make(&dir)
    })
    .await
    .unwrap();
    let p = |name: &str| toml_path(&pki.dir.join(name));
    let missing = pki.dir.join("missing.pem");
    let cases: Vec<(String, &str, Vec<String>)> = vec![
        (
            format!("ca_file = {}", toml_path(&missing)),
            "https",
            vec!["target.tls.ca_file".into(), missing.display().to_string()],
        ),
        (
            format!("ca_file = {}", p("client.key")),
            "https",
            vec!["target.tls.ca_file".into(), "holds no certificate".into()],
        ),
        (format!("client_cert = {}", p("client.pem")), "https", vec!["target.tls.client_key".into(), "both".into()]),
        (
            format!("client_cert = {}\nclient_key = {}", p("client.pem"), p("ca.pem")),
            "https",
            vec!["target.tls.client_key".into(), "no private key".into()],
        ),
        (
            format!("client_cert = {}\nclient_key = {}", p("client.pem"), p("server.key")),
            "https",
            vec!["target.tls.client_key".into(), "is not the private key".into()],
        ),
        (format!("ca_file = {}", p("ca.pem")), "http", vec!["target.tls".into(), "https://".into()]),
        (
            format!("ca_file = {}\ninsecure_skip_verify = true", p("ca.pem")),
            "https",
            vec!["insecure_skip_verify".into()],
        ),
        ("server_name = \"not a name\"".to_string(), "https", vec!["target.tls.server_name".into()]),
        ("ca_flie = \"x.pem\"".to_string(), "https", vec!["ca_flie".into()]),
    ];
    let secrets = pki.secret_lines();
    for (tls, scheme, words) in cases {
        let file = scenario(dir.path(), &tls, "");
        let mut cmd = anvil();
        cmd.arg(&file).args(["--base-url", &format!("{scheme}://127.0.0.1:9/v1"), "-o"]).arg(dir.path().join("out"));
        let out = run(cmd).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{tls}: {stderr}");
        for word in &words {
            assert!(stderr.contains(word.as_str()), "{tls}: {word:?} not in {stderr}");
        }
        assert!(secrets.iter().all(|l| !stderr.contains(l.as_str())), "{tls}: a PEM line in {stderr}");
        assert!(!dir.path().join("out").exists(), "nothing written");
    }
    // The embedded simulator speaks plain HTTP only.
    let file = scenario(dir.path(), &format!("ca_file = {}", p("ca.pem")), "");
    let mut cmd = anvil();
    cmd.arg(&file).arg("-o").arg(dir.path().join("out"));
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("target.tls"), "{}", text(&out.stderr));
}
