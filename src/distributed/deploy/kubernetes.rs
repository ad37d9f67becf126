//! Kubernetes manifests for one sharded run: an Indexed Job (one pod per shard), a headless
//! Service that gives pod 0 a stable name for the coordinator, the scenario in a ConfigMap, and
//! a volume for the results.
//!
//! The Job never retries a shard (`backoffLimitPerIndex: 0`, `maxFailedIndexes: 0`): a restarted
//! shard would replay its part of the schedule into a run that went on without it. A pod evicted
//! or preempted (`DisruptionTarget`) or refused its input (exit code 2) fails the whole Job at
//! once (`podFailurePolicy` → `FailJob`); `podReplacementPolicy: Failed` keeps a terminating pod
//! from overlapping its replacement.
//!
//! Each pod asks for its CPU and memory with requests equal to limits (Guaranteed QoS), spreads
//! over nodes (`topologySpreadConstraints` on the host name), and the Job is bounded in time
//! (`activeDeadlineSeconds`) and cleaned up after (`ttlSecondsAfterFinished`; the results claim
//! stays).
//!
//! Every pod reads the run's shared secret (`ANVIL_SHARD_TOKEN`) from the Secret
//! `<name>-shard-token` (key `token`), which the user creates (the printed header says how), so
//! the coordinator authenticates every message; pod 0 serves the coordinator on its own pod IP
//! (`--coordinator-listen $(POD_IP)`), not on every interface.

use serde_json::{Value, json};

/// The container's name, which `podFailurePolicy` refers to.
pub const CONTAINER: &str = "anvil-load";
/// The image's non-root user (distroless `nonroot`).
pub const RUN_AS: u32 = 65532;
const SCENARIO_DIR: &str = "/etc/anvil-load";
const RESULTS_DIR: &str = "/results";

/// Everything the manifests depend on, validated.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub namespace: String,
    pub shards: u32,
    pub image: String,
    /// The scenario file's text, as the ConfigMap carries it.
    pub scenario_text: String,
    /// `--base-url` to pass on, when the scenario's own is not to be used.
    pub base_url: Option<String>,
    pub port: u16,
    pub join_timeout: String,
    /// An existing claim for the results, or `None` to create one of `results_size`.
    pub results_claim: Option<String>,
    pub results_size: String,
    /// The created claim's storage class (`None`: the cluster's default).
    pub storage_class: Option<String>,
    pub access_mode: super::AccessMode,
    /// Each pod's CPU and memory, request and limit alike.
    pub cpu: String,
    pub memory: String,
    pub spread: super::Spread,
    /// `activeDeadlineSeconds` and `ttlSecondsAfterFinished`.
    pub deadline_seconds: u64,
    pub ttl_seconds: u64,
    /// The scenario's API key variable: filled from the Secret `<name>-api-key`.
    pub api_key_env: Option<String>,
}

impl Spec {
    fn labels(&self) -> Value {
        json!({ "app.kubernetes.io/name": "anvil-load", "app.kubernetes.io/instance": self.name })
    }

    fn metadata(&self, name: &str) -> Value {
        json!({ "name": name, "namespace": self.namespace, "labels": self.labels() })
    }

    fn claim(&self) -> String {
        self.results_claim.clone().unwrap_or_else(|| format!("{}-results", self.name))
    }

    pub fn api_key_secret(&self) -> String {
        format!("{}-api-key", self.name)
    }

    pub fn shard_token_secret(&self) -> String {
        format!("{}-shard-token", self.name)
    }

    /// Pod 0's stable DNS name within the namespace: `<job>-0.<service>`.
    pub fn coordinator(&self) -> String {
        format!("{}-0.{}:{}", self.name, self.name, self.port)
    }
}

/// The manifests, in the order they are applied.
pub fn manifests(spec: &Spec) -> Vec<Value> {
    let mut out = vec![config_map(spec), service(spec)];
    if spec.results_claim.is_none() {
        out.push(results_claim(spec));
    }
    out.push(job(spec));
    out
}

fn config_map(spec: &Spec) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": spec.metadata(&format!("{}-scenario", spec.name)),
        "data": { "scenario.toml": spec.scenario_text },
    })
}

/// Headless, and publishing pods before they are ready: pod 0 must be resolvable while the
/// others are still joining.
fn service(spec: &Spec) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": spec.metadata(&spec.name),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": true,
            "selector": { "batch.kubernetes.io/job-name": spec.name },
            "ports": [{ "name": "coordinator", "port": spec.port, "targetPort": spec.port, "protocol": "TCP" }],
        },
    })
}

/// Every pod writes under its own directory; pods on several nodes need a ReadWriteMany class.
fn results_claim(spec: &Spec) -> Value {
    let mut claim = json!({
        "accessModes": [spec.access_mode.as_str()],
        "resources": { "requests": { "storage": spec.results_size } },
    });
    if let Some(class) = &spec.storage_class {
        claim["storageClassName"] = json!(class);
    }
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": spec.metadata(&spec.claim()),
        "spec": claim,
    })
}

/// One pod per node where possible: two shards sharing a node share its cores and its network,
/// and a load generator short of CPU measures itself (its levels fail the saturation gate).
fn spread(spec: &Spec) -> Option<Value> {
    let when = match spec.spread {
        super::Spread::Preferred => "ScheduleAnyway",
        super::Spread::Required => "DoNotSchedule",
        super::Spread::None => return None,
    };
    Some(json!([{
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": when,
        "labelSelector": { "matchLabels": { "batch.kubernetes.io/job-name": spec.name } },
    }]))
}

fn job(spec: &Spec) -> Value {
    let mut args = vec![
        format!("{SCENARIO_DIR}/scenario.toml"),
        "--shard".to_string(),
        "auto".to_string(),
        "--coordinator".to_string(),
        spec.coordinator(),
        // Used by pod 0 only (the others ignore it); Kubernetes expands the pod's own IP.
        "--coordinator-listen".to_string(),
        "$(POD_IP)".to_string(),
        "--join-timeout".to_string(),
        spec.join_timeout.clone(),
        "--out".to_string(),
        // The Job controller sets JOB_COMPLETION_INDEX in the container's environment, so
        // Kubernetes expands it here.
        format!("{RESULTS_DIR}/{}/shard-$(JOB_COMPLETION_INDEX)", spec.name),
        "--quiet".to_string(),
    ];
    if let Some(url) = &spec.base_url {
        args.push("--base-url".to_string());
        args.push(url.clone());
    }
    let mut env = vec![
        json!({ "name": "ANVIL_SHARDS", "value": spec.shards.to_string() }),
        json!({ "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } }),
        json!({
            "name": crate::distributed::shard::auth::TOKEN_ENV,
            "valueFrom": { "secretKeyRef": { "name": spec.shard_token_secret(), "key": "token" } },
        }),
    ];
    if let Some(var) = &spec.api_key_env {
        env.push(json!({
            "name": var,
            "valueFrom": { "secretKeyRef": { "name": spec.api_key_secret(), "key": "api-key" } },
        }));
    }
    // Requests equal to limits: the pod is in the Guaranteed QoS class, never throttled below
    // what it asked for nor evicted first under memory pressure, and with whole CPUs under a
    // static CPU manager it gets cores of its own. A pod without a CPU request shares whatever
    // is left, and its lateness voids its levels.
    let resources = json!({
        "requests": { "cpu": spec.cpu, "memory": spec.memory },
        "limits": { "cpu": spec.cpu, "memory": spec.memory },
    });
    let mut job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": spec.metadata(&spec.name),
        "spec": {
            "completionMode": "Indexed",
            "completions": spec.shards,
            "parallelism": spec.shards,
            "backoffLimitPerIndex": 0,
            "maxFailedIndexes": 0,
            "podReplacementPolicy": "Failed",
            // The whole run, joins included: a server that hangs every shard must not hold the
            // cluster's resources for ever.
            "activeDeadlineSeconds": spec.deadline_seconds,
            // The finished Job and its pods go after this long; the results claim stays.
            "ttlSecondsAfterFinished": spec.ttl_seconds,
            "podFailurePolicy": {
                "rules": [
                    {
                        // Evicted or preempted: the run lost a shard mid-flight.
                        "action": "FailJob",
                        "onPodConditions": [{ "type": "DisruptionTarget", "status": "True" }],
                    },
                    {
                        // Bad input: every shard would refuse it the same way.
                        "action": "FailJob",
                        "onExitCodes": { "containerName": CONTAINER, "operator": "In", "values": [2] },
                    },
                ],
            },
            "template": {
                "metadata": { "labels": spec.labels() },
                "spec": {
                    "restartPolicy": "Never",
                    "subdomain": spec.name,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": RUN_AS,
                        "runAsGroup": RUN_AS,
                        "fsGroup": RUN_AS,
                    },
                    "containers": [{
                        "name": CONTAINER,
                        "image": spec.image,
                        "args": args,
                        "env": env,
                        "ports": [{ "name": "coordinator", "containerPort": spec.port, "protocol": "TCP" }],
                        "resources": resources,
                        "volumeMounts": [
                            { "name": "scenario", "mountPath": SCENARIO_DIR, "readOnly": true },
                            { "name": "results", "mountPath": RESULTS_DIR },
                        ],
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": { "drop": ["ALL"] },
                        },
                    }],
                    "volumes": [
                        { "name": "scenario", "configMap": { "name": format!("{}-scenario", spec.name) } },
                        { "name": "results", "persistentVolumeClaim": { "claimName": spec.claim() } },
                    ],
                },
            },
        },
    });
    if let Some(constraints) = spread(spec) {
        job["spec"]["template"]["spec"]["topologySpreadConstraints"] = constraints;
    }
    job
}
