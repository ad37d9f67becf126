//! `[workload.media]`: images and audio sent with each prompt. The TOML's shapes, the typed
//! plan (`MediaSpec`) and every rule: which APIs have a spelling for which modality, the
//! count, size and length mixtures, the formats, the pool of distinct items.
//!
//! Video is refused with a message saying why (see media.md): no small, well-kept encoder of a
//! container every engine reads is available, and sending what engines cannot decode would
//! measure their error path.

use serde::{Deserialize, Serialize};

use super::checker::Checker;
use super::raw::RawScenario;
use super::{Api, PromptSource, ScenarioError, Target, Workload};

/// Most media items of one modality one request may carry.
pub const MAX_ITEMS: u32 = 64;
/// Largest image side, in pixels.
pub const MAX_SIDE: u32 = 8192;
/// Smallest image side, in pixels (one JPEG block).
pub const MIN_SIDE: u32 = 8;
/// Longest audio clip, in seconds.
pub const MAX_SECONDS: u32 = 3600;
/// Most distinct items of one modality encoded before a level.
pub const MAX_POOL: u32 = 4096;
/// Distinct items of one modality per level when `pool` is not set.
pub const DEFAULT_POOL: u32 = 16;

/// `[workload.media]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMedia {
    /// `"data_url"` (default): base64 `data:` URLs inline in the body; `"http"`: URLs of a
    /// file server the run starts, which the engine fetches.
    pub delivery: Option<String>,
    /// `delivery = "http"`: the file server's address (default `"127.0.0.1:0"`, loopback, a
    /// free port).
    pub http_bind: Option<String>,
    /// `delivery = "http"`: the base URL the engine fetches from (default `http://` and the
    /// bound address); required when `http_bind` is not a loopback address.
    pub http_url: Option<String>,
    /// Distinct items of each modality synthesised and encoded before each level (default 16),
    /// used round-robin by the level's requests.
    pub pool: Option<i64>,
    /// `[workload.media.images]`
    pub images: Option<RawImages>,
    /// `[workload.media.audio]`
    pub audio: Option<RawAudio>,
    /// Refused: see media.md.
    pub video: Option<toml::Value>,
}

/// `[workload.media.images]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawImages {
    /// Images per request: `1` or weights `{ 0 = 1, 1 = 2, 4 = 1 }` (default 1).
    pub count: Option<toml::Value>,
    /// `"WxH"` or weights `{ "512x512" = 3, "1024x1024" = 1 }` (default `"1024x1024"`).
    pub size: Option<toml::Value>,
    /// `"jpeg"` (default) or `"png"`.
    pub format: Option<String>,
}

/// `[workload.media.audio]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAudio {
    /// Clips per request: `1` or weights (default 1).
    pub count: Option<toml::Value>,
    /// Clip length in whole seconds: `10` or weights `{ 5 = 1, 30 = 1 }` (default 10).
    pub seconds: Option<toml::Value>,
    /// `"wav"` (default and only): 16-bit PCM, mono.
    pub format: Option<String>,
    /// Samples per second (default 16000; 8000 to 48000).
    pub sample_rate: Option<i64>,
}

/// How media reaches the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaDelivery {
    DataUrl,
    /// A file server the run starts on `bind`; the engine fetches from `url` (`None`: the bound
    /// address).
    Http {
        bind: std::net::SocketAddr,
        url: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    Jpeg,
    Png,
}

impl ImageFormat {
    pub fn mime(self) -> &'static str {
        match self {
            ImageFormat::Jpeg => "image/jpeg",
            ImageFormat::Png => "image/png",
        }
    }
}

/// Images per request, their sizes and format.
#[derive(Debug, Clone, Serialize)]
pub struct ImageSpec {
    /// `(count, weight)`.
    pub count: Vec<(u32, u32)>,
    /// `((width, height), weight)`.
    pub size: Vec<((u32, u32), u32)>,
    pub format: ImageFormat,
}

/// Audio clips per request, their lengths and sample rate (WAV, 16-bit mono).
#[derive(Debug, Clone, Serialize)]
pub struct AudioSpec {
    pub count: Vec<(u32, u32)>,
    /// `(seconds, weight)`.
    pub seconds: Vec<(u32, u32)>,
    pub sample_rate: u32,
}

/// The validated `[workload.media]`.
#[derive(Debug, Clone, Serialize)]
pub struct MediaSpec {
    pub delivery: MediaDelivery,
    pub pool: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audio: Option<AudioSpec>,
}

/// `[workload.media]`, checked against the API and the prompt source.
pub(super) fn media(
    c: &Checker,
    raw: &RawScenario,
    target: &Target,
    workload: &Workload,
) -> Result<Option<MediaSpec>, ScenarioError> {
    let dataset = matches!(&workload.prompts, PromptSource::Dataset(_));
    let dataset_images = matches!(&workload.prompts, PromptSource::Dataset(d) if !d.images.is_empty());
    if dataset_images && !matches!(target.api, Api::Chat | Api::Responses | Api::Messages) {
        return Err(c.err(
            "workload.prompts",
            format!("the dataset names images, and target.api = \"{}\" has no field for them", target.api.name()),
            "use target.api = \"chat\", \"responses\" or \"messages\", or a dataset without images",
        ));
    }
    // A dataset's images without `[workload.media]`: inline, and the media block reports them.
    let inline = MediaSpec { delivery: MediaDelivery::DataUrl, pool: DEFAULT_POOL, images: None, audio: None };
    let Some(m) = &raw.workload.media else { return Ok(dataset_images.then_some(inline)) };
    if m.video.is_some() {
        return Err(c.err(
            "workload.media.video",
            "is not supported: no small, well-kept encoder of a video container every engine decodes is available, and \
             frames an engine cannot read would measure its error path",
            "remove [workload.media.video]; send frames as images ([workload.media.images] with count = N) instead",
        ));
    }
    let delivery = match m.delivery.as_deref() {
        None | Some("data_url") => {
            for (key, set) in
                [("workload.media.http_bind", m.http_bind.is_some()), ("workload.media.http_url", m.http_url.is_some())]
            {
                if set {
                    return Err(c.err(
                        key,
                        "goes with delivery = \"http\" only",
                        "set delivery = \"http\", or remove it",
                    ));
                }
            }
            MediaDelivery::DataUrl
        }
        Some("http") => http(c, m)?,
        Some(other) => {
            return Err(c.err(
                "workload.media.delivery",
                format!("\"{other}\" is not a delivery"),
                "use delivery = \"data_url\" (base64 inline) or \"http\" (a file server the engine fetches from)",
            ));
        }
    };
    let pool = match m.pool {
        None => DEFAULT_POOL,
        Some(n) if (1..=i64::from(MAX_POOL)).contains(&n) => n as u32,
        Some(n) => {
            return Err(c.err(
                "workload.media.pool",
                format!("{n} is not a pool size (1 to {MAX_POOL})"),
                "give the number of distinct items per modality, e.g. pool = 16",
            ));
        }
    };
    let images = m.images.as_ref().map(|i| images(c, i)).transpose()?;
    let audio = m.audio.as_ref().map(|a| audio(c, a)).transpose()?;
    if images.is_none() && audio.is_none() && !dataset {
        return Err(c.err(
            "workload.media",
            "names no modality",
            "add [workload.media.images] or [workload.media.audio], or remove [workload.media]",
        ));
    }
    let api = target.api;
    let name = api.name();
    match api {
        Api::Chat | Api::Responses | Api::Messages => {}
        _ => {
            return Err(c.err(
                "workload.media",
                format!("target.api = \"{name}\" has no field for images or audio"),
                "use target.api = \"chat\", \"responses\" or \"messages\", or remove [workload.media]",
            ));
        }
    }
    if audio.is_some() && api != Api::Chat {
        return Err(c.err(
            "workload.media.audio",
            format!("target.api = \"{name}\" has no content part for audio input"),
            "use target.api = \"chat\" (input_audio parts), or remove [workload.media.audio]",
        ));
    }
    let drawn = matches!(workload.prompts, PromptSource::Synthetic { .. });
    let delivery_only = dataset && images.is_none() && audio.is_none();
    if !(drawn || delivery_only) {
        return Err(c.err(
            "workload.media",
            "draws images and audio for drawn prompts (context_tokens) only; datasets name their own images, and \
             traces and conversations carry their own content",
            "use workload.context_tokens, or (with a dataset) keep only workload.media.delivery and its http keys",
        ));
    }
    Ok(Some(MediaSpec { delivery, pool, images, audio }))
}

/// `delivery = "http"`: where the file server listens and the URL the engine fetches from.
fn http(c: &Checker, m: &RawMedia) -> Result<MediaDelivery, ScenarioError> {
    let text = m.http_bind.as_deref().unwrap_or("127.0.0.1:0");
    let bind: std::net::SocketAddr = text.parse().map_err(|_| {
        c.err(
            "workload.media.http_bind",
            format!("\"{text}\" is not an address and port"),
            "write e.g. http_bind = \"127.0.0.1:0\" (loopback, a free port) or \"0.0.0.0:8900\" with http_url",
        )
    })?;
    let url = match m.http_url.as_deref() {
        None if !bind.ip().is_loopback() => {
            return Err(c.err(
                "workload.media.http_url",
                format!("is needed: the file server listens on {bind}, which is no address an engine can be told"),
                "give the URL the engine reaches this machine at, e.g. http_url = \"http://loadgen-1:8900\"",
            ));
        }
        None => None,
        Some(u) if (u.starts_with("http://") || u.starts_with("https://")) && !u.contains('@') && !u.contains('?') => {
            Some(u.trim_end_matches('/').to_string())
        }
        Some(u) => {
            return Err(c.err(
                "workload.media.http_url",
                format!("\"{u}\" is not an http:// URL without credentials or query"),
                "write e.g. http_url = \"http://loadgen-1:8900\"",
            ));
        }
    };
    Ok(MediaDelivery::Http { bind, url })
}

fn images(c: &Checker, raw: &RawImages) -> Result<ImageSpec, ScenarioError> {
    let count = weights(c, "workload.media.images.count", raw.count.as_ref(), 1, 0..=MAX_ITEMS)?;
    let size = match &raw.size {
        None => vec![((1024, 1024), 1)],
        Some(toml::Value::String(s)) => vec![(side_pair(c, "workload.media.images.size", s)?, 1)],
        Some(toml::Value::Table(t)) if !t.is_empty() => {
            let mut out = Vec::new();
            for (k, w) in t {
                let key = format!("workload.media.images.size.\"{k}\"");
                out.push((side_pair(c, &key, k)?, weight(c, &key, w)?));
            }
            out
        }
        Some(_) => {
            return Err(c.err(
                "workload.media.images.size",
                "must be \"WxH\" or a table of weights",
                "write size = \"1024x1024\" or size = { \"512x512\" = 3, \"1024x1024\" = 1 }",
            ));
        }
    };
    let format = match raw.format.as_deref() {
        None | Some("jpeg" | "jpg") => ImageFormat::Jpeg,
        Some("png") => ImageFormat::Png,
        Some(other) => {
            return Err(c.err(
                "workload.media.images.format",
                format!("\"{other}\" is not an image format this tool encodes"),
                "use format = \"jpeg\" or \"png\"",
            ));
        }
    };
    Ok(ImageSpec { count, size, format })
}

fn audio(c: &Checker, raw: &RawAudio) -> Result<AudioSpec, ScenarioError> {
    let count = weights(c, "workload.media.audio.count", raw.count.as_ref(), 1, 0..=MAX_ITEMS)?;
    let seconds = weights(c, "workload.media.audio.seconds", raw.seconds.as_ref(), 10, 1..=MAX_SECONDS)?;
    match raw.format.as_deref() {
        None | Some("wav") => {}
        Some(other) => {
            return Err(c.err(
                "workload.media.audio.format",
                format!("\"{other}\" is not an audio format this tool encodes"),
                "use format = \"wav\"",
            ));
        }
    }
    let sample_rate = match raw.sample_rate {
        None => 16_000,
        Some(n) if (8_000..=48_000).contains(&n) => n as u32,
        Some(n) => {
            return Err(c.err(
                "workload.media.audio.sample_rate",
                format!("{n} is not a sample rate from 8000 to 48000"),
                "use e.g. sample_rate = 16000",
            ));
        }
    };
    Ok(AudioSpec { count, seconds, sample_rate })
}

/// `"1024x768"` → `(1024, 768)`.
fn side_pair(c: &Checker, key: &str, text: &str) -> Result<(u32, u32), ScenarioError> {
    let fix = format!("write the size as WIDTHxHEIGHT, each side from {MIN_SIDE} to {MAX_SIDE}, e.g. \"1024x1024\"");
    let parsed = text
        .split_once(['x', 'X'])
        .and_then(|(w, h)| Some((w.trim().parse::<u32>().ok()?, h.trim().parse::<u32>().ok()?)));
    match parsed {
        Some((w, h)) if (MIN_SIDE..=MAX_SIDE).contains(&w) && (MIN_SIDE..=MAX_SIDE).contains(&h) => Ok((w, h)),
        _ => Err(c.err(key, format!("\"{text}\" is not an image size"), fix)),
    }
}

fn weight(c: &Checker, key: &str, v: &toml::Value) -> Result<u32, ScenarioError> {
    match v.as_integer() {
        Some(w) if (1..=1_000_000).contains(&w) => Ok(w as u32),
        _ => Err(c.err(key, "a weight must be a whole number from 1 to 1000000", "e.g. { 1 = 3, 4 = 1 }")),
    }
}

/// One value (`4`) or weights (`{ 1 = 3, 4 = 1 }`), each value within `range`.
fn weights(
    c: &Checker,
    key: &str,
    value: Option<&toml::Value>,
    default: u32,
    range: std::ops::RangeInclusive<u32>,
) -> Result<Vec<(u32, u32)>, ScenarioError> {
    let fix = format!(
        "write one number from {} to {} or weights, e.g. {{ {} = 3, {} = 1 }}",
        range.start(),
        range.end(),
        range.start(),
        range.end()
    );
    let check = |key: &str, n: Option<i64>, shown: &str| -> Result<u32, ScenarioError> {
        match n {
            Some(n) if n >= 0 && range.contains(&(n.min(i64::from(u32::MAX)) as u32)) => Ok(n as u32),
            _ => Err(c.err(key, format!("{shown} is out of range"), fix.clone())),
        }
    };
    match value {
        None => Ok(vec![(default, 1)]),
        Some(toml::Value::Integer(n)) => Ok(vec![(check(key, Some(*n), &n.to_string())?, 1)]),
        Some(toml::Value::Table(t)) if !t.is_empty() => {
            let mut out = Vec::new();
            for (k, w) in t {
                let sub = format!("{key}.{k}");
                out.push((check(&sub, k.trim().parse().ok(), k)?, weight(c, &sub, w)?));
            }
            out.sort_unstable();
            Ok(out)
        }
        Some(_) => Err(c.err(key, "must be a number or a table of weights", fix.clone())),
    }
}
