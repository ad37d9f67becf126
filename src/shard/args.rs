//! The sharding options, and their resolution into a typed `ShardSpec` once, before anything is
//! sent: which part of the plan this process runs (`--shard`, or the scheduler's variables with
//! `--shard auto`) and how the shards agree on when to start (a coordinator, or `--start-at`).
//! Every problem is a bad-input error (exit 2) naming the option and the fix.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;

use crate::scenario::{Endpoint, Pacing, Scenario};
use crate::schedule::Part;

/// Options for running as one shard of a test split over several processes or hosts.
#[derive(Debug, Clone, Default, Args)]
pub struct ShardArgs {
    /// Run shard I of N of one test: `I/N`, or `auto` (SLURM_PROCID/SLURM_NTASKS under Slurm;
    /// JOB_COMPLETION_INDEX with the count from ANVIL_SHARDS on Kubernetes), or `auto/N`.
    #[arg(long, value_name = "I/N|auto|auto/N")]
    pub shard: Option<String>,
    /// The coordinator's address. Every shard but 0 connects to it; shard 0 serves it (on this
    /// port, every interface) unless --coordinator-listen says where.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "start_at")]
    pub coordinator: Option<String>,
    /// Shard 0: serve the coordinator on this address.
    #[arg(long, value_name = "ADDR", conflicts_with = "start_at")]
    pub coordinator_listen: Option<String>,
    /// Without a coordinator: start the (single) level at this instant, RFC 3339
    /// (2026-05-01T12:00:00Z) or Unix seconds. The hosts' clocks must agree (NTP).
    #[arg(long, value_name = "TIME")]
    pub start_at: Option<String>,
    /// How long the coordinator waits for every shard to join (then every shard exits 1, naming
    /// the missing ones).
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration)]
    pub join_timeout: Duration,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("{e}; write e.g. 90s or 5m"))
}

/// How the shards agree on when each level starts.
#[derive(Debug, Clone, PartialEq)]
pub enum Sync {
    /// Shard 0 serves a coordinator; every shard (shard 0 too) connects to it.
    Coordinator {
        /// Where to connect.
        connect: String,
        /// Shard 0: where to listen.
        listen: Option<SocketAddr>,
        join_timeout: Duration,
    },
    /// No coordinator: the one level starts at this wall-clock instant on every host.
    StartAt(SystemTime),
}

/// A resolved, validated shard of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardSpec {
    pub part: Part,
    pub sync: Sync,
}

/// Where `--shard auto` looks.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    }
}

impl ShardArgs {
    /// `None` for an ordinary (unsharded) run.
    pub fn resolve(&self, scenario: &Scenario, env: &dyn Env) -> Result<Option<ShardSpec>, String> {
        let Some(text) = &self.shard else {
            for (given, name) in [
                (self.coordinator.is_some(), "--coordinator"),
                (self.coordinator_listen.is_some(), "--coordinator-listen"),
                (self.start_at.is_some(), "--start-at"),
            ] {
                if given {
                    return Err(format!("{name} is for sharded runs: add --shard I/N (or --shard auto)"));
                }
            }
            return Ok(None);
        };
        let part = parse_part(text, env)?;
        let sync = self.sync(part)?;
        check_scenario(scenario, part, &sync)?;
        Ok(Some(ShardSpec { part, sync }))
    }

    fn sync(&self, part: Part) -> Result<Sync, String> {
        if let Some(text) = &self.start_at {
            let at = parse_start_at(text)?;
            if at <= SystemTime::now() {
                return Err(format!(
                    "--start-at {text}: that instant has passed; give a time far enough ahead for every shard to start (e.g. now + 30 s)"
                ));
            }
            return Ok(Sync::StartAt(at));
        }
        let listen = match &self.coordinator_listen {
            Some(_) if part.index != 0 => {
                return Err(format!(
                    "--coordinator-listen: only shard 0 serves the coordinator, and this is shard {}; give the others --coordinator HOST:PORT",
                    part.index
                ));
            }
            Some(text) => Some(text.parse::<SocketAddr>().map_err(|e| {
                format!(
                    "--coordinator-listen \"{}\": not an address ({e}); write e.g. 0.0.0.0:7311 or 127.0.0.1:7311",
                    crate::scenario::url_rules::escaped(text)
                )
            })?),
            None => None,
        };
        let connect = match (&self.coordinator, listen) {
            (Some(c), _) => {
                check_host_port(c)?;
                c.clone()
            }
            // Shard 0 alone may omit --coordinator: it connects to the coordinator it serves.
            (None, Some(addr)) => {
                let host = if addr.ip().is_unspecified() { "127.0.0.1".to_string() } else { addr.ip().to_string() };
                if addr.port() == 0 {
                    return Err("--coordinator-listen: give a fixed port (the other shards must know it)".to_string());
                }
                format!("{host}:{}", addr.port())
            }
            (None, None) => {
                return Err(format!(
                    "--shard {}/{}: the shards need a common start: --coordinator HOST:PORT (shard 0 serves it; every shard gets the same address) or, without a coordinator, --start-at TIME",
                    part.index, part.count
                ));
            }
        };
        let listen = match listen {
            Some(addr) => Some(addr),
            None if part.index == 0 => Some(listen_on_port_of(&connect)?),
            None => None,
        };
        if self.join_timeout.is_zero() {
            return Err("--join-timeout must be longer than zero; e.g. 2m".to_string());
        }
        Ok(Sync::Coordinator { connect, listen, join_timeout: self.join_timeout })
    }
}

/// `I/N`, `auto` or `auto/N`.
fn parse_part(text: &str, env: &dyn Env) -> Result<Part, String> {
    let text = text.trim();
    let (what, count) = match text.split_once('/') {
        Some((what, n)) => {
            let n: u32 = n.trim().parse().map_err(|_| {
                format!("--shard {text}: {n:?} is not a shard count; write I/N with 0 <= I < N, e.g. 0/4")
            })?;
            (what.trim(), Some(n))
        }
        None => (text, None),
    };
    let part = if what == "auto" {
        auto_part(count, env)?
    } else {
        let Some(count) = count else {
            return Err(format!("--shard {text}: write I/N (e.g. 0/4), auto or auto/N"));
        };
        let index: u32 = what.parse().map_err(|_| {
            format!("--shard {text}: {what:?} is not a shard index; write I/N with 0 <= I < N, e.g. 0/4")
        })?;
        Part { index, count }
    };
    if part.count == 0 {
        return Err(format!("--shard {text}: the shard count must be at least 1"));
    }
    if part.index >= part.count {
        return Err(format!(
            "--shard {text}: shard index {} is out of range for {} shards (indices start at 0: 0..{})",
            part.index,
            part.count,
            part.count - 1
        ));
    }
    Ok(part)
}

/// The scheduler's own variables: Slurm's task rank and count, or a Kubernetes Indexed Job's
/// completion index with the count from `ANVIL_SHARDS` or `auto/N`.
fn auto_part(count: Option<u32>, env: &dyn Env) -> Result<Part, String> {
    let number = |name: &str| -> Result<Option<u32>, String> {
        env.var(name)
            .map(|v| v.trim().parse::<u32>().map_err(|_| format!("--shard auto: {name}={v:?} is not a number")))
            .transpose()
    };
    if let Some(index) = number("SLURM_PROCID")? {
        let tasks = number("SLURM_NTASKS")?
            .ok_or("--shard auto: SLURM_PROCID is set but SLURM_NTASKS is not; run the shards with srun --ntasks=N")?;
        if let Some(n) = count.filter(|&n| n != tasks) {
            return Err(format!(
                "--shard auto/{n}: Slurm runs {tasks} tasks (SLURM_NTASKS); make them agree (srun --ntasks={n})"
            ));
        }
        return Ok(Part { index, count: tasks });
    }
    if let Some(index) = number("JOB_COMPLETION_INDEX")? {
        let from_env = number("ANVIL_SHARDS")?;
        let count = match (count, from_env) {
            (Some(a), Some(b)) if a != b => {
                return Err(format!("--shard auto/{a}: ANVIL_SHARDS says {b}; make them agree"));
            }
            (Some(n), _) | (None, Some(n)) => n,
            (None, None) => {
                return Err(
                    "--shard auto: JOB_COMPLETION_INDEX is set but the shard count is not; set ANVIL_SHARDS=N (the Job's completions) or write --shard auto/N"
                        .to_string(),
                );
            }
        };
        return Ok(Part { index, count });
    }
    Err("--shard auto: neither SLURM_PROCID/SLURM_NTASKS (Slurm) nor JOB_COMPLETION_INDEX (Kubernetes Indexed Job) is set; give the part explicitly, e.g. --shard 0/4".to_string())
}

/// RFC 3339 (`2026-05-01T12:00:00Z`, fractions allowed) or Unix seconds (`1777636800`,
/// fractions allowed).
pub fn parse_start_at(text: &str) -> Result<SystemTime, String> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_finite() && secs > 0.0 {
            return Ok(UNIX_EPOCH + Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_rfc3339_weak(t).map_err(|_| {
        format!(
            "--start-at {text}: not a time; write RFC 3339 in UTC (2026-05-01T12:00:00Z) or Unix seconds (date +%s)"
        )
    })
}

/// A host name, an IPv4 address or a bracketed IPv6 address, then a port: nothing else (no
/// control character, space or bidi control, which a message would print as it is).
fn check_host_port(text: &str) -> Result<(), String> {
    let host_ok = |h: &str| match h.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
    };
    match text.rsplit_once(':') {
        Some((host, port)) if host_ok(host) && port.parse::<u16>().is_ok_and(|p| p != 0) => Ok(()),
        _ => Err(format!(
            "--coordinator \"{}\": write HOST:PORT (a host name or an IP address, then a port), e.g. anvil-0.anvil:7311 or 10.0.0.5:7311",
            crate::scenario::url_rules::escaped(text)
        )),
    }
}

/// Shard 0 given only `--coordinator HOST:PORT` serves on that port on every interface, so every
/// shard can run the same command line (srun, an Indexed Job's pod template); a loopback address
/// (all shards on this host) is served on loopback only.
fn listen_on_port_of(connect: &str) -> Result<SocketAddr, String> {
    let (host, port) = connect.rsplit_once(':').unwrap_or((connect, ""));
    let port: u16 = port.parse().unwrap_or(0);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip = match host.parse::<std::net::IpAddr>() {
        Ok(ip) if ip.is_loopback() => ip,
        _ if host == "localhost" => std::net::IpAddr::from([127, 0, 0, 1]),
        _ => std::net::IpAddr::from([0, 0, 0, 0]),
    };
    if port == 0 {
        return Err(format!("--coordinator {connect}: give a fixed port (every shard must know it)"));
    }
    Ok(SocketAddr::new(ip, port))
}

/// What a sharded run cannot do, refused before anything is sent.
fn check_scenario(s: &Scenario, part: Part, sync: &Sync) -> Result<(), String> {
    let n = part.count;
    if s.load.search.is_some() {
        return Err(format!(
            "{}: [load] search: a capacity search cannot run sharded (each next level depends on the merged verdict of the last); run the search in one process, or shard a fixed list of levels",
            s.path.display()
        ));
    }
    if matches!(s.workload.prompts, crate::scenario::PromptSource::Sessions(_)) {
        return Err(format!(
            "{}: [workload.sessions]: conversations cannot run sharded yet (a conversation's turns must stay on one shard, and the split is by request); run them in one process",
            s.path.display()
        ));
    }
    if matches!(s.target.endpoint, Endpoint::Simulator { .. }) {
        return Err(format!(
            "{}: no base URL: the shards of a run share one server; give --base-url URL (for a local try, start one with `anvil-load mock`)",
            s.path.display()
        ));
    }
    match &s.load.pacing {
        Pacing::Closed { levels, .. } => {
            if let Some(&c) = levels.iter().find(|&&c| c < n) {
                return Err(format!(
                    "{}: load.concurrency {c} is below the shard count {n}: every shard holds at least one request in flight; use at most {c} shards or a higher concurrency",
                    s.path.display()
                ));
            }
        }
        Pacing::Open { max_in_flight: Some(m), .. } if *m < n => {
            return Err(format!(
                "{}: load.max_in_flight {m} is below the shard count {n}: each shard gets a share of the cap; use at most {m} shards or a higher cap",
                s.path.display()
            ));
        }
        Pacing::Open { .. } => {}
    }
    if matches!(sync, Sync::StartAt(_)) && s.workload.prompt_cache.burst() {
        return Err(format!(
            "{}: workload.shared_prefix_burst: the warm-up request runs on shard 0 and the others wait for it, which needs the coordinator; use --coordinator instead of --start-at",
            s.path.display()
        ));
    }
    if matches!(sync, Sync::StartAt(_)) && s.load.pacing.levels().len() > 1 {
        return Err(format!(
            "{}: {} levels: with --start-at only one level can start together (no one knows when the others finish the last); use --coordinator for sweeps, or one level per run",
            s.path.display(),
            s.load.pacing.levels().len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::scenario::Overrides;

    struct Vars(HashMap<&'static str, &'static str>);
    impl Env for Vars {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|v| v.to_string())
        }
    }
    fn vars(pairs: &[(&'static str, &'static str)]) -> Vars {
        Vars(pairs.iter().copied().collect())
    }

    fn scenario(load: &str) -> Scenario {
        let text = format!(
            "[target]\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9/v1\"\n[run]\nrequests = 8\n[load]\n{load}\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\ntokenizer = \"estimate\"\n"
        );
        Scenario::from_toml(std::path::Path::new("s.toml"), &text, &Overrides::default()).unwrap()
    }

    fn args(shard: &str, coordinator: Option<&str>) -> ShardArgs {
        ShardArgs {
            shard: Some(shard.into()),
            coordinator: coordinator.map(str::to_string),
            join_timeout: Duration::from_secs(60),
            ..ShardArgs::default()
        }
    }

    #[test]
    fn explicit_parts_and_their_errors() {
        let s = scenario("concurrency = 4");
        let spec = args("2/4", Some("h:7311")).resolve(&s, &vars(&[])).unwrap().unwrap();
        assert_eq!(spec.part, Part { index: 2, count: 4 });
        assert!(matches!(spec.sync, Sync::Coordinator { listen: None, .. }));
        // Shard 0 serves on the coordinator's port, every interface (loopback only for loopback).
        let spec = args("0/4", Some("h:7311")).resolve(&s, &vars(&[])).unwrap().unwrap();
        assert!(matches!(spec.sync, Sync::Coordinator { listen: Some(a), .. } if a.to_string() == "0.0.0.0:7311"));
        let spec = args("0/4", Some("127.0.0.1:7311")).resolve(&s, &vars(&[])).unwrap().unwrap();
        assert!(matches!(spec.sync, Sync::Coordinator { listen: Some(a), .. } if a.to_string() == "127.0.0.1:7311"));
        for (bad, says) in [
            ("4/4", "out of range"),
            ("1/0", "at least 1"),
            ("x/4", "not a shard index"),
            ("1/y", "not a shard count"),
            ("3", "write I/N"),
        ] {
            let e = args(bad, Some("h:1")).resolve(&s, &vars(&[])).unwrap_err();
            assert!(e.contains(says) && e.contains("--shard"), "{bad}: {e}");
        }
        let e = args("1/4", None).resolve(&s, &vars(&[])).unwrap_err();
        assert!(e.contains("--coordinator HOST:PORT") && e.contains("--start-at"), "{e}");
        let e = args("1/4", Some("nohostport")).resolve(&s, &vars(&[])).unwrap_err();
        assert!(e.contains("HOST:PORT"), "{e}");
        let mut a = args("1/4", Some("h:1"));
        a.coordinator_listen = Some("0.0.0.0:1".into());
        assert!(a.resolve(&s, &vars(&[])).unwrap_err().contains("only shard 0"));
    }

    #[test]
    fn auto_reads_slurm_then_kubernetes() {
        let s = scenario("concurrency = 8");
        let slurm = vars(&[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "4")]);
        let spec = args("auto", Some("h:1")).resolve(&s, &slurm).unwrap().unwrap();
        assert_eq!(spec.part, Part { index: 3, count: 4 });
        assert!(args("auto/8", Some("h:1")).resolve(&s, &slurm).unwrap_err().contains("SLURM_NTASKS"));
        let k8s = vars(&[("JOB_COMPLETION_INDEX", "5"), ("ANVIL_SHARDS", "8")]);
        assert_eq!(args("auto", Some("h:1")).resolve(&s, &k8s).unwrap().unwrap().part, Part { index: 5, count: 8 });
        let k8s_no_count = vars(&[("JOB_COMPLETION_INDEX", "5")]);
        assert!(args("auto", Some("h:1")).resolve(&s, &k8s_no_count).unwrap_err().contains("ANVIL_SHARDS"));
        assert_eq!(
            args("auto/6", Some("h:1")).resolve(&s, &k8s_no_count).unwrap().unwrap().part,
            Part { index: 5, count: 6 }
        );
        let e = args("auto", Some("h:1")).resolve(&s, &vars(&[])).unwrap_err();
        assert!(e.contains("SLURM_PROCID") && e.contains("JOB_COMPLETION_INDEX"), "{e}");
    }

    #[test]
    fn what_a_sharded_run_refuses() {
        let e = args("0/4", Some("h:1")).resolve(&scenario("concurrency = 2"), &vars(&[])).unwrap_err();
        assert!(e.contains("below the shard count 4"), "{e}");
        let e = args("0/4", Some("h:1"))
            .resolve(&scenario("mode = \"open\"\nrate = 10\nmax_in_flight = 3"), &vars(&[]))
            .unwrap_err();
        assert!(e.contains("max_in_flight 3"), "{e}");
        let mut a = args("0/2", None);
        a.start_at = Some("4102444800".into()); // 2100-01-01
        let e = a.resolve(&scenario("concurrency = [2, 4]"), &vars(&[])).unwrap_err();
        assert!(e.contains("--start-at") && e.contains("--coordinator"), "{e}");
        assert!(a.resolve(&scenario("concurrency = 2"), &vars(&[])).unwrap().is_some());
        a.start_at = Some("2001-01-01T00:00:00Z".into());
        assert!(a.resolve(&scenario("concurrency = 2"), &vars(&[])).unwrap_err().contains("has passed"));
        let unsharded = ShardArgs { start_at: Some("1".into()), ..ShardArgs::default() };
        assert!(unsharded.resolve(&scenario("concurrency = 2"), &vars(&[])).unwrap_err().contains("add --shard"));
    }

    #[test]
    fn start_times_in_both_spellings() {
        let a = parse_start_at("2026-05-01T12:00:00Z").unwrap();
        let b = parse_start_at("1777636800").unwrap();
        assert_eq!(a, b);
        assert_eq!(parse_start_at("1777636800.5").unwrap() - Duration::from_millis(500), b);
        assert!(parse_start_at("tomorrow").unwrap_err().contains("RFC 3339"));
    }
}
