//! The sharding options, and their resolution into a typed `ShardSpec` once, before anything is
//! sent: which part of the plan this process runs (`--shard`, or the scheduler's variables with
//! `--shard auto`), how the shards agree on when to start (a coordinator, or `--start-at`), and,
//! with a coordinator, the run's shared secret (`ANVIL_SHARD_TOKEN`). Every problem is a
//! bad-input error (exit 2) naming the option and the fix.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;

use super::auth::{TOKEN_ENV, Token};
use crate::plan::scenario::{Endpoint, Pacing, Scenario};
use crate::request::schedule::Part;

/// How far ahead `--start-at` may lie: the shards are already started and wait for it, holding
/// their allocation; further ahead is a mistake (milliseconds for seconds, a wrong date).
pub const MAX_START_AT_AHEAD: Duration = Duration::from_secs(3600);

/// Options for running as one shard of a test split over several processes or hosts.
#[derive(Debug, Clone, Default, Args)]
pub struct ShardArgs {
    /// Run shard I of N of one test: `I/N`, or `auto` (SLURM_PROCID/SLURM_NTASKS under Slurm;
    /// JOB_COMPLETION_INDEX with the count from ANVIL_SHARDS on Kubernetes), or `auto/N`.
    #[arg(long, value_name = "I/N|auto|auto/N")]
    pub shard: Option<String>,
    /// The coordinator's address. Every shard connects to it; shard 0 serves it on the address
    /// HOST resolves to (unless --coordinator-listen says where). Every message is authenticated
    /// with the secret in ANVIL_SHARD_TOKEN, required unless HOST is loopback.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "start_at")]
    pub coordinator: Option<String>,
    /// Shard 0: serve the coordinator on this address (IP or IP:PORT; the port defaults to
    /// --coordinator's). The other shards ignore it, so every shard can share one command line.
    #[arg(long, value_name = "ADDR", conflicts_with = "start_at")]
    pub coordinator_listen: Option<String>,
    /// Without a coordinator: start the (single) level at this instant, RFC 3339
    /// (2026-05-01T12:00:00Z) or Unix seconds, at most 1 h ahead. The hosts' clocks must agree
    /// (NTP).
    #[arg(long, value_name = "TIME")]
    pub start_at: Option<String>,
    /// How long the coordinator waits for every shard to join (then every shard exits 1, naming
    /// the missing ones).
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration)]
    pub join_timeout: Duration,
    /// Once one shard reaches a barrier (ready for a level, or finished), how long the others
    /// have to reach it too (then every shard exits 1, naming the late ones).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub barrier_timeout: Duration,
    /// Run a coordinator that is not on loopback without ANVIL_SHARD_TOKEN: anyone who reaches
    /// its port can then join the run.
    #[arg(long)]
    pub insecure_coordinator: bool,
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
        listen: Option<Listen>,
        join_timeout: Duration,
        barrier_timeout: Duration,
        /// The run's shared secret; `None` only on loopback or with `--insecure-coordinator`.
        token: Option<Token>,
    },
    /// No coordinator: the one level starts at this wall-clock instant on every host.
    StartAt(SystemTime),
}

/// Where shard 0 serves the coordinator.
#[derive(Debug, Clone, PartialEq)]
pub enum Listen {
    /// `--coordinator-listen`: exactly there.
    Exact(SocketAddr),
    /// `--coordinator HOST:PORT`: on the address HOST resolves to on this host.
    Host { host: String, port: u16 },
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
        let sync = self.sync(part, env)?;
        check_scenario(scenario, part, &sync)?;
        Ok(Some(ShardSpec { part, sync }))
    }

    fn sync(&self, part: Part, env: &dyn Env) -> Result<Sync, String> {
        if let Some(text) = &self.start_at {
            let shown = crate::plan::scenario::url_rules::escaped(text);
            let at = parse_start_at(text)?;
            let now = SystemTime::now();
            if at <= now {
                return Err(format!(
                    "--start-at {shown}: that instant has passed; give a time far enough ahead for every shard to start (e.g. now + 30 s)"
                ));
            }
            if at.duration_since(now).unwrap_or_default() > MAX_START_AT_AHEAD {
                let ahead = at.duration_since(now).unwrap_or_default();
                return Err(format!(
                    "--start-at {shown}: that is {} ahead, more than {} (the shards would wait idle for it); give a time a few seconds to minutes ahead, in Unix seconds (date +%s) or RFC 3339",
                    humantime::format_duration(Duration::from_secs(ahead.as_secs())),
                    humantime::format_duration(MAX_START_AT_AHEAD)
                ));
            }
            return Ok(Sync::StartAt(at));
        }
        let connect = match &self.coordinator {
            Some(c) => {
                check_host_port(c)?;
                Some(c.clone())
            }
            None => None,
        };
        let port_of = |c: &str| c.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
        // The other shards ignore it: one command line serves every shard.
        let listen = match &self.coordinator_listen {
            Some(text) if part.index == 0 => Some(parse_listen(text, connect.as_deref().and_then(port_of))?),
            _ => None,
        };
        let connect = match (connect, &listen) {
            (Some(c), _) => c,
            // Shard 0 alone may omit --coordinator: it connects to the coordinator it serves.
            (None, Some(addr)) => {
                let ip = if addr.ip().is_unspecified() { IpAddr::from([127, 0, 0, 1]) } else { addr.ip() };
                if addr.port() == 0 {
                    return Err("--coordinator-listen: give a fixed port (the other shards must know it)".to_string());
                }
                SocketAddr::new(ip, addr.port()).to_string()
            }
            (None, None) => {
                return Err(format!(
                    "--shard {}/{}: the shards need a common start: --coordinator HOST:PORT (shard 0 serves it; every shard gets the same address) or, without a coordinator, --start-at TIME",
                    part.index, part.count
                ));
            }
        };
        let listen = match listen {
            Some(addr) => Some(Listen::Exact(addr)),
            None if part.index == 0 => {
                let (host, port) = connect.rsplit_once(':').unwrap_or((&connect, ""));
                Some(Listen::Host { host: host.to_string(), port: port.parse().unwrap_or(0) })
            }
            None => None,
        };
        for (timeout, name) in [(self.join_timeout, "--join-timeout"), (self.barrier_timeout, "--barrier-timeout")] {
            if timeout.is_zero() {
                return Err(format!("{name} must be longer than zero; e.g. 2m"));
            }
        }
        let token = env.var(TOKEN_ENV).map(|v| Token::parse(&v)).transpose()?;
        // Loopback: only this host's processes can reach it. Anything else needs the secret.
        let local = match &listen {
            Some(Listen::Exact(addr)) => addr.ip().is_loopback(),
            _ => is_loopback_host(connect.rsplit_once(':').map_or(connect.as_str(), |(h, _)| h)),
        };
        if token.is_none() && !local && !self.insecure_coordinator {
            return Err(format!(
                "{TOKEN_ENV} is not set: a coordinator that is not on loopback ({}) authenticates every message with a secret shared by the run's shards; set {TOKEN_ENV} to the same random value on every shard (e.g. export {TOKEN_ENV}=$(openssl rand -hex 32)), or pass --insecure-coordinator to run without (anyone who reaches the port can then join the run)",
                match &listen {
                    Some(Listen::Exact(addr)) => addr.to_string(),
                    _ => connect.clone(),
                }
            ));
        }
        Ok(Sync::Coordinator {
            connect,
            listen,
            join_timeout: self.join_timeout,
            barrier_timeout: self.barrier_timeout,
            token,
        })
    }
}

/// `--coordinator-listen`: an IP (the port of `--coordinator`) or IP:PORT.
fn parse_listen(text: &str, default_port: Option<u16>) -> Result<SocketAddr, String> {
    let t = text.trim();
    if let Ok(addr) = t.parse::<SocketAddr>() {
        return Ok(addr);
    }
    match t.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        Ok(ip) => match default_port {
            Some(port) => Ok(SocketAddr::new(ip, port)),
            None => Err(format!(
                "--coordinator-listen \"{}\": give the port too (IP:PORT), or --coordinator HOST:PORT",
                crate::plan::scenario::url_rules::escaped(text)
            )),
        },
        Err(e) => Err(format!(
            "--coordinator-listen \"{}\": not an address ({e}); write an IP or IP:PORT, e.g. 10.0.0.5, 0.0.0.0:7311 or 127.0.0.1:7311",
            crate::plan::scenario::url_rules::escaped(text)
        )),
    }
}

/// A loopback IP literal or `localhost`.
fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    let h = h.strip_suffix('.').unwrap_or(h);
    h.eq_ignore_ascii_case("localhost") || h.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `I/N`, `auto` or `auto/N`.
fn parse_part(text: &str, env: &dyn Env) -> Result<Part, String> {
    let text = text.trim();
    let shown = crate::plan::scenario::url_rules::escaped(text);
    let (what, count) = match text.split_once('/') {
        Some((what, n)) => {
            let n: u32 = n.trim().parse().map_err(|_| {
                format!("--shard {shown}: {n:?} is not a shard count; write I/N with 0 <= I < N, e.g. 0/4")
            })?;
            (what.trim(), Some(n))
        }
        None => (text, None),
    };
    let part = if what == "auto" {
        auto_part(count, env)?
    } else {
        let Some(count) = count else {
            return Err(format!("--shard {shown}: write I/N (e.g. 0/4), auto or auto/N"));
        };
        let index: u32 = what.parse().map_err(|_| {
            format!("--shard {shown}: {what:?} is not a shard index; write I/N with 0 <= I < N, e.g. 0/4")
        })?;
        Part { index, count }
    };
    if part.count == 0 {
        return Err(format!("--shard {shown}: the shard count must be at least 1"));
    }
    if part.index >= part.count {
        return Err(format!(
            "--shard {shown}: shard index {} is out of range for {} shards (indices start at 0: 0..{})",
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
    let shown = crate::plan::scenario::url_rules::escaped(text);
    if let Ok(secs) = t.parse::<f64>() {
        // Far-off values (1e300) are no `Duration`: refused as too far ahead, never a panic.
        if let Some(at) =
            Duration::try_from_secs_f64(secs).ok().filter(|_| secs > 0.0).and_then(|d| UNIX_EPOCH.checked_add(d))
        {
            return Ok(at);
        }
        return Err(format!(
            "--start-at {shown}: not a time within reach; write Unix seconds (date +%s) or RFC 3339 in UTC (2026-05-01T12:00:00Z), at most {} ahead",
            humantime::format_duration(MAX_START_AT_AHEAD)
        ));
    }
    humantime::parse_rfc3339_weak(t).map_err(|_| {
        format!(
            "--start-at {shown}: not a time; write RFC 3339 in UTC (2026-05-01T12:00:00Z) or Unix seconds (date +%s)"
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
            crate::plan::scenario::url_rules::escaped(text)
        )),
    }
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
    if matches!(s.workload.prompts, crate::plan::scenario::PromptSource::Sessions(_)) {
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
    use crate::plan::scenario::Overrides;

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
            barrier_timeout: Duration::from_secs(600),
            ..ShardArgs::default()
        }
    }

    const TOKEN: (&str, &str) = (TOKEN_ENV, "0123456789abcdef0123456789abcdef");

    #[test]
    fn explicit_parts_and_their_errors() {
        let s = scenario("concurrency = 4");
        let token = vars(&[TOKEN]);
        let spec = args("2/4", Some("h:7311")).resolve(&s, &token).unwrap().unwrap();
        assert_eq!(spec.part, Part { index: 2, count: 4 });
        assert!(matches!(spec.sync, Sync::Coordinator { listen: None, token: Some(_), .. }));
        // Shard 0 serves on the address the coordinator's host name resolves to.
        let spec = args("0/4", Some("h:7311")).resolve(&s, &token).unwrap().unwrap();
        let h = Listen::Host { host: "h".into(), port: 7311 };
        assert!(matches!(spec.sync, Sync::Coordinator { listen: Some(l), .. } if l == h));
        let spec = args("0/4", Some("127.0.0.1:7311")).resolve(&s, &vars(&[])).unwrap().unwrap();
        assert!(matches!(spec.sync, Sync::Coordinator { token: None, .. }));
        // --coordinator-listen: an IP takes --coordinator's port; the other shards ignore it.
        let mut a = args("0/4", Some("h:7311"));
        a.coordinator_listen = Some("10.1.2.3".into());
        let spec = a.resolve(&s, &token).unwrap().unwrap();
        let want = Listen::Exact("10.1.2.3:7311".parse().unwrap());
        assert!(matches!(spec.sync, Sync::Coordinator { listen: Some(l), .. } if l == want));
        a.shard = Some("1/4".into());
        assert!(matches!(a.resolve(&s, &token).unwrap().unwrap().sync, Sync::Coordinator { listen: None, .. }));
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
        let e = args("1/4", Some("h\n:1")).resolve(&s, &vars(&[])).unwrap_err();
        assert!(e.contains("HOST:PORT"), "{e}");
    }

    #[test]
    fn a_coordinator_off_loopback_needs_the_token() {
        let s = scenario("concurrency = 4");
        for (shard, coordinator, listen) in
            [("1/4", "head:7311", None), ("0/4", "head:7311", None), ("0/4", "127.0.0.1:7311", Some("0.0.0.0"))]
        {
            let mut a = args(shard, Some(coordinator));
            a.coordinator_listen = listen.map(str::to_string);
            let e = a.resolve(&s, &vars(&[])).unwrap_err();
            assert!(e.contains(TOKEN_ENV) && e.contains("--insecure-coordinator"), "{e}");
            assert!(a.resolve(&s, &vars(&[TOKEN])).is_ok());
            a.insecure_coordinator = true;
            assert!(matches!(a.resolve(&s, &vars(&[])).unwrap().unwrap().sync, Sync::Coordinator { token: None, .. }));
        }
        for local in ["127.0.0.1:7311", "localhost:7311", "[::1]:7311", "127.0.0.9:7311"] {
            assert!(args("1/4", Some(local)).resolve(&s, &vars(&[])).is_ok(), "{local}");
        }
        let e = args("1/4", Some("head:1")).resolve(&s, &vars(&[(TOKEN_ENV, "short")])).unwrap_err();
        assert!(e.contains("fewer than 16"), "{e}");
    }

    #[test]
    fn auto_reads_slurm_then_kubernetes() {
        let s = scenario("concurrency = 8");
        let slurm = vars(&[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "4"), TOKEN]);
        let spec = args("auto", Some("h:1")).resolve(&s, &slurm).unwrap().unwrap();
        assert_eq!(spec.part, Part { index: 3, count: 4 });
        assert!(args("auto/8", Some("h:1")).resolve(&s, &slurm).unwrap_err().contains("SLURM_NTASKS"));
        let k8s = vars(&[("JOB_COMPLETION_INDEX", "5"), ("ANVIL_SHARDS", "8"), TOKEN]);
        assert_eq!(args("auto", Some("h:1")).resolve(&s, &k8s).unwrap().unwrap().part, Part { index: 5, count: 8 });
        let k8s_no_count = vars(&[("JOB_COMPLETION_INDEX", "5"), TOKEN]);
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
        let e = args("0/4", Some("h:1")).resolve(&scenario("concurrency = 2"), &vars(&[TOKEN])).unwrap_err();
        assert!(e.contains("below the shard count 4"), "{e}");
        let e = args("0/4", Some("h:1"))
            .resolve(&scenario("mode = \"open\"\nrate = 10\nmax_in_flight = 3"), &vars(&[TOKEN]))
            .unwrap_err();
        assert!(e.contains("max_in_flight 3"), "{e}");
        let mut a = args("0/2", None);
        let soon = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() + 600;
        a.start_at = Some(soon.to_string());
        let e = a.resolve(&scenario("concurrency = [2, 4]"), &vars(&[])).unwrap_err();
        assert!(e.contains("--start-at") && e.contains("--coordinator"), "{e}");
        assert!(a.resolve(&scenario("concurrency = 2"), &vars(&[])).unwrap().is_some());
        a.start_at = Some("2001-01-01T00:00:00Z".into());
        assert!(a.resolve(&scenario("concurrency = 2"), &vars(&[])).unwrap_err().contains("has passed"));
        for far in ["4102444800", "5138-01-01T00:00:00Z", "1e300", "1e19", "inf"] {
            a.start_at = Some(far.into());
            let e = a.resolve(&scenario("concurrency = 2"), &vars(&[])).unwrap_err();
            assert!(e.contains("1h") || e.contains("within reach"), "{far}: {e}");
        }
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
