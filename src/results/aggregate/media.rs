//! `[workload.media]`: what the level's requests carried — images and audio per request,
//! pixels, media and body bytes — as distributions, and TTFT by the number of media items.
//!
//! Tallied in the one pass `finish_level` makes over the level's records (each record holds
//! its `media` facts), so the live run, `summarize` and `merge` agree. Sizes count every
//! completed request; TTFT only the performance-eligible ones.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::contract::nearest_rank;
use crate::request::record::RequestTiming;

/// One distribution: mean, p50 and p99 (nearest rank), max.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spread {
    pub samples: usize,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Spread {
    fn of(mut values: Vec<f64>) -> Self {
        values.sort_by(f64::total_cmp);
        let at = |p| (!values.is_empty()).then(|| nearest_rank(&values, p));
        let mean = (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64);
        Spread { samples: values.len(), mean, p50: at(50), p99: at(99), max: values.last().copied() }
    }
}

/// TTFT of the eligible requests that carried `items` media items.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ByCount {
    pub items: u32,
    pub requests: u64,
    pub ttft_ms: Spread,
}

/// The level's media block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MediaSummary {
    /// Completed requests, and the media they carried in all.
    pub requests: u64,
    pub images: u64,
    pub audio: u64,
    pub images_per_request: Spread,
    pub audio_per_request: Spread,
    pub pixels_per_request: Spread,
    pub audio_seconds_per_request: Spread,
    pub media_bytes_per_request: Spread,
    pub body_bytes_per_request: Spread,
    /// One row per media count seen, ascending.
    pub ttft_by_media_count: Vec<ByCount>,
}

/// The rows being tallied.
#[derive(Debug, Default)]
pub struct Tally {
    images: Vec<f64>,
    audio: Vec<f64>,
    pixels: Vec<f64>,
    seconds: Vec<f64>,
    media_bytes: Vec<f64>,
    body_bytes: Vec<f64>,
    by_count: BTreeMap<u32, (u64, Vec<f64>)>,
}

impl Tally {
    /// A completed request, after the level's final rules were applied to it.
    pub fn request(&mut self, r: &RequestTiming) {
        let Some(m) = r.replay.media else { return };
        self.images.push(f64::from(m.images));
        self.audio.push(f64::from(m.audio));
        self.pixels.push(m.pixels as f64);
        self.seconds.push(f64::from(m.audio_seconds));
        self.media_bytes.push(m.media_bytes as f64);
        self.body_bytes.push(m.body_bytes as f64);
        let row = self.by_count.entry(m.items()).or_default();
        row.0 += 1;
        if r.performance_eligible {
            row.1.extend(r.ttft_ms);
        }
    }

    pub fn finish(self) -> MediaSummary {
        MediaSummary {
            requests: self.images.len() as u64,
            images: self.images.iter().sum::<f64>() as u64,
            audio: self.audio.iter().sum::<f64>() as u64,
            images_per_request: Spread::of(self.images),
            audio_per_request: Spread::of(self.audio),
            pixels_per_request: Spread::of(self.pixels),
            audio_seconds_per_request: Spread::of(self.seconds),
            media_bytes_per_request: Spread::of(self.media_bytes),
            body_bytes_per_request: Spread::of(self.body_bytes),
            ttft_by_media_count: self
                .by_count
                .into_iter()
                .map(|(items, (requests, ttft))| ByCount { items, requests, ttft_ms: Spread::of(ttft) })
                .collect(),
        }
    }
}

/// The console's one line: media per request, body size, TTFT p50 by media count.
pub fn line(m: &MediaSummary) -> String {
    let n = |v: Option<f64>| v.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"));
    let kb = |v: Option<f64>| v.map_or_else(|| "–".to_string(), |v| format!("{:.0} KB", v / 1000.0));
    let ttft: Vec<String> = m
        .ttft_by_media_count
        .iter()
        .map(|r| format!("{}: {}", r.items, r.ttft_ms.p50.map_or_else(|| "–".to_string(), crate::numbers::duration_ms)))
        .collect();
    format!(
        "media: {} images, {} audio in {} requests · per request {} images, {} audio · body p50 {} · TTFT p50 by items {}",
        m.images,
        m.audio,
        m.requests,
        n(m.images_per_request.mean),
        n(m.audio_per_request.mean),
        kb(m.body_bytes_per_request.p50),
        ttft.join(", ")
    )
}
