//! `[workload.media]`: images and audio synthesised, encoded and turned into content parts
//! before a level starts, then handed to its requests without further work.
//!
//! The pool: for each image size (and each audio length) of the mixture, `pool` distinct items,
//! drawn from `(seed, level salt, modality, bucket, slot)` and encoded once (JPEG, PNG or WAV,
//! then base64, then the API's content part as bytes). Request `i` draws its counts and each
//! item's bucket from `(seed, i)`; its `j`-th item of a modality is slot
//! `(i · most + j) mod pool` of its bucket (`most`: the largest count of the mixture), so the
//! items go round-robin and a request never repeats one unless the pool is smaller than its
//! count. Each level has its own salt and so its own items (reproducible prompts share them).
//!
//! Preparing a request then costs a draw, a few `Bytes` clones and the splice of
//! `openai::media` (copies of bytes, no encoding).

use std::io::Write;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use rand::RngExt;

use super::media_files::MediaFiles;
use crate::plan::scenario::{Api, ImageFormat, MediaSpec};
use crate::request::openai::media::{audio_part, audio_url_part, image_part, image_url_part};
use crate::request::record::MediaFacts;
use crate::text::{self, Stream};

/// Mixed into the draws so that they are independent of the context draw of the same request.
const MEDIA_STREAM: u64 = 0x006d_6564_6961;

/// One encoded item, ready to splice.
#[derive(Debug)]
struct Item {
    part: Bytes,
    /// The encoded file's bytes (before base64).
    file_bytes: u64,
}

/// A level's encoded media.
#[derive(Debug)]
pub struct MediaPool {
    spec: Arc<MediaSpec>,
    seed: u64,
    /// Per size bucket of `spec.images.size`, `spec.pool` items.
    images: Vec<Vec<Item>>,
    /// Per length bucket of `spec.audio.seconds`, `spec.pool` items.
    audio: Vec<Vec<Item>>,
}

/// What request `i` carries: its parts in order, and its facts (`body_bytes` still 0).
#[derive(Debug)]
pub struct Picked {
    pub parts: Vec<Bytes>,
    pub facts: MediaFacts,
    /// Each item's bucket, numbered as `buckets` lists them.
    pub buckets: Vec<usize>,
}

/// The buckets of `spec`, images' sizes then audio lengths, as the calibration names them:
/// `("image", "1024x1024")`, `("audio", "5s")`.
pub fn buckets(spec: &MediaSpec) -> Vec<(&'static str, String)> {
    let images = spec.images.iter().flat_map(|im| im.size.iter()).map(|((w, h), _)| ("image", format!("{w}x{h}")));
    let audio = spec.audio.iter().flat_map(|au| au.seconds.iter()).map(|(s, _)| ("audio", format!("{s}s")));
    images.chain(audio).collect()
}

/// One item of bucket `bucket` (numbered as `buckets` lists them) for a calibration probe: not
/// one of any level's (its own key), encoded on its own.
pub fn probe_part(spec: &MediaSpec, api: Api, seed: u64, bucket: usize, files: Option<&MediaFiles>) -> Option<Bytes> {
    let key = mix(seed ^ 0x0070_726f_6265 ^ bucket as u64);
    let name = format!("probe-{seed:016x}-{bucket}");
    let images = spec.images.as_ref().map_or(0, |im| im.size.len());
    if bucket < images {
        let im = spec.images.as_ref()?;
        let ((w, h), _) = im.size[bucket];
        return Some(part(api, Kind::Image(im.format), encode_image(w, h, im.format, key), &name, files));
    }
    let au = spec.audio.as_ref()?;
    let (secs, _) = *au.seconds.get(bucket - images)?;
    Some(part(api, Kind::Audio, encode_wav(secs, au.sample_rate, key), &name, files))
}

#[derive(Clone, Copy)]
enum Kind {
    Image(ImageFormat),
    Audio,
}

/// The content part of one encoded file: inline base64, or the URL `files` serves it at.
fn part(api: Api, kind: Kind, file: Vec<u8>, name: &str, files: Option<&MediaFiles>) -> Bytes {
    let (mime, ext) = match kind {
        Kind::Image(ImageFormat::Jpeg) => ("image/jpeg", "jpg"),
        Kind::Image(ImageFormat::Png) => ("image/png", "png"),
        Kind::Audio => ("audio/wav", "wav"),
    };
    match files {
        Some(files) => {
            let name = format!("{name}.{ext}");
            let url = files.url(&name);
            files.insert(name, Bytes::from(file), mime);
            match kind {
                Kind::Image(_) => image_url_part(api, &url),
                Kind::Audio => audio_url_part(&url),
            }
        }
        None => {
            let data = base64::engine::general_purpose::STANDARD.encode(&file);
            match kind {
                Kind::Image(_) => image_part(api, mime, &data),
                Kind::Audio => audio_part(&data),
            }
        }
    }
}

impl MediaPool {
    /// Synthesises and encodes every item of the pool (the work happens here, before a level).
    /// With `files` (`delivery = "http"`), the parts name URLs of the file server, which
    /// serves the encoded files from now on (the previous level's are forgotten).
    pub fn build(spec: &Arc<MediaSpec>, api: Api, seed: u64, salt: u64, files: Option<&MediaFiles>) -> Self {
        let key = |modality: u64, bucket: usize, slot: u32| {
            let mut r = text::rng(
                seed ^ MEDIA_STREAM,
                salt,
                (modality << 48) ^ ((bucket as u64) << 24) ^ u64::from(slot),
                Stream::Block,
            );
            r.random::<u64>()
        };
        // One job per item, spread over the machine's cores.
        let mut jobs: Vec<(bool, usize, u32)> = Vec::new();
        for (b, _) in spec.images.iter().flat_map(|im| im.size.iter()).enumerate() {
            jobs.extend((0..spec.pool).map(|slot| (true, b, slot)));
        }
        for (b, _) in spec.audio.iter().flat_map(|au| au.seconds.iter()).enumerate() {
            jobs.extend((0..spec.pool).map(|slot| (false, b, slot)));
        }
        let encode = |&(is_image, b, slot): &(bool, usize, u32)| {
            let name = format!("{salt:016x}-{}{b}-{slot}", if is_image { "i" } else { "a" });
            let (file, kind) = match (is_image, &spec.images, &spec.audio) {
                (true, Some(im), _) => {
                    let ((w, h), _) = im.size[b];
                    (encode_image(w, h, im.format, key(1, b, slot)), Kind::Image(im.format))
                }
                (_, _, Some(au)) => (encode_wav(au.seconds[b].0, au.sample_rate, key(2, b, slot)), Kind::Audio),
                _ => (Vec::new(), Kind::Audio),
            };
            Item { file_bytes: file.len() as u64, part: part(api, kind, file, &name, files) }
        };
        if let Some(files) = files {
            files.clear();
        }
        let mut items = par_map(&jobs, encode).into_iter();
        let mut take = |buckets: usize| -> Vec<Vec<Item>> {
            (0..buckets).map(|_| items.by_ref().take(spec.pool as usize).collect()).collect()
        };
        let images = take(spec.images.as_ref().map_or(0, |im| im.size.len()));
        let audio = take(spec.audio.as_ref().map_or(0, |au| au.seconds.len()));
        MediaPool { spec: Arc::clone(spec), seed, images, audio }
    }

    /// The media of request `index`.
    pub fn pick(&self, index: u64) -> Picked {
        let mut rng = text::rng(self.seed ^ MEDIA_STREAM, 0, index, Stream::Context);
        let mut parts = Vec::new();
        let mut facts = MediaFacts::default();
        let mut buckets = Vec::new();
        if let Some(im) = &self.spec.images {
            let n = weighted(&im.count, &mut rng);
            let most = u64::from(im.count.iter().map(|&(c, _)| c).max().unwrap_or(1).max(1));
            for j in 0..n {
                let b = weighted_index(im.size.iter().map(|&(_, w)| w), &mut rng);
                let ((w, h), _) = im.size[b];
                let item = &self.images[b][slot(index, most, j, self.spec.pool)];
                parts.push(item.part.clone());
                buckets.push(b);
                facts.images += 1;
                facts.pixels += u64::from(w) * u64::from(h);
                facts.media_bytes += item.file_bytes;
            }
        }
        if let Some(au) = &self.spec.audio {
            let n = weighted(&au.count, &mut rng);
            let most = u64::from(au.count.iter().map(|&(c, _)| c).max().unwrap_or(1).max(1));
            for j in 0..n {
                let b = weighted_index(au.seconds.iter().map(|&(_, w)| w), &mut rng);
                let item = &self.audio[b][slot(index, most, j, self.spec.pool)];
                parts.push(item.part.clone());
                buckets.push(self.images.len() + b);
                facts.audio += 1;
                facts.audio_seconds += au.seconds[b].0;
                facts.media_bytes += item.file_bytes;
            }
        }
        Picked { parts, facts, buckets }
    }
}

/// `f` over `jobs` on up to one thread per core, results in the jobs' order.
fn par_map<J: Sync, T: Send>(jobs: &[J], f: impl Fn(&J) -> T + Sync) -> Vec<T> {
    if jobs.is_empty() {
        return Vec::new();
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, jobs.len());
    let per = jobs.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> =
            jobs.chunks(per).map(|chunk| scope.spawn(|| chunk.iter().map(&f).collect::<Vec<T>>())).collect();
        // A job that panicked is a bug here, not outside data: re-raised as it is.
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    })
}

fn slot(index: u64, most: u64, j: u32, pool: u32) -> usize {
    (index.wrapping_mul(most).wrapping_add(u64::from(j)) % u64::from(pool.max(1))) as usize
}

/// A value of `(value, weight)` pairs, drawn by weight.
fn weighted(choices: &[(u32, u32)], rng: &mut impl rand::Rng) -> u32 {
    choices.get(weighted_index(choices.iter().map(|&(_, w)| w), rng)).map_or(0, |&(v, _)| v)
}

fn weighted_index(weights: impl Iterator<Item = u32> + Clone, rng: &mut impl rand::Rng) -> usize {
    let total: u64 = weights.clone().map(u64::from).sum();
    if total <= 1 {
        return 0;
    }
    let mut pick = rng.random_range(0..total);
    for (i, w) in weights.enumerate() {
        if pick < u64::from(w) {
            return i;
        }
        pick -= u64::from(w);
    }
    0
}

/// A cheap deterministic hash of a pixel or sample position.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// RGB pixels: gradients and bands whose colours and angles come from `key`, with some grain
/// (a photograph-like size once encoded, not a flat image a codec shrinks to nothing).
fn synth_rgb(w: u32, h: u32, key: u64) -> Vec<u8> {
    let k = mix(key);
    let (a, b, c) = ((k & 0xff) as u32, ((k >> 8) & 0xff) as u32, ((k >> 16) & 0xff) as u32);
    let band = 16 + ((k >> 24) & 0x3f) as u32;
    let mut out = Vec::with_capacity(w as usize * h as usize * 3);
    for y in 0..h {
        for x in 0..w {
            let grain = (mix(k ^ (u64::from(y) << 32) ^ u64::from(x)) & 0x1f) as u32;
            let stripe = if ((x + y * (a % 3 + 1)) / band) % 2 == 0 { 40 } else { 0 };
            out.push(((x * 255 / w.max(1) + a + grain + stripe) & 0xff) as u8);
            out.push(((y * 255 / h.max(1) + b + grain) & 0xff) as u8);
            out.push((((x + y) * 127 / (w + h).max(1) + c + grain + stripe / 2) & 0xff) as u8);
        }
    }
    out
}

fn encode_image(w: u32, h: u32, format: ImageFormat, key: u64) -> Vec<u8> {
    let rgb = synth_rgb(w, h, key);
    match format {
        ImageFormat::Jpeg => {
            let mut out = Vec::new();
            // Sides are validated to at most 8192 (u16), and the buffer holds w·h·3 bytes, so
            // the encoder has nothing to refuse.
            let encoded =
                jpeg_encoder::Encoder::new(&mut out, 85).encode(&rgb, w as u16, h as u16, jpeg_encoder::ColorType::Rgb);
            debug_assert!(encoded.is_ok(), "{encoded:?}");
            out
        }
        ImageFormat::Png => encode_png(w, h, &rgb),
    }
}

/// PNG, 8-bit RGB, no filter, one zlib stream: the signature and three chunks.
fn encode_png(w: u32, h: u32, rgb: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(rgb.len() + h as usize);
    for row in rgb.chunks(w as usize * 3) {
        raw.push(0);
        raw.extend_from_slice(row);
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing into a Vec cannot fail.
    let idat = z.write_all(&raw).and_then(|()| z.finish()).unwrap_or_default();
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    for (kind, data) in [(b"IHDR", &ihdr[..]), (b"IDAT", &idat[..]), (b"IEND", &[][..])] {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(kind);
        crc.update(data);
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        out.extend_from_slice(&crc.finalize().to_be_bytes());
    }
    out
}

/// WAV: RIFF, a PCM `fmt ` chunk (16-bit mono) and the samples: tones whose pitch moves, with
/// some noise.
fn encode_wav(seconds: u32, rate: u32, key: u64) -> Vec<u8> {
    let n = seconds as usize * rate as usize;
    let data_len = (n * 2) as u32;
    let mut out = Vec::with_capacity(44 + n * 2);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes()); // PCM
    out.extend_from_slice(&1u16.to_le_bytes()); // mono
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * 2).to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    let k = mix(key);
    let base = 180.0 + (k % 400) as f64;
    let mut phase = 0.0f64;
    for i in 0..n {
        let t = i as f64 / f64::from(rate);
        let f = base * (1.0 + 0.3 * (t * 0.7 + (k >> 20) as f64 % 6.0).sin());
        phase += std::f64::consts::TAU * f / f64::from(rate);
        let noise = ((mix(k ^ i as u64) & 0x3ff) as f64 - 512.0) * 2.0;
        let s = (phase.sin() * 9000.0 + noise).clamp(-32768.0, 32767.0) as i16;
        out.extend_from_slice(&s.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::scenario::{AudioSpec, ImageSpec, MediaDelivery};

    fn spec() -> Arc<MediaSpec> {
        Arc::new(MediaSpec {
            delivery: MediaDelivery::DataUrl,
            pool: 3,
            images: Some(ImageSpec {
                count: vec![(1, 1), (2, 1)],
                size: vec![((64, 48), 1), ((32, 32), 1)],
                format: ImageFormat::Jpeg,
            }),
            audio: Some(AudioSpec { count: vec![(1, 1)], seconds: vec![(1, 1)], sample_rate: 8000 }),
        })
    }

    #[test]
    fn pool_is_deterministic_and_files_are_well_formed() {
        let a = MediaPool::build(&spec(), Api::Chat, 7, 9, None);
        let b = MediaPool::build(&spec(), Api::Chat, 7, 9, None);
        for i in 0..20 {
            let (x, y) = (a.pick(i), b.pick(i));
            assert_eq!(x.facts, y.facts);
            assert_eq!(x.parts, y.parts);
            assert!(x.facts.images >= 1 && x.facts.audio == 1);
        }
        let other = MediaPool::build(&spec(), Api::Chat, 7, 10, None);
        assert_ne!(a.images[0][0].part, other.images[0][0].part, "another level salt, other images");
        let jpeg = encode_image(64, 48, ImageFormat::Jpeg, 1);
        assert_eq!(&jpeg[..2], b"\xff\xd8");
        let png = encode_png(4, 2, &synth_rgb(4, 2, 1));
        assert_eq!(&png[12..16], b"IHDR");
        assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 4);
        let wav = encode_wav(1, 8000, 1);
        assert_eq!((wav.len(), &wav[..4], &wav[8..12]), (44 + 16000, &b"RIFF"[..], &b"WAVE"[..]));
    }
}
