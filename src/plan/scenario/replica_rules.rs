//! Several replicas of one server in one run: `target.base_urls` (each checked like
//! `target.base_url`, and exclusive with it) and `target.balance`, how requests are spread over
//! them.

use serde::{Deserialize, Serialize};

use super::ScenarioError;
use super::checker::Checker;
use super::raw;
use super::url_rules;

/// The most replicas a run spreads its requests over.
pub const MAX_REPLICAS: usize = 64;

/// `target.base_urls` with `target.balance`: the replicas requests are spread over.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Replicas {
    /// Each replica's API root, normalised like `target.base_url`; the first is also the
    /// run's `base_url` (the server check, the calibration probes and the scraping of a single
    /// metrics URL use it).
    pub base_urls: Vec<String>,
    pub balance: Balance,
}

/// How each request chooses its replica.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// One replica after the other, request by request.
    #[default]
    RoundRobin,
    /// The replica with the fewest requests in flight (ties taken in turn).
    LeastInFlight,
    /// Every turn of a conversation goes to one replica, chosen from its session id; requests
    /// outside conversations go round robin.
    Session,
}

impl Replicas {
    /// Each replica's URL of `path` (`/chat/completions`, `/models`), in order, carrying
    /// `query` (`target.query`) as the one server's URL does.
    pub fn endpoints(&self, path: &str, query: &super::NamedValues) -> Vec<String> {
        self.base_urls.iter().map(|u| url_rules::endpoint(&super::with_query(u, query), path)).collect()
    }
}

impl Balance {
    const NAMES: [(&'static str, Balance); 3] = [
        ("round_robin", Balance::RoundRobin),
        ("least_in_flight", Balance::LeastInFlight),
        ("session", Balance::Session),
    ];

    /// The name written in scenarios and artifacts.
    pub fn name(self) -> &'static str {
        Self::NAMES.iter().find(|(_, b)| *b == self).map_or("round_robin", |(n, _)| n)
    }
}

/// The replicas of `[target]`, or `None` for one server (`base_url`, or the simulator).
pub(super) fn replicas(c: &Checker, t: &raw::RawTarget) -> Result<Option<Replicas>, ScenarioError> {
    let Some(urls) = &t.base_urls else {
        if t.balance.is_some() {
            return Err(c.err(
                "target.balance",
                "is set but there is only one server",
                "list the replicas in target.base_urls = [\"http://a:8000/v1\", \"http://b:8000/v1\"], or remove balance",
            ));
        }
        return Ok(None);
    };
    if t.base_url.is_some() {
        return Err(c.err(
            "target.base_urls",
            "is set together with target.base_url",
            "keep base_url for one server, or list every replica in base_urls (the first is used for the server check and the calibration probes) and remove base_url",
        ));
    }
    if !(2..=MAX_REPLICAS).contains(&urls.len()) {
        return Err(c.err(
            "target.base_urls",
            format!("lists {} URL(s); several replicas are 2 to {MAX_REPLICAS}", urls.len()),
            "for one server write base_url = \"http://host:8000/v1\" instead; otherwise list 2 to 64 replicas",
        ));
    }
    let mut base_urls: Vec<String> = Vec::with_capacity(urls.len());
    for (i, url) in urls.iter().enumerate() {
        let key = format!("target.base_urls[{i}]");
        let url = url_rules::base_url_at(c, &key, url)?;
        if let Some(first) = base_urls.iter().position(|u| *u == url) {
            return Err(c.err(
                &key,
                format!("\"{}\" is listed twice (also target.base_urls[{first}])", url_rules::shown(&url)),
                "list each replica once",
            ));
        }
        base_urls.push(url);
    }
    let scheme = |u: &str| u.split_once("://").map(|(s, _)| s.to_string());
    if let Some(i) = base_urls.iter().position(|u| scheme(u) != scheme(&base_urls[0])) {
        return Err(c.err(
            &format!("target.base_urls[{i}]"),
            "uses another scheme than target.base_urls[0] (http and https mixed)",
            "give every replica the same scheme",
        ));
    }
    let balance = match t.balance.as_deref() {
        None => Balance::default(),
        Some(name) => match Balance::NAMES.iter().find(|(n, _)| *n == name) {
            Some((_, b)) => *b,
            None => {
                return Err(c.err(
                    "target.balance",
                    format!("unknown balance {name:?}"),
                    "use \"round_robin\" (the default), \"least_in_flight\" or \"session\"",
                ));
            }
        },
    };
    Ok(Some(Replicas { base_urls, balance }))
}

#[cfg(test)]
mod tests {
    use super::super::{Endpoint, Overrides, Scenario};
    use super::*;

    const REST: &str =
        "[run]\nrequests = 1\n[workload]\ncontext_tokens = 128\nmax_context_tokens = 4096\nmax_tokens = 8\n";

    fn load(target: &str, o: &Overrides) -> Scenario {
        let text = format!("[target]\nmodel = \"m\"\n{target}\n{REST}");
        Scenario::from_toml(std::path::Path::new("t.toml"), &text, o).unwrap()
    }

    #[test]
    fn the_first_replica_is_the_endpoint_and_urls_are_normalised() {
        let s = load(
            "base_urls = [\"http://a:8000\", \"http://b:8000/v1/\"]\nbalance = \"session\"",
            &Overrides::default(),
        );
        let r = s.target.replicas.as_ref().unwrap();
        assert_eq!(r.base_urls, ["http://a:8000/v1", "http://b:8000/v1"]);
        assert_eq!(r.balance, Balance::Session);
        assert_eq!(s.target.endpoint, Endpoint::Remote { base_url: "http://a:8000/v1".into() });
        assert_eq!(
            r.endpoints("/models", &crate::plan::scenario::NamedValues::default()),
            ["http://a:8000/v1/models", "http://b:8000/v1/models"]
        );
    }

    #[test]
    fn base_url_flags_replace_the_files_servers() {
        let file = "base_urls = [\"http://a:8000/v1\", \"http://b:8000/v1\"]";
        let one = Overrides { base_url: Some("http://c:8000/v1".into()), ..Overrides::default() };
        let s = load(file, &one);
        assert!(s.target.replicas.is_none());
        assert_eq!(s.target.endpoint, Endpoint::Remote { base_url: "http://c:8000/v1".into() });
        let several =
            Overrides { base_urls: vec!["http://c:1/v1".into(), "http://d:1/v1".into()], ..Overrides::default() };
        let s = load("base_url = \"http://a:8000/v1\"", &several);
        assert_eq!(s.target.replicas.unwrap().base_urls, ["http://c:1/v1", "http://d:1/v1"]);
    }

    #[test]
    fn one_server_serialises_as_before() {
        let s = load("base_url = \"http://a:8000/v1\"", &Overrides::default());
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["target"].get("replicas").is_none());
    }
}
