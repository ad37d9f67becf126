//! One reading of the client's live metrics: the plain values that every renderer writes in
//! its own format (`/metrics` text, Prometheus remote write, OTLP). Taken under the registry's
//! lock, rendered outside it.

/// Every family at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// When the reading was taken, wall clock, milliseconds since the Unix epoch (the pushed
    /// samples' timestamp; a scrape's time is the scraper's).
    pub taken_unix_ms: i64,
    /// Labels every series carries, fixed for the run (`shard` when sharded).
    pub constant_labels: Vec<(&'static str, String)>,
    pub families: Vec<Family>,
}

/// One metric family: a name, what it means, and its series.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// The exposed name, in base units, `_total` on counters (`anvil_requests_total`), `_seconds`
    /// on times (`anvil_ttft_seconds`); histograms without their `_bucket`/`_sum`/`_count`.
    pub name: String,
    pub help: &'static str,
    pub kind: Kind,
    pub series: Vec<Series>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One labelled series of a family.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Label names are static (`level`, `phase`, `outcome`, `kind`); values are bounded sets
    /// (see `names`).
    pub labels: Vec<(&'static str, String)>,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A counter's or a gauge's value.
    Number(f64),
    Histogram(Buckets),
}

/// A classic histogram, in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    /// `(upper bound in seconds, observations ≤ that bound)`, cumulative, bounds ascending,
    /// without `+Inf` (which is `count`).
    pub cumulative: Vec<(f64, u64)>,
    pub count: u64,
    /// Sum of the observations, seconds.
    pub sum: f64,
}
