//! Reports as a person sees them: the reports of the demo, a sweep, a capacity search, a soak
//! and two runs of the sweep overlaid (small, bounded runs against the embedded simulator) are
//! opened in a real headless Chromium (Debian's `chromium` package; `.ci/run` installs it), which
//! prints the DOM it built, logs every network request it made and takes screenshots under
//! `target/report-screenshots/`: the whole page and the first 1400×900 screen, where the search's
//! capacity must be (measured by the page's own geometry). Each page must have every plot's SVG with data points, make no
//! network request at all, and log no console message (a refused load, a parse error).
//!
//! A missing Chromium fails the test with the command that installs it: a browser test that
//! skips itself would pass without ever having looked.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{anvil, artifacts, check_artifact, manifest_dir, run, scenario, text};
use serde_json::Value;

const INSTALL_HINT: &str = "install Debian's chromium package: apt-get update && apt-get install -y --no-install-recommends chromium (.ci/run does this), or point ANVIL_CHROMIUM at a Chromium binary";

/// The Chromium binary: `ANVIL_CHROMIUM`, else `chromium` on the PATH.
fn chromium_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("ANVIL_CHROMIUM") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join("chromium")).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!("chromium is not installed, so reports cannot be checked in a browser: {INSTALL_HINT}")
    })
}

/// What Chromium saw of one page.
struct Seen {
    dom: String,
    /// Console messages (CSP refusals, errors) from Chromium's log.
    console: Vec<String>,
    /// URLs the page asked the network for (the browser's own background traffic left out).
    requests: Vec<String>,
}

/// Run headless Chromium on a file with `extra` arguments, bounded in time; its own profile
/// directory keeps parallel runs apart, and every host name resolves to nothing.
fn chromium(page: &Path, extra: &[String], scratch: &Path) -> (String, String) {
    let profile = tempfile::tempdir_in(scratch).unwrap();
    let mut child = Command::new(chromium_binary())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-sync"])
        .args(["--disable-extensions", "--disable-default-apps", "--disable-breakpad"])
        .arg("--host-resolver-rules=MAP * ~NOTFOUND")
        .args(["--enable-logging=stderr", "--v=0"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("chromium does not start ({e}): {INSTALL_HINT}"));
    // Drain both pipes on threads so a chatty browser never blocks on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).ok();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).ok();
        s
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("chromium did not finish {} within 90 s", page.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.success(), "chromium failed on {} ({status}):\n{err}", page.display());
    (out, err)
}

/// The DOM, console and network requests of a page.
fn open_dom(page: &Path, scratch: &Path) -> Seen {
    let netlog = scratch.join(format!("{}.netlog.json", page.file_stem().unwrap().to_string_lossy()));
    let (dom, err) = chromium(page, &["--dump-dom".into(), format!("--log-net-log={}", netlog.display())], scratch);
    let console = err.lines().filter(|l| l.contains(":CONSOLE")).map(str::to_string).collect();
    Seen { dom, console, requests: page_requests(&netlog) }
}

/// [`open_dom`], and a screenshot of the page at `png`.
fn open(page: &Path, png: &Path, scratch: &Path) -> Seen {
    let seen = open_dom(page, scratch);
    std::fs::remove_file(png).ok();
    chromium(page, &["--window-size=1280,7000".into(), format!("--screenshot={}", png.display())], scratch);
    let size = std::fs::metadata(png).map(|m| m.len()).unwrap_or(0);
    assert!(size > 20_000, "no real screenshot of {} at {} ({size} bytes)", page.display(), png.display());
    seen
}

/// The first screen a person sees: a 1400×900 screenshot of the page at `png`.
fn first_screen(page: &Path, png: &Path, scratch: &Path) {
    std::fs::remove_file(png).ok();
    chromium(
        page,
        &[format!("--window-size={FIRST_SCREEN_W},{FIRST_SCREEN_H}"), format!("--screenshot={}", png.display())],
        scratch,
    );
    let size = std::fs::metadata(png).map(|m| m.len()).unwrap_or(0);
    assert!(size > 20_000, "no real screenshot of {} at {} ({size} bytes)", page.display(), png.display());
}

const FIRST_SCREEN_W: u32 = 1400;
const FIRST_SCREEN_H: u32 = 900;

/// Where the answer's number sits on the page in a 1400×900 window, by the page's own geometry:
/// a copy of the page (the report itself carries no script, and its Content-Security-Policy
/// would refuse one) gets a script that writes the number's bounding box into the DOM, which
/// Chromium then prints. Returns (bottom edge in px from the top, the number's text).
fn answer_position(page: &Path, scratch: &Path) -> (f64, String) {
    let html = std::fs::read_to_string(page).unwrap();
    let csp = html.find("<meta http-equiv=\"Content-Security-Policy\"").expect("the page has its CSP");
    let end = csp + html[csp..].find('>').unwrap() + 1;
    let probe = format!(
        "{}{}",
        &html[..csp],
        html[end..].replace(
            "</body>",
            "<script>const v = document.querySelector('.answer .value'); const r = v.getBoundingClientRect(); \
             document.body.setAttribute('data-answer', r.bottom + '|' + v.textContent);</script></body>"
        )
    );
    let copy = scratch.join("first-screen-probe.html");
    std::fs::write(&copy, probe).unwrap();
    let (dom, _) =
        chromium(&copy, &["--dump-dom".into(), format!("--window-size={FIRST_SCREEN_W},{FIRST_SCREEN_H}")], scratch);
    let at = dom.find("data-answer=\"").expect("the probe ran and found the answer's number");
    let (bottom, value) = dom[at + 13..].split('"').next().unwrap().split_once('|').unwrap();
    (bottom.parse().unwrap(), value.to_string())
}

/// URL requests the page started: Chromium's net log marks the browser's own (update checks,
/// time sync) with the initiator "not an origin"; a page's carry its origin (`null` for file://).
fn page_requests(netlog: &Path) -> Vec<String> {
    let log: Value = serde_json::from_slice(&std::fs::read(netlog).expect("chromium wrote its net log"))
        .expect("the net log is JSON");
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"].as_u64().expect("a known event type");
    log["events"]
        .as_array()
        .expect("net log events")
        .iter()
        .filter(|e| e["type"].as_u64() == Some(start_job))
        .filter(|e| e["params"]["initiator"].as_str() != Some("not an origin"))
        .filter_map(|e| e["params"]["url"].as_str().map(str::to_string))
        .collect()
}

/// Every `<figure class="plot">` of the DOM: its id, its stated data points, and its SVG.
fn figures(dom: &str) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    for part in dom.split("<figure ").skip(1) {
        let body = part.split("</figure>").next().unwrap();
        let attr = |name: &str| -> String {
            let at = body.find(&format!("{name}=\"")).unwrap_or_else(|| panic!("figure without {name}: {body}"));
            body[at + name.len() + 2..].split('"').next().unwrap().to_string()
        };
        let points: usize = attr("data-points").parse().unwrap();
        let svg = body.split("<svg").nth(1).map(|s| s.split("</svg>").next().unwrap().to_string()).unwrap_or_default();
        out.push((attr("id"), points, svg));
    }
    out
}

/// The page-level checks every report passes; returns the figure ids.
fn check_page(name: &str, seen: &Seen) -> Vec<String> {
    assert!(seen.requests.is_empty(), "{name}: the page made network requests: {:?}", seen.requests);
    assert!(seen.console.is_empty(), "{name}: console messages (something failed): {:?}", seen.console);
    assert!(seen.dom.contains("id=\"report-end\""), "{name}: the page did not render to its end");
    for tag in ["<script", "<link", "<img", "<iframe", "<object", "<embed", "@import"] {
        assert!(!seen.dom.contains(tag), "{name}: {tag} in the page");
    }
    for attr in [" src=\"", " href=\"", "url("] {
        for value in seen.dom.split(attr).skip(1) {
            let value = value.split(['"', ')']).next().unwrap();
            assert!(attr == " href=\"" && value.starts_with('#'), "{name}: {attr}{value} points outside the page");
        }
    }
    let figs = figures(&seen.dom);
    assert!(!figs.is_empty(), "{name}: no plots");
    for (id, points, svg) in &figs {
        assert!(!svg.is_empty(), "{name}: {id} has no SVG");
        assert!(*points > 0, "{name}: {id} states no data points");
        let marks = svg.matches("class=\"data\"").count();
        assert!(marks > 0, "{name}: {id} draws no data");
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{name}: {id} has a coordinate that is not a number");
        for points_attr in svg.split(" points=\"").skip(1) {
            let pairs = points_attr.split('"').next().unwrap().split_whitespace().count();
            assert!(pairs >= 2, "{name}: {id} has a line of {pairs} point(s)");
        }
    }
    figs.into_iter().map(|f| f.0).collect()
}

fn has(ids: &[String], wanted: &str) -> bool {
    ids.iter().any(|id| id == wanted)
}

const SWEEP: &str = "[target]\nmodel = \"anvil-sim\"\nsimulator = \"realistic\"\nsimulator_time_per_output_token_ms = 0.5\n\
[run]\nrequests = 32\nseed = 5\n\
[workload]\ncontext_tokens = 1024\nmax_context_tokens = 32768\nmax_tokens = 32\ntokenizer = \"estimate\"\ncanaries = true\n\
[serve]\nno_thinking = true\n\
[slo]\nttft_p99_ms = 250\ntpot_p99_ms = 2\n";

const RELAXED: &str = "max_client_lateness = \"1s\"\n";

const SOAK: &str = "[target]\nmodel = \"anvil-sim\"\nsimulator = \"fast\"\nmetrics = true\n\
[run]\nduration = \"8s\"\nseed = 8\nsnapshot_interval = \"1s\"\nrecords = true\n\
[load]\nmode = \"open\"\nrate = 20\narrival = \"poisson\"\nmax_in_flight = 64\nmax_client_lateness = \"1s\"\n\
[workload]\ncontext_tokens = 1024\nmax_context_tokens = 32768\nmax_tokens = 64\n";

async fn measure(dir: &Path, name: &str, args: Vec<String>) -> PathBuf {
    let out = dir.join(name);
    let mut cmd = anvil();
    cmd.args(&args).arg("--out").arg(&out).arg("--quiet");
    let result = run(cmd).await;
    assert_eq!(result.status.code(), Some(0), "{name}: {}", text(&result.stderr));
    for a in artifacts(&out) {
        check_artifact(&a);
    }
    out
}

fn report(results: &[&PathBuf], html: &Path) {
    let out = anvil().arg("report").args(results).arg("--out").arg(html).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("report: {}", html.display())), "{}", text(&out.stdout));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_render_in_a_real_browser_with_every_plot_and_no_network() {
    chromium_binary();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, body: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    };
    // The client's lateness is not what these runs are about: on a busy shared machine it would
    // make levels invalid and end the search at its first probe.
    let sweep = write("sweep.toml", format!("{SWEEP}[load]\nconcurrency = [1, 2, 4, 8, 16]\n{RELAXED}"));
    let search = write(
        "search.toml",
        format!(
            "{SWEEP}[load]\nsearch = \"concurrency\"\nsearch_min = 1\nsearch_max = 32\nsearch_steps = 6\n{RELAXED}"
        ),
    );
    let soak = write("soak.toml", SOAK.to_string());
    // The demo's own scenario on the fast profile (its 64k-token prompts take a minute on the
    // realistic one). One run at a time: side by side they would load the two cores and each
    // other's numbers.
    let demo = vec![scenario("capacity-v4.toml").display().to_string(), "--simulator".into(), "fast".into()];
    let demo = measure(dir.path(), "demo", demo).await;
    let sweep_again = measure(dir.path(), "sweep-again", vec![sweep.clone()]).await;
    let sweep = measure(dir.path(), "sweep", vec![sweep]).await;
    let search = measure(dir.path(), "search", vec![search]).await;
    let soak = measure(dir.path(), "soak", vec![soak]).await;

    let shots = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| manifest_dir().join("target"), PathBuf::from)
        .join("report-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut seen = Vec::new();
    let runs = [
        ("demo", vec![&demo]),
        ("sweep", vec![&sweep]),
        ("search", vec![&search]),
        ("soak", vec![&soak]),
        ("two-runs", vec![&sweep, &sweep_again]),
    ];
    for (name, results) in runs {
        let html = shots.join(format!("{name}.html"));
        report(&results, &html);
        first_screen(&html, &shots.join(format!("{name}-first-screen.png")), dir.path());
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(!page.contains("http://") && !page.contains("https://"), "{name}: a URL in the page");
        let s = open(&html, &shots.join(format!("{name}.png")), dir.path());
        let ids = check_page(name, &s);
        seen.push((name, s, ids));
    }

    let (_, demo, ids) = &seen[0];
    for id in ["plot-distributions-ttft-cdf", "plot-distributions-tpot-cdf", "plot-distributions-e2e-cdf"] {
        assert!(has(ids, id), "demo: no {id} in {ids:?}");
    }
    assert!(has(ids, "plot-distributions-0-timeline"), "demo: no TTFT timeline in {ids:?}");
    for text in ["Provenance", "configuration fingerprint", "p50 CI95", "nearest-rank", "per-request markers"] {
        assert!(demo.dom.contains(text), "demo: no {text:?}");
    }
    let (_, sweep, ids) = &seen[1];
    for id in [
        "plot-sweep-ttft-toks",
        "plot-sweep-tpot-toks",
        "plot-sweep-ttft-reqs",
        "plot-sweep-tpot-reqs",
        "plot-sweep-goodput",
    ] {
        assert!(has(ids, id), "sweep: no {id} in {ids:?}");
    }
    assert!(sweep.dom.contains("Knee at c=") || sweep.dom.contains("No knee: "), "sweep: no knee verdict");
    assert!(sweep.dom.contains("objective ttft_p99_ms"), "sweep: no objective line");
    let (_, search, ids) = &seen[2];
    assert!(has(ids, "plot-sweep-probes"), "search: no probes plot in {ids:?}");
    assert!(search.dom.contains("Capacity: c="), "search: no capacity point");
    // The search's first screen holds its capacity: the answer's number within 900 px of the top.
    let (bottom, value) = answer_position(&shots.join("search.html"), dir.path());
    assert!(value.starts_with("c="), "search: the answer is not a capacity: {value}");
    assert!(bottom > 0.0 && bottom <= f64::from(FIRST_SCREEN_H), "search: the capacity ends {bottom} px down");
    assert!(
        search.dom.contains("class=\"rule-label\"") && search.dom.contains("capacity c="),
        "search: capacity not drawn"
    );
    let (_, soak, ids) = &seen[3];
    for slug in ["throughput", "ttft", "tpot", "load", "lag"] {
        let id = format!("plot-windows-0-window-{slug}");
        assert!(has(ids, &id), "soak: no {id} in {ids:?}");
    }
    assert!(soak.dom.contains("<th>drift</th>"), "soak: no drift table");
    assert!(soak.dom.contains("own metrics (vllm"), "soak: the server's metrics are not shown");
    assert!(soak.dom.contains("<th>counter</th>"), "soak: no server counters");
    let (_, two, ids) = &seen[4];
    for slug in ["ttft", "tpot", "e2e"] {
        assert!(has(ids, &format!("plot-runs-{slug}-cdf")), "two runs: no {slug} overlay in {ids:?}");
    }
    assert!(two.dom.contains("<h2>Runs side by side</h2>") && two.dom.contains("against sweep (BASE)"), "two runs");
}

/// The checks above can fail: a page that loads an image from the network is caught by the net
/// log, and the same page under the report's Content-Security-Policy by the console.
#[test]
fn the_browser_checks_catch_a_page_that_reaches_out() {
    let dir = tempfile::tempdir().unwrap();
    let bare = dir.path().join("bare.html");
    std::fs::write(
        &bare,
        "<!DOCTYPE html><html><body><img src=\"http://192.0.2.1/x.png\"><p id=\"report-end\">x</p></body></html>",
    )
    .unwrap();
    let s = open_dom(&bare, dir.path());
    assert_eq!(s.requests, ["http://192.0.2.1/x.png"]);
    let csp = dir.path().join("csp.html");
    std::fs::write(
        &csp,
        "<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'\"></head>\
         <body><img src=\"http://192.0.2.1/x.png\"><p id=\"report-end\">x</p></body></html>",
    )
    .unwrap();
    let s = open_dom(&csp, dir.path());
    assert!(s.requests.is_empty(), "{:?}", s.requests);
    assert!(s.console.iter().any(|c| c.contains("Content Security Policy")), "{:?}", s.console);
}
