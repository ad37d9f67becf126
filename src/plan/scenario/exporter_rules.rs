//! Validation of the client's own `/metrics` keys: `run.metrics_listen` (the address it
//! listens on) and `run.metrics_linger` (how long it stays up after the run).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::ScenarioError;
use super::checker::Checker;
use super::raw;

/// The longest linger: a few scrape intervals of the slowest common setting (1 min) is enough
/// for the last scrape; longer only keeps a finished run's process around.
pub const MAX_METRICS_LINGER: Duration = Duration::from_secs(3600);

const LISTEN_FIX: &str = "give an IP address and a port, like \"127.0.0.1:9464\", \"[::1]:9464\", \":9464\" (every \
                          interface) or \"127.0.0.1:0\" (a free port)";

/// `(metrics_listen, metrics_linger)`.
pub(super) fn exporter(c: &Checker, r: &raw::RawRun) -> Result<(Option<SocketAddr>, Duration), ScenarioError> {
    let listen = match r.metrics_listen.as_deref() {
        None => None,
        Some(text) => Some(listen_address(c, text)?),
    };
    let linger = match r.metrics_linger.as_deref().map(str::trim) {
        None | Some("0" | "0s") => Duration::ZERO,
        Some(text) => c.duration("run.metrics_linger", Some(text), Duration::ZERO)?,
    };
    if linger > MAX_METRICS_LINGER {
        return Err(c.err(
            "run.metrics_linger",
            format!("{} is longer than 1h", humantime::format_duration(linger)),
            "give a few scrape intervals, such as \"30s\"",
        ));
    }
    if listen.is_none() && !linger.is_zero() {
        return Err(c.err(
            "run.metrics_linger",
            "is set but the client serves no /metrics",
            "add run.metrics_listen = \"127.0.0.1:9464\" (or --metrics-listen), or remove the key",
        ));
    }
    Ok((listen, linger))
}

/// `host:port` with an IP address (or `localhost`), or `:port` for every interface, as
/// Prometheus' own exporters write `--web.listen-address`.
fn listen_address(c: &Checker, text: &str) -> Result<SocketAddr, ScenarioError> {
    let key = "run.metrics_listen";
    let text = text.trim();
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) => (host, port),
        None => return Err(c.err(key, format!("{text:?} has no port"), LISTEN_FIX)),
    };
    let port: u16 = port.parse().map_err(|_| c.err(key, format!("{port:?} is not a port (0–65535)"), LISTEN_FIX))?;
    let ip = match host {
        "" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        h => {
            let bare = h.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
            match bare {
                Some(v6) => v6.parse().ok().filter(IpAddr::is_ipv6),
                None => h.parse().ok().filter(IpAddr::is_ipv4),
            }
            .ok_or_else(|| c.err(key, format!("{h:?} is not an IP address"), LISTEN_FIX))?
        }
    };
    Ok(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::plan::scenario::{Overrides, Scenario};

    fn load(run_extra: &str) -> Result<Scenario, ScenarioError> {
        let text = format!(
            "[target]\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:8000/v1\"\n[run]\nrequests = 1\n{run_extra}\n\
             [workload]\ncontext_tokens = 512\nmax_context_tokens = 4096\nmax_tokens = 16\n"
        );
        Scenario::from_toml(Path::new("s.toml"), &text, &Overrides::default())
    }

    #[test]
    fn off_by_default_and_absent_from_the_serialized_scenario() {
        let s = load("").expect("valid");
        assert_eq!(s.run.metrics_listen, None);
        assert_eq!(s.run.metrics_linger, Duration::ZERO);
        let json = serde_json::to_value(&s).expect("serialize");
        assert!(json["run"].get("metrics_listen").is_none(), "{json}");
        assert!(json["run"].get("metrics_linger").is_none(), "{json}");
    }

    #[test]
    fn addresses_as_exporters_write_them() {
        let cases = [
            ("127.0.0.1:9464", "127.0.0.1:9464"),
            (":9464", "0.0.0.0:9464"),
            ("[::1]:0", "[::1]:0"),
            ("localhost:9100", "127.0.0.1:9100"),
            (" 0.0.0.0:9464 ", "0.0.0.0:9464"),
        ];
        for (given, bound) in cases {
            let s = load(&format!("metrics_listen = \"{given}\"\nmetrics_linger = \"15s\"")).expect(given);
            assert_eq!(s.run.metrics_listen, Some(bound.parse().unwrap()), "{given}");
            assert_eq!(s.run.metrics_linger, Duration::from_secs(15));
            // Where the live numbers go is not what was measured: not in the artifact's scenario,
            // nor in its fingerprint.
            let json = serde_json::to_value(&s).expect("serialize");
            assert!(
                json["run"].get("metrics_listen").is_none() && json["run"].get("metrics_linger").is_none(),
                "{json}"
            );
        }
    }

    #[test]
    fn bad_values_name_the_key_and_the_fix() {
        let cases = [
            ("metrics_listen = \"9464\"", "run.metrics_listen"),
            ("metrics_listen = \"host.example:9464\"", "run.metrics_listen"),
            ("metrics_listen = \"127.0.0.1:99999\"", "run.metrics_listen"),
            ("metrics_listen = \"::1:9464\"", "run.metrics_listen"),
            ("metrics_listen = \"[127.0.0.1]:9464\"", "run.metrics_listen"),
            ("metrics_listen = 9464", "run.metrics_listen"),
            ("metrics_listen = \":9464\"\nmetrics_linger = \"soon\"", "run.metrics_linger"),
            ("metrics_listen = \":9464\"\nmetrics_linger = \"2h\"", "run.metrics_linger"),
            ("metrics_linger = \"10s\"", "run.metrics_linger"),
        ];
        for (run, key) in cases {
            let err = load(run).expect_err(run);
            assert_eq!(err.key, key, "{run}: {err}");
            assert!(!err.fix.is_empty(), "{err}");
        }
    }
}
