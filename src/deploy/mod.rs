//! `anvil-load deploy kubernetes`: the manifests that run a scenario as N shards of one test on
//! a cluster, printed for `kubectl apply -f -` (Slurm needs no generator: see
//! `deploy/slurm/anvil-load.sbatch`). The scenario is validated first, as a sharded run of that
//! many shards would validate it, so a manifest that is printed can run.

pub mod kubernetes;
pub mod yaml;

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use crate::scenario::{Endpoint, Overrides, PromptSource, Scenario, SizingMode};
use crate::shard::ShardArgs;

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
    #[arg(long, default_value_t = 7311)]
    pub port: u16,
    /// How long the coordinator waits for every pod to start and join.
    #[arg(long, default_value = "10m")]
    pub join_timeout: String,
    /// An existing PersistentVolumeClaim for the results (ReadWriteMany when the pods may land
    /// on several nodes); without it a ReadWriteMany claim named <name>-results is created.
    #[arg(long, value_name = "CLAIM")]
    pub results_claim: Option<String>,
    /// Size of the created results claim.
    #[arg(long, default_value = "10Gi")]
    pub results_size: String,
    #[arg(long, value_enum, default_value_t = Format::Yaml)]
    pub format: Format,
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
            serde_json::to_string_pretty(&list).map_err(|e| e.to_string())? + "\n"
        }
        Format::Yaml => {
            let mut out = format!(
                "# anvil-load: {} shards of {} as one Indexed Job.\n#   kubectl apply -f THIS_FILE\n",
                spec.shards,
                k.scenario.display()
            );
            if let Some(var) = &spec.api_key_env {
                out.push_str(&format!(
                    "# The API key ({var}) comes from a Secret:\n#   kubectl -n {} create secret generic {} --from-literal=api-key=...\n",
                    spec.namespace,
                    spec.api_key_secret()
                ));
            }
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
    // `<name>-<index>` is each pod's host name, itself a DNS label.
    if k.name.len() + 1 + (k.shards - 1).to_string().len() > 63 {
        return Err(format!("--name {}: too long for pod host names like {}-{}", k.name, k.name, k.shards - 1));
    }
    if k.image.trim().is_empty() {
        return Err("--image: give the container image, e.g. registry.example.com/anvil-load:0.1.0".to_string());
    }
    let join_timeout =
        humantime::parse_duration(&k.join_timeout).map_err(|e| format!("--join-timeout {}: {e}", k.join_timeout))?;
    let text = crate::sys::read_input_to_string(&k.scenario)
        .map_err(|e| format!("--scenario {}: cannot read it ({e})", k.scenario.display()))?;
    let overrides = Overrides {
        base_url: k.base_url.clone(),
        base_url_origin: k.base_url.as_ref().map(|_| "--base-url"),
        ..Overrides::default()
    };
    // The API key lives in the cluster (a Secret), not here: validate everything else.
    let (checked, api_key_env) = without_api_key_env(&text);
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
        ..ShardArgs::default()
    };
    shard.resolve(&scenario, &crate::shard::args::ProcessEnv)?;
    Ok(kubernetes::Spec {
        name: k.name.clone(),
        namespace: k.namespace.clone(),
        shards: k.shards,
        image: k.image.clone(),
        scenario_text: text,
        base_url: k.base_url.clone(),
        port: k.port,
        join_timeout: k.join_timeout.clone(),
        results_claim: k.results_claim.clone(),
        results_size: k.results_size.clone(),
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

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && !s.ends_with('-')
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}
