//! Custom request headers (`target.headers`, `--header`), query parameters (`target.query`) and
//! the azure dialect, end to end: the real binary against the simulator, which records the paths,
//! queries and headers it saw. Every header reaches every request (the `/models` check, the
//! sizing probes, the warm-up, the measured requests, the metrics scrape beside the API); no
//! value reaches any file or console line the run writes; every header the tool owns is refused
//! before anything is sent.

mod common;

use std::path::{Path, PathBuf};

use anvil_load::mock::{MockServer, Profile};
use common::hostile::{Hostile, Reply, Step, json_answer, models_answer};
use common::{anvil, artifacts, check_artifact, check_records, run, text};
use serde_json::{Value, json};

fn fast() -> Profile {
    Profile::named("fast").expect("fast profile exists")
}

/// A small run's scenario with these `[target]` lines.
fn write_scenario(dir: &Path, target: &str) -> PathBuf {
    let path = dir.join("scenario.toml");
    std::fs::write(
        &path,
        format!(
            "[target]\nmodel = \"m\"\n{target}\n[run]\nrequests = 6\nseed = 3\n[load]\nconcurrency = 2\n[workload]\ncontext_tokens = 64\nmax_context_tokens = 4096\nmax_tokens = 24\ntokenizer = \"calibrate\"\n[serve]\nthinking_mode = \"disabled\"\n"
        ),
    )
    .unwrap();
    path
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// No secret in any file under `dir` nor in the console output.
fn assert_nowhere(secrets: &[&str], dir: &Path, console: &str) {
    for secret in secrets {
        assert!(!console.contains(secret), "the console shows {secret:?}:\n{console}");
        for file in files(dir) {
            let bytes = std::fs::read(&file).unwrap();
            assert!(!text(&bytes).contains(secret), "{} holds {secret:?}", file.display());
        }
    }
}

#[tokio::test]
async fn headers_and_query_reach_every_request_and_are_never_written() {
    let server = MockServer::start(fast()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(
        dir.path(),
        "metrics = true\nheaders = { \"X-Tenant\" = \"team-a\", \"X-Gateway-Key\" = { env = \"ANVIL_TEST_GATEWAY_KEY\" } }\nquery = { tenant = \"query-secret-4711\" }",
    );
    let out = dir.path().join("out");
    let records = out.join("records.ndjson");
    let mut cmd = anvil();
    cmd.arg(&scenario)
        .arg("--out")
        .arg(&out)
        .arg("--records")
        .arg(&records)
        .arg("--base-url")
        .arg(server.base_url())
        .args(["--header", "X-Route : blue-replica-7"])
        .env("ANVIL_TEST_GATEWAY_KEY", "gateway-secret-0815");
    let result = run(cmd).await;
    let console = format!("{}{}", text(&result.stdout), text(&result.stderr));
    assert!(result.status.success(), "{console}");

    let seen = server.seen();
    assert_eq!(seen.dropped, 0, "{seen:?}");
    for (name, value) in
        [("X-Tenant", "team-a"), ("X-Gateway-Key", "gateway-secret-0815"), ("X-Route", "blue-replica-7")]
    {
        assert_eq!(seen.header_count(name, value), seen.requests, "{name} on every request: {seen:?}");
    }
    // The /models check, the sizing probes and the measured requests, each with the query; the
    // metrics scrape beside the API gets the headers too (not the API's query).
    let models = seen.target_count("GET /v1/models?tenant=query-secret-4711");
    let posts = seen.target_count("POST /v1/chat/completions?tenant=query-secret-4711");
    let scrapes = seen.target_count("GET /metrics");
    assert!(models >= 1 && scrapes >= 1, "{seen:?}");
    assert!(posts > 6, "the 6 requests and at least one sizing probe: {seen:?}");
    assert_eq!(models + posts + scrapes, seen.requests, "{seen:?}");
    assert_eq!(server.stats().requests_received, posts);

    let paths = artifacts(&out);
    assert_eq!(paths.len(), 1);
    let a = check_artifact(&paths[0]);
    check_records(&records);
    assert_eq!(a["request_timings"].as_array().unwrap().len(), 6);
    // Names only, in the artifact's scenario.
    let target = &a["scenario"]["target"];
    assert_eq!(target["headers"], serde_json::json!(["X-Gateway-Key", "X-Route", "X-Tenant"]));
    assert_eq!(target["query"], serde_json::json!(["tenant"]));
    assert_nowhere(&["team-a", "gateway-secret-0815", "blue-replica-7", "query-secret-4711"], &out, &console);
    server.shutdown().await;
}

/// The configuration's fingerprint does not depend on the header values.
#[tokio::test]
async fn the_fingerprint_does_not_depend_on_header_values() {
    let server = MockServer::start(fast()).await.unwrap();
    let mut fingerprints = Vec::new();
    for value in ["first-value-1", "second-value-2"] {
        let dir = tempfile::tempdir().unwrap();
        let scenario = write_scenario(dir.path(), &format!("headers = {{ \"X-Tenant\" = \"{value}\" }}"));
        let mut cmd = anvil();
        cmd.arg(&scenario).arg("--out").arg(dir.path()).arg("--base-url").arg(server.base_url());
        let result = run(cmd).await;
        assert!(result.status.success(), "{}", text(&result.stderr));
        let a = check_artifact(&artifacts(dir.path())[0]);
        fingerprints.push(a["configuration_fingerprint"].clone());
    }
    assert!(fingerprints[0].is_string(), "{fingerprints:?}");
    assert_eq!(fingerprints[0], fingerprints[1]);
    server.shutdown().await;
}

#[tokio::test]
async fn headers_the_tool_owns_and_bad_values_are_refused_before_anything_is_sent() {
    let server = MockServer::start(fast()).await.unwrap();
    // (scenario lines, flags, the key named, words of the problem or fix)
    let cases: &[(&str, &[&str], &str, &str)] = &[
        ("headers = { Connection = \"close\" }", &[], "target.headers.Connection", "hop-by-hop"),
        ("headers = { \"Keep-Alive\" = \"x\" }", &[], "target.headers.Keep-Alive", "hop-by-hop"),
        ("headers = { \"Transfer-Encoding\" = \"x\" }", &[], "target.headers.Transfer-Encoding", "hop-by-hop"),
        ("headers = { TE = \"x\" }", &[], "target.headers.TE", "hop-by-hop"),
        ("headers = { Upgrade = \"x\" }", &[], "target.headers.Upgrade", "hop-by-hop"),
        ("headers = { Host = \"other\" }", &[], "target.headers.Host", "base_url"),
        ("headers = { \"Content-Length\" = \"5\" }", &[], "target.headers.Content-Length", "HTTP client"),
        ("headers = { \"Content-Type\" = \"text/plain\" }", &[], "target.headers.Content-Type", "target.api"),
        ("headers = { Accept = \"*/*\" }", &[], "target.headers.Accept", "target.api"),
        ("headers = { Authorization = \"Bearer SECRETVALUE1\" }", &[], "target.headers.Authorization", "api_key_env"),
        ("headers = { \"anthropic-version\" = \"x\" }", &[], "target.headers.anthropic-version", "anthropic_version"),
        (
            "api = \"messages\"\napi_key_env = \"ANVIL_TEST_KEY\"\nheaders = { \"X-Api-Key\" = \"SECRETVALUE1\" }",
            &[],
            "target.headers.X-Api-Key",
            "api_key_env",
        ),
        (
            "dialect = \"azure\"\napi_key_env = \"ANVIL_TEST_KEY\"\nheaders = { \"api-key\" = \"SECRETVALUE1\" }",
            &[],
            "target.headers.api-key",
            "api_key_env",
        ),
        ("headers = { \"X Tenant\" = \"a\" }", &[], "target.headers.X Tenant", "not a header name"),
        ("headers = { \"X-Tenant\" = \"SECRETVALUE1\\nX-Evil: 1\" }", &[], "target.headers.X-Tenant", "line break"),
        ("headers = { \"X-Tenant\" = \"SECRETVALUE1\\u0000\" }", &[], "target.headers.X-Tenant", "NUL"),
        ("headers = { \"X-Tenant\" = \"\" }", &[], "target.headers.X-Tenant", "empty"),
        ("headers = { \"X-Tenant\" = 5 }", &[], "target.headers.X-Tenant", "not text"),
        ("headers = { \"X-Tenant\" = \"a\", \"x-tenant\" = \"b\" }", &[], "target.headers.x-tenant", "ignore case"),
        (
            "headers = { \"X-Tenant\" = { env = \"ANVIL_TEST_UNSET_VARIABLE\" } }",
            &[],
            "target.headers.X-Tenant",
            "ANVIL_TEST_UNSET_VARIABLE",
        ),
        ("", &["--header", "X-Tenant SECRETVALUE1"], "target.headers", "colon"),
        ("", &["--header", "Connection: close"], "target.headers.Connection", "--header"),
        ("", &["--header", "X-A: 1", "--header", "x-a: 2"], "target.headers.x-a", "twice"),
        ("query = { k = { env = \"ANVIL_TEST_UNSET_VARIABLE\" } }", &[], "target.query.k", "ANVIL_TEST_UNSET_VARIABLE"),
        ("dialect = \"azure\"\napi = \"messages\"", &[], "target.api", "azure"),
    ];
    for (lines, flags, key, words) in cases {
        let dir = tempfile::tempdir().unwrap();
        let scenario = write_scenario(dir.path(), lines);
        // The azure dialect's base URL is the resource's endpoint.
        let base_url = if lines.contains("azure") { format!("http://{}", server.addr()) } else { server.base_url() };
        let mut cmd = anvil();
        cmd.arg(&scenario)
            .arg("--out")
            .arg(dir.path())
            .arg("--base-url")
            .arg(base_url)
            .args(*flags)
            .env("ANVIL_TEST_KEY", "key-secret-1234")
            .env_remove("ANVIL_TEST_UNSET_VARIABLE");
        let result = run(cmd).await;
        let stderr = text(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{lines} {flags:?}: {stderr}");
        assert!(stderr.contains("scenario.toml") && stderr.contains(&format!("`{key}`")), "{key}: {stderr}");
        assert!(stderr.contains(words) && stderr.contains("fix:"), "{key} ({words}): {stderr}");
        assert!(!stderr.contains("SECRETVALUE1") && !stderr.contains("key-secret-1234"), "{stderr}");
        assert!(artifacts(dir.path()).is_empty());
    }
    // The base URL's own query and target.query may not both name a parameter; the azure
    // dialect needs a deployment.
    let dir = tempfile::tempdir().unwrap();
    for (lines, base_url, key) in [
        ("query = { tenant = \"b\" }", format!("{}?tenant=a", server.base_url()), "target.query.tenant"),
        ("dialect = \"azure\"", format!("http://{}/openai/deployments/d", server.addr()), "target.base_url"),
    ] {
        let scenario = write_scenario(dir.path(), lines);
        let mut cmd = anvil();
        cmd.arg(&scenario).arg("--out").arg(dir.path()).arg("--base-url").arg(&base_url);
        let result = run(cmd).await;
        let stderr = text(&result.stderr);
        assert_eq!(result.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&format!("`{key}`")) && stderr.contains("fix:"), "{stderr}");
    }
    let scenario = dir.path().join("no-model.toml");
    std::fs::write(
        &scenario,
        "[target]\ndialect = \"azure\"\n[run]\nrequests = 2\n[workload]\ncontext_tokens = 64\nmax_context_tokens = 4096\nmax_tokens = 8\n",
    )
    .unwrap();
    let mut cmd = anvil();
    cmd.arg(&scenario).arg("--out").arg(dir.path()).arg("--base-url").arg(format!("http://{}", server.addr()));
    let result = run(cmd).await;
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`target.model`") && stderr.contains("deployment") && stderr.contains("--model"),
        "{stderr}"
    );
    assert_eq!(server.seen().requests, 0, "nothing sent: {:?}", server.seen());
    server.shutdown().await;
}

/// The azure dialect against the simulator serving Azure's paths: the deployment path with the
/// default `api-version`, the key in `api-key` (no bearer token), the deployment's missing
/// `/models` a note, not a failure; and the v1 form without `api-version`.
#[tokio::test]
async fn the_azure_dialect_speaks_to_a_deployment() {
    const KEY: &str = "azure-key-secret-42";
    let server = MockServer::start(fast()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(dir.path(), "dialect = \"azure\"\napi_key_env = \"ANVIL_TEST_AZURE_KEY\"");
    let scenario_text = std::fs::read_to_string(&scenario).unwrap().replace("model = \"m\"", "model = \"my-gpt\"");
    std::fs::write(&scenario, scenario_text).unwrap();
    let out = dir.path().join("out");
    let mut cmd = anvil();
    cmd.arg(&scenario)
        .arg("--out")
        .arg(&out)
        .arg("--base-url")
        .arg(format!("http://{}", server.addr()))
        .env("ANVIL_TEST_AZURE_KEY", KEY);
    let result = run(cmd).await;
    let console = format!("{}{}", text(&result.stdout), text(&result.stderr));
    assert!(result.status.success(), "{console}");
    assert!(console.contains("Azure OpenAI lists no models"), "{console}");

    let seen = server.seen();
    let version = anvil_load::plan::scenario::AZURE_API_VERSION;
    let posts = seen.target_count(&format!("POST /openai/deployments/my-gpt/chat/completions?api-version={version}"));
    assert!(posts > 6, "{seen:?}");
    assert_eq!(server.stats().requests_received, posts, "{seen:?}");
    assert!(seen.target_count("GET /openai/deployments/my-gpt/models?api-version=") >= 1, "{seen:?}");
    assert_eq!(seen.header_count("api-key", KEY), seen.requests, "{seen:?}");
    assert!(!seen.headers.keys().any(|h| h.starts_with("authorization")), "{seen:?}");
    let a = check_artifact(&artifacts(&out)[0]);
    assert_eq!(
        a["scenario"]["target"]["endpoint"]["base_url"],
        Value::String(format!("http://{}/openai/deployments/my-gpt?api-version={version}", server.addr()))
    );
    assert_eq!(a["scenario"]["target"]["dialect"], "azure");
    assert_nowhere(&[KEY], &out, &console);

    // The v1 API: the deployment's name in the body, no api-version.
    let before = server.seen();
    let out = dir.path().join("out-v1");
    let mut cmd = anvil();
    cmd.arg(&scenario)
        .arg("--out")
        .arg(&out)
        .arg("--base-url")
        .arg(format!("http://{}/openai/v1", server.addr()))
        .env("ANVIL_TEST_AZURE_KEY", KEY);
    let result = run(cmd).await;
    assert!(result.status.success(), "{}", text(&result.stderr));
    let seen = server.seen();
    let posts =
        seen.target_count("POST /openai/v1/chat/completions") - before.target_count("POST /openai/v1/chat/completions");
    assert!(posts > 6, "{seen:?}");
    assert!(!seen.targets.keys().any(|t| t.starts_with("POST /openai/v1/") && t.contains('?')), "{seen:?}");
    assert_eq!(seen.header_count("api-key", KEY), seen.requests, "{seen:?}");
    check_artifact(&artifacts(&out)[0]);
    server.shutdown().await;
}

/// A server that echoes every header value and the query it got, in its error messages, its
/// error type and a response header, and lists a model named after the tenant: none of it is
/// written.
#[tokio::test]
async fn a_server_echoing_the_header_values_gets_none_of_them_written() {
    let server = Hostile::start(|r| {
        let value = |name: &str| {
            r.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone()).unwrap_or_default()
        };
        if !r.is_generation() {
            return Reply::close(vec![Step::Send(models_answer(&["m"], false))]);
        }
        // One secret per field, so that each must be caught on its own.
        let body = json!({"error": {
            "message": format!("unknown tenant {}", value("x-tenant")),
            "type": value("x-gateway-key"),
            "code": value("x-route"),
        }});
        let header = format!("x-echo: {}\r\n", value("x-tenant"));
        Reply::close(vec![Step::Send(json_answer("400 Bad Request", &header, &body, false))])
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_scenario(
        dir.path(),
        "headers = { \"X-Tenant\" = \"tenant-echoed-77\", \"X-Gateway-Key\" = { env = \"ANVIL_TEST_GATEWAY_KEY\" } }\nquery = { sig = \"query-echoed-88\" }",
    );
    // No sizing probes: every request is refused.
    let estimate = std::fs::read_to_string(&scenario).unwrap().replace("\"calibrate\"", "\"estimate\"");
    std::fs::write(&scenario, estimate).unwrap();
    let out = dir.path().join("out");
    let records = out.join("records.ndjson");
    let mut cmd = anvil();
    cmd.arg(&scenario)
        .arg("--out")
        .arg(&out)
        .arg("--records")
        .arg(&records)
        .arg("--base-url")
        .arg(server.base_url())
        .args(["--header", "X-Route: route-echoed-99"])
        .env("ANVIL_TEST_GATEWAY_KEY", "gateway-echoed-66");
    let result = run(cmd).await;
    let console = format!("{}{}", text(&result.stdout), text(&result.stderr));
    let paths = artifacts(&out);
    assert_eq!(paths.len(), 1, "{console}");
    let a = check_artifact(&paths[0]);
    check_records(&records);
    assert_eq!(a["error_counts"]["http_400"], 6, "{console}");
    assert_nowhere(&["tenant-echoed-77", "gateway-echoed-66", "route-echoed-99", "query-echoed-88"], &out, &console);
}

/// `deploy kubernetes` writes the scenario into a ConfigMap: header and query values would be
/// readable there, so it refuses them, and prints nothing.
#[test]
fn deploy_refuses_headers_and_query_it_would_write_into_the_manifests() {
    let dir = tempfile::tempdir().unwrap();
    for (lines, key) in [
        ("base_url = \"http://engine:8000/v1\"\nheaders = { \"X-Tenant\" = \"deploy-secret-5\" }", "target.headers"),
        ("base_url = \"http://engine:8000/v1\"\nquery = { sig = \"deploy-secret-5\" }", "target.query"),
    ] {
        let file = write_scenario(dir.path(), lines);
        let o = anvil()
            .args(["deploy", "kubernetes", "--shards", "2", "--image", "anvil-load:dev", "--scenario"])
            .arg(&file)
            .output()
            .expect("the binary runs");
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{stderr}");
        assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
        assert!(stderr.contains(key) && !stderr.contains("deploy-secret-5"), "{stderr}");
    }
}
