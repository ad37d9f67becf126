//! oha, a raw HTTP load generator that parses no SSE, as a second, external floor: the same
//! request body (one body for every request; the simulator does the same work) at the same
//! concurrency, pinned to the client's core, its CPU and peak RSS read with `wait4` like every
//! child's. Used when `oha` is on the PATH (`cargo install oha --locked`); the tables say when it
//! was not.

use super::*;

/// The body the floor reader sends for its first request.
fn body(max_tokens: u32, canaries: bool) -> String {
    String::from_utf8_lossy(&floor::body(0, max_tokens, canaries)).into_owned()
}

/// What oha's JSON summary holds that we use.
#[derive(Debug, Deserialize)]
struct Summary {
    summary: Totals,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Totals {
    /// Seconds from the first request to the last response.
    total: f64,
    #[serde(default)]
    total_data: Option<u64>,
}

/// The oha version on the PATH, when there is one.
pub fn version() -> Option<String> {
    let out = std::process::Command::new("oha").arg("--version").output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `--output-format json` in recent oha; `--json` before it.
fn json_flag() -> &'static str {
    let help = std::process::Command::new("oha").arg("--help").output().map(|o| o.stdout).unwrap_or_default();
    if String::from_utf8_lossy(&help).contains("--output-format") { "--output-format=json" } else { "--json" }
}

impl Bench {
    /// One oha run with the same load, or `None` when oha is not installed.
    pub(super) fn oha(&self, server: &MockServer, load: &Load, limit: Duration) -> io::Result<Option<FloorRun>> {
        if version().is_none() {
            return Ok(None);
        }
        let dir = self.run_dir(&format!("oha-{}", load.tag()))?;
        let args: Vec<OsString> = vec![
            "--no-tui".into(),
            json_flag().into(),
            "-n".into(),
            load.requests.to_string().into(),
            "-c".into(),
            load.concurrency.to_string().into(),
            "-m".into(),
            "POST".into(),
            "-H".into(),
            "content-type: application/json".into(),
            "-d".into(),
            body(load.max_tokens, load.canaries).into(),
            format!("{}/chat/completions", server.base_url()).into(),
        ];
        let program = which("oha").unwrap_or_else(|| PathBuf::from("oha"));
        let (exit, server_side) = self.measure(server, &program, &args, &dir, limit)?;
        let parsed = serde_json::from_str::<Summary>(exit.stdout.trim());
        let report = parsed.ok().map(|s| floor::Report {
            requests: server_side.requests_received,
            completed: server_side.requests_completed,
            failed: server_side.requests_received.saturating_sub(server_side.requests_completed),
            body_bytes: s.summary.total_data.unwrap_or(0),
            wall_s: s.summary.total,
            first_error: None,
            timings: Vec::new(),
        });
        Ok(Some(FloorRun { exit, server: server_side, report }))
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}
