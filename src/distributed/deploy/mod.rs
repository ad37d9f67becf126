//! `anvil-load deploy kubernetes`: the manifests that run a scenario as N shards of one test on
//! a cluster, printed for `kubectl apply -f -` (Slurm needs no generator: see
//! `deploy/slurm/anvil-load.sbatch`). The scenario is validated first, as a sharded run of that
//! many shards would validate it, so a manifest that is printed can run; every option that
//! lands in a manifest is validated as what Kubernetes takes there (a DNS name, a quantity, an
//! image reference, an environment variable's name), and no credential is put where anyone who
//! can read the Job or the ConfigMap reads it.

pub mod kubernetes;
pub mod yaml;

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use crate::distributed::shard::ShardArgs;
use crate::plan::scenario::{Endpoint, Overrides, PromptSource, Scenario, SizingMode};

#[derive(Debug, Clone, Args)]
pub struct DeployArgs {
    #[command(subcommand)]
    pub target: DeployTarget,
}

#[derive(Debug, Clone, Subcommand)]
pub enum DeployTarget {
    /// Print an Indexed Job, a headless Service, the scenario's ConfigMap and a results claim.
    Kubernetes(KubernetesArgs),
}

#[derive(Debug, Clone, Args)]
pub struct KubernetesArgs {
    /// Number of shards (pods).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub shards: u32,
    /// The scenario file to run (carried in a ConfigMap).
    #[arg(long, value_name = "FILE")]
    pub scenario: PathBuf,
    /// The container image with anvil-load (see the Dockerfile).
    #[arg(long)]
    pub image: String,
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Name of the Job, its Service and the other objects (a DNS label).
    #[arg(long, default_value = "anvil-load")]
    pub name: String,
    /// The server every shard loads (otherwise the scenario's target.base_url).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The coordinator's port on pod 0.
    #[arg(long, default_value_t = 7311, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// How long the coordinator waits for every pod to start and join.
    #[arg(long, default_value = "10m")]
    pub join_timeout: String,
    /// An existing PersistentVolumeClaim for the results (ReadWriteMany when the pods may land
    /// on several nodes); without it a ReadWriteMany claim named `<name>-results` is created.
    #[arg(long, value_name = "CLAIM")]
    pub results_claim: Option<String>,
    /// Size of the created results claim.
    #[arg(long, default_value = "10Gi")]
    pub results_size: String,
    /// Storage class of the created results claim (default: the cluster's default class).
    #[arg(long, value_name = "CLASS")]
    pub storage_class: Option<String>,
    /// Access mode of the created results claim: ReadWriteMany lets the pods land on any nodes;
    /// ReadWriteOnce needs every pod on one node (`--spread none`).
    #[arg(long, value_enum, default_value_t = AccessMode::ReadWriteMany)]
    pub access_mode: AccessMode,
    /// CPUs of each pod, its request and its limit (a quantity: `2`, `1.5`, `500m`).
    #[arg(long, default_value = "2", value_name = "QUANTITY")]
    pub cpu: String,
    /// Memory of each pod, its request and its limit (a quantity: `2Gi`, `512Mi`).
    #[arg(long, default_value = "2Gi", value_name = "QUANTITY")]
    pub memory: String,
    /// How the pods spread over nodes: `preferred` (one per node where the scheduler can),
    /// `required` (never two on one node) or `none`.
    #[arg(long, value_enum, default_value_t = Spread::Preferred)]
    pub spread: Spread,
    /// The Job's `activeDeadlineSeconds`: the whole run, from the first pod's creation, is
    /// stopped after this long.
    #[arg(long, default_value = "24h", value_name = "DURATION")]
    pub deadline: String,
    /// The Job's `ttlSecondsAfterFinished`: the finished Job and its pods (and their logs) are
    /// deleted this long after the end; the results claim stays.
    #[arg(long, default_value = "7d", value_name = "DURATION")]
    pub ttl: String,
    #[arg(long, value_enum, default_value_t = Format::Yaml)]
    pub format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AccessMode {
    #[value(name = "ReadWriteMany")]
    ReadWriteMany,
    #[value(name = "ReadWriteOnce")]
    ReadWriteOnce,
}

impl AccessMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::ReadWriteMany => "ReadWriteMany",
            AccessMode::ReadWriteOnce => "ReadWriteOnce",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Spread {
    /// A topology spread over nodes that the scheduler honours where it can.
    Preferred,
    /// A topology spread over nodes that the scheduler never breaks (pods wait for a node).
    Required,
    /// No spreading constraint.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A YAML stream, one document per object.
    Yaml,
    /// One `v1` `List` holding every object.
    Json,
}

/// The manifests as text, or why not (bad input).
pub fn render(args: &DeployArgs) -> Result<String, String> {
    let DeployTarget::Kubernetes(k) = &args.target;
    let spec = kubernetes_spec(k)?;
    let objects = kubernetes::manifests(&spec);
    Ok(match k.format {
        Format::Json => {
            let list = serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": objects });
            yaml::json_escaped(&(serde_json::to_string_pretty(&list).map_err(|e| e.to_string())? + "\n"))
        }
        Format::Yaml => {
            let mut out = format!(
                "# anvil-load: {} shards of {} as one Indexed Job.\n#   kubectl apply -f THIS_FILE\n",
                spec.shards,
                yaml::comment(&k.scenario.display().to_string())
            );
            out.push_str(&format!(
                "# The shards authenticate to the coordinator with a per-run secret, from a Secret made first:\n#   kubectl -n {} create secret generic {} --from-literal=token=\"$(openssl rand -hex 32)\"\n",
                spec.namespace,
                spec.shard_token_secret()
            ));
            if let Some(var) = &spec.api_key_env {
                out.push_str(&format!(
                    "# The API key ({var}) comes from a Secret:\n#   kubectl -n {} create secret generic {} --from-literal=api-key=...\n",
                    spec.namespace,
                    spec.api_key_secret()
                ));
            }
            out.push_str(&format!(
                "# Pod 0 merges every shard's records into /results/{}/shard-0 on the claim {}; copy them out\n# from a pod that mounts the claim (docs/distributed.md, \"Getting the merged artifacts out\").\n",
                spec.name,
                spec.results_claim.clone().unwrap_or_else(|| format!("{}-results", spec.name))
            ));
            for object in &objects {
                out.push_str("---\n");
                out.push_str(&yaml::to_yaml(object));
            }
            out
        }
    })
}

fn kubernetes_spec(k: &KubernetesArgs) -> Result<kubernetes::Spec, String> {
    for (what, value) in [("--name", &k.name), ("--namespace", &k.namespace)] {
        if !is_dns_label(value) {
            return Err(format!(
                "{what} {value:?}: not a DNS label (lowercase letters, digits and '-', at most 63, starting with a letter)"
            ));
        }
    }
    // `<name>-<index>` is each pod's host name, itself a DNS label; `<name>-shard-token` a
    // Secret's name.
    if k.name.len() + 1 + (k.shards - 1).to_string().len() > 63 {
        return Err(format!("--name {}: too long for pod host names like {}-{}", k.name, k.name, k.shards - 1));
    }
    if !is_image_reference(&k.image) {
        return Err(format!(
            "--image {:?}: not a container image reference (letters, digits and . _ - / : @, starting with a letter or digit); give e.g. registry.example.com/anvil-load:0.1.0",
            k.image
        ));
    }
    if let Some(claim) = &k.results_claim {
        if !is_dns_subdomain(claim) {
            return Err(format!(
                "--results-claim {claim:?}: not a PersistentVolumeClaim name (lowercase letters, digits, '-' and '.', at most 253, starting and ending with a letter or digit)"
            ));
        }
    }
    if !is_storage_quantity(&k.results_size) {
        return Err(format!(
            "--results-size {:?}: not a storage quantity; give a number with a unit, e.g. 10Gi, 500Mi or 1Ti",
            k.results_size
        ));
    }
    let join_timeout = duration("--join-timeout", &k.join_timeout, "10m")?;
    let deadline = duration("--deadline", &k.deadline, "24h")?;
    let ttl = duration("--ttl", &k.ttl, "7d")?;
    if deadline <= join_timeout {
        return Err(format!(
            "--deadline {}: not longer than --join-timeout {} (the Job would be stopped before its shards could have joined); give the run's length plus the join timeout, e.g. --deadline 24h",
            k.deadline, k.join_timeout
        ));
    }
    if let Some(class) = &k.storage_class {
        if k.results_claim.is_some() {
            return Err("--storage-class is for the claim deploy creates, and --results-claim names an existing one; give one of them".to_string());
        }
        if !is_dns_subdomain(class) {
            return Err(format!(
                "--storage-class {class:?}: not a StorageClass name (lowercase letters, digits, '-' and '.', at most 253, starting and ending with a letter or digit)"
            ));
        }
    }
    if k.access_mode == AccessMode::ReadWriteOnce {
        if k.results_claim.is_some() {
            return Err("--access-mode is for the claim deploy creates, and --results-claim names an existing one; give one of them".to_string());
        }
        if k.shards > 1 && k.spread != Spread::None {
            return Err(format!(
                "--access-mode ReadWriteOnce with --spread {}: a ReadWriteOnce volume is mounted on one node only, so pods spread over nodes could not mount it; give --spread none (every pod on one node), or keep ReadWriteMany",
                if k.spread == Spread::Required { "required" } else { "preferred" }
            ));
        }
    }
    if !is_cpu_quantity(&k.cpu) {
        return Err(format!("--cpu {:?}: not a CPU quantity; give cores (2, 1.5) or millicores (500m)", k.cpu));
    }
    if !is_storage_quantity(&k.memory) {
        return Err(format!(
            "--memory {:?}: not a memory quantity; give a number with a unit, e.g. 2Gi or 512Mi",
            k.memory
        ));
    }
    if let Some(url) = &k.base_url {
        check_url("--base-url", url)?;
    }
    let text = crate::sys::read_input_to_string(&k.scenario).map_err(|e| {
        format!("--scenario {}: cannot read it ({e})", yaml::comment(&k.scenario.display().to_string()))
    })?;
    let overrides = Overrides {
        base_url: k.base_url.clone(),
        base_url_origin: k.base_url.as_ref().map(|_| "--base-url"),
        ..Overrides::default()
    };
    // The API key lives in the cluster (a Secret), not here: validate everything else.
    let (checked, api_key_env) = without_api_key_env(&text);
    if let Some(var) = &api_key_env {
        check_env_name(var)?;
    }
    // The ConfigMap is readable by anyone who can read the namespace's configuration.
    if let Ok(doc) = text.parse::<toml::Table>() {
        let target = doc.get("target").and_then(toml::Value::as_table);
        for key in ["base_url", "metrics_url"] {
            if let Some(url) = target.and_then(|t| t.get(key)).and_then(toml::Value::as_str) {
                check_url(&format!("{}: target.{key}", k.scenario.display()), url)?;
            }
        }
        // Their values are secrets: written into the ConfigMap they would be readable, and the
        // pods set no variable of theirs but the API key's.
        for key in ["headers", "query"] {
            if target.is_some_and(|t| t.contains_key(key)) {
                return Err(format!(
                    "{}: target.{key}: deploy kubernetes does not carry request {key} to the pods (their values would be written into the ConfigMap, and the pods set no environment variable but the API key's); run the shards yourself (anvil-load SCENARIO --shard I/N), or remove target.{key}",
                    k.scenario.display()
                ));
            }
        }
        // The live metrics' push receivers land in the ConfigMap too.
        let run = doc.get("run").and_then(toml::Value::as_table);
        for key in ["remote_write", "otlp"] {
            if let Some(url) = run.and_then(|t| t.get(key)).and_then(toml::Value::as_str) {
                check_url(&format!("{}: run.{key}", k.scenario.display()), url)?;
            }
        }
        if run.is_some_and(|t| t.contains_key("push_token_env")) {
            return Err(format!(
                "{}: run.push_token_env: deploy kubernetes sets no environment variable in the pods but the API key's, so the pushes would go without their token; push to a receiver inside the cluster that needs none, run the shards yourself (anvil-load SCENARIO --shard I/N), or remove run.push_token_env",
                k.scenario.display()
            ));
        }
        for key in ["base_urls", "metrics_urls"] {
            let urls = target.and_then(|t| t.get(key)).and_then(toml::Value::as_array);
            for (i, url) in urls.into_iter().flatten().enumerate() {
                if let Some(url) = url.as_str() {
                    check_url(&format!("{}: target.{key}[{i}]", k.scenario.display()), url)?;
                }
            }
        }
    }
    let scenario = Scenario::from_toml(&k.scenario, &checked, &overrides).map_err(|e| e.to_string())?;
    if matches!(scenario.target.endpoint, Endpoint::Simulator { .. }) {
        return Err(format!(
            "{}: no target.base_url: the pods need the server's address; give --base-url URL",
            k.scenario.display()
        ));
    }
    let dataset = match &scenario.workload.prompts {
        PromptSource::Dataset(d) => Some(d.path.clone()),
        PromptSource::Trace(t) => Some(t.file.clone()),
        PromptSource::Sessions(s) => s.dataset.as_ref().map(|d| d.path.clone()),
        PromptSource::Synthetic { .. } => None,
    };
    let tokenizer = match &scenario.workload.sizing {
        SizingMode::Tokenizer { path, .. } => Some(path.clone()),
        _ => None,
    };
    for (what, path) in [("workload.prompts", dataset), ("workload.tokenizer", tokenizer)] {
        if let Some(path) = path {
            return Err(format!(
                "{}: {what} reads {} from disk, which the pods do not have (the ConfigMap carries the scenario alone); put the file into the image and point the key at its path there",
                k.scenario.display(),
                path.display()
            ));
        }
    }
    // The same checks every shard makes at start-up, so the Job does not fail on them.
    let shard = ShardArgs {
        shard: Some(format!("0/{}", k.shards)),
        coordinator: Some(format!("pod-0:{}", k.port)),
        join_timeout,
        barrier_timeout: std::time::Duration::from_secs(600),
        // The pods take their token from the Secret; only the scenario's fit is checked here.
        insecure_coordinator: true,
        ..ShardArgs::default()
    };
    shard.resolve(&scenario, &crate::distributed::shard::args::ProcessEnv)?;
    Ok(kubernetes::Spec {
        name: k.name.clone(),
        namespace: k.namespace.clone(),
        shards: k.shards,
        image: k.image.clone(),
        scenario_text: text,
        base_url: k.base_url.clone(),
        port: k.port,
        join_timeout: humantime::format_duration(join_timeout).to_string(),
        results_claim: k.results_claim.clone(),
        results_size: k.results_size.clone(),
        storage_class: k.storage_class.clone(),
        access_mode: k.access_mode,
        cpu: k.cpu.clone(),
        memory: k.memory.clone(),
        spread: k.spread,
        deadline_seconds: deadline.as_secs().max(1),
        ttl_seconds: ttl.as_secs(),
        api_key_env,
    })
}

/// The scenario text without `target.api_key_env`, and that variable's name. Text that is not
/// TOML is returned as it is, for the scenario parser to report.
fn without_api_key_env(text: &str) -> (String, Option<String>) {
    let Ok(mut doc) = text.parse::<toml::Table>() else { return (text.to_string(), None) };
    let var = doc
        .get_mut("target")
        .and_then(toml::Value::as_table_mut)
        .and_then(|t| t.remove("api_key_env"))
        .and_then(|v| v.as_str().map(str::to_string));
    match (&var, toml::to_string(&doc)) {
        (Some(_), Ok(stripped)) => (stripped, var),
        _ => (text.to_string(), None),
    }
}

/// Names the container's environment already uses.
const RESERVED_ENV: [&str; 4] = ["ANVIL_SHARDS", "ANVIL_SHARD_TOKEN", "POD_IP", "JOB_COMPLETION_INDEX"];

/// `target.api_key_env` becomes an environment variable's name in the pod: a C identifier.
fn check_env_name(var: &str) -> Result<(), String> {
    let ok = !var.is_empty()
        && var.len() <= 256
        && var.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err(format!(
            "target.api_key_env {}: not an environment variable's name (letters, digits and '_', not starting with a digit); write e.g. api_key_env = \"OPENAI_API_KEY\"",
            yaml::quote(var)
        ));
    }
    if RESERVED_ENV.contains(&var) {
        return Err(format!(
            "target.api_key_env = \"{var}\": the pods set that variable themselves; name the key's variable differently, e.g. OPENAI_API_KEY"
        ));
    }
    Ok(())
}

/// A URL that lands in the Job's arguments or the ConfigMap: no credentials (those belong in
/// the API key's Secret), no control characters or spaces.
fn check_url(what: &str, url: &str) -> Result<(), String> {
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!("{what}: the URL holds a control character or a space; write it without"));
    }
    let clean = crate::redact::redact_url(url);
    if clean != url {
        return Err(format!(
            "{what} {clean}: the URL carries credentials (user:password@ or a secret query value), which the manifests would show to anyone who can read the Job or the ConfigMap; give the URL without them and the key through target.api_key_env (filled from a Secret)"
        ));
    }
    Ok(())
}

/// A duration option, longer than zero.
fn duration(option: &str, text: &str, example: &str) -> Result<std::time::Duration, String> {
    let d =
        humantime::parse_duration(text.trim()).map_err(|e| format!("{option} {text:?}: {e}; write e.g. {example}"))?;
    if d.is_zero() {
        return Err(format!("{option} must be longer than zero; e.g. {example}"));
    }
    Ok(d)
}

/// A CPU quantity Kubernetes takes: cores (`2`, `1.5`) or millicores (`500m`), above zero.
fn is_cpu_quantity(s: &str) -> bool {
    let (number, milli) = match s.strip_suffix('m') {
        Some(n) => (n, true),
        None => (s, false),
    };
    let digits = number.chars().all(|c| c.is_ascii_digit() || c == '.')
        && number.chars().filter(|&c| c == '.').count() <= (!milli) as usize
        && number.starts_with(|c: char| c.is_ascii_digit())
        && number.ends_with(|c: char| c.is_ascii_digit());
    digits && number.parse::<f64>().is_ok_and(|n| n > 0.0 && n.is_finite() && (!milli || n >= 1.0))
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && !s.ends_with('-')
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// RFC 1123 subdomain, as Kubernetes names most objects.
fn is_dns_subdomain(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 253
        && s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.split('.').all(|part| !part.is_empty() && part.starts_with(alnum) && part.ends_with(alnum))
        && s.chars().all(|c| alnum(c) || c == '-' || c == '.')
}

/// A storage size Kubernetes takes: a positive decimal number, then a binary or decimal unit.
fn is_storage_quantity(s: &str) -> bool {
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let units = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E"];
    number.chars().filter(|&c| c == '.').count() <= 1
        && number.chars().any(|c| c.is_ascii_digit())
        && !number.starts_with('.')
        && !number.ends_with('.')
        && number.parse::<f64>().is_ok_and(|n| n > 0.0 && n.is_finite())
        && units.contains(&unit)
}

/// A container image reference, as the registry grammar spells it (loosely: its characters).
fn is_image_reference(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 512
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "._-/:@".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_names_sizes_and_images() {
        for good in ["shared-nfs", "a", "results.v1", "a-b.c-d"] {
            assert!(is_dns_subdomain(good), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a..b", "a_b", "a\nb", "a/b", &"a".repeat(254)] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
        for good in ["10Gi", "500Mi", "1Ti", "1.5Gi", "100", "5G"] {
            assert!(is_storage_quantity(good), "{good}");
        }
        for bad in ["", "0", "0Gi", "10 Gi", "10GiB", "Gi", "1..5Gi", ".5Gi", "-1Gi", "10Gi\n---", "1e3"] {
            assert!(!is_storage_quantity(bad), "{bad:?}");
        }
        for good in ["2", "1.5", "500m", "16"] {
            assert!(is_cpu_quantity(good), "{good}");
        }
        for bad in ["", "0", "0m", "1.5m", "2 ", "-1", "m", "1e3", ".5", "2Gi", "2\n"] {
            assert!(!is_cpu_quantity(bad), "{bad:?}");
        }
        for good in ["anvil-load:dev", "registry.example.com:5000/anvil-load:0.1.0", "r/a@sha256:abc123"] {
            assert!(is_image_reference(good), "{good}");
        }
        for bad in ["", " x", "x\u{7f}", "x y", "x\n", "-x", "x\u{2028}"] {
            assert!(!is_image_reference(bad), "{bad:?}");
        }
        for good in ["OPENAI_API_KEY", "_K", "k1"] {
            assert!(check_env_name(good).is_ok(), "{good}");
        }
        for bad in ["", "1K", "K-EY", "K\nEY", "K EY", "ANVIL_SHARD_TOKEN", "K\u{2028}"] {
            assert!(check_env_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_url("--base-url", "http://engine:8000/v1").is_ok());
        for bad in ["http://u:p@engine/v1", "http://engine/v1?token=abc", "http://engine/v1\nx"] {
            let e = check_url("--base-url", bad).unwrap_err();
            assert!(!e.contains("abc") && !e.contains(":p@"), "{e}");
        }
    }
}
