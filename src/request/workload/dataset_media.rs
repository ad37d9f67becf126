//! Images named by dataset rows: read and encoded once, before the first level (base64 data
//! URLs, or files the run's file server serves with `delivery = "http"`), as the content parts
//! of `openai::media`, and spliced into the last message of the row's prompt like drawn media.
//!
//! Validation checked every file (`plan::scenario::dataset_media`); a file that cannot be read
//! again here (removed since) is said in the log and its row goes without it.

use base64::Engine;
use bytes::Bytes;

use super::media_files::MediaFiles;
use crate::plan::scenario::dataset_media::DatasetImage;
use crate::plan::scenario::{Api, Dataset, ImageFormat};
use crate::request::openai::media::{image_part, image_url_part};
use crate::request::record::MediaFacts;

/// Every row's encoded images, in the dataset's order.
#[derive(Debug)]
pub struct DatasetMedia {
    /// Per row: its parts, their buckets (`sizes` order) and its facts.
    rows: Vec<(Vec<Bytes>, Vec<usize>, MediaFacts)>,
    /// Per bucket (`sizes` order), the first part of that size, for a calibration probe.
    probes: Vec<Option<Bytes>>,
}

/// The distinct image sizes of `dataset` in the order rows first name them: the buckets a
/// calibration probes (`"WxH"`).
pub fn sizes(dataset: &Dataset) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for image in dataset.images.iter().flatten() {
        if !out.contains(&(image.width, image.height)) {
            out.push((image.width, image.height));
        }
    }
    out
}

impl DatasetMedia {
    /// Reads and encodes every image `dataset` names (the work happens here, before a level).
    pub fn build(dataset: &Dataset, api: Api, files: Option<&MediaFiles>) -> Self {
        let sizes = sizes(dataset);
        let mut probes = vec![None; sizes.len()];
        let mut rows = Vec::with_capacity(dataset.images.len());
        for (row, images) in dataset.images.iter().enumerate() {
            let mut parts = Vec::with_capacity(images.len());
            let mut buckets = Vec::with_capacity(images.len());
            let mut facts = MediaFacts::default();
            for (j, image) in images.iter().enumerate() {
                let Some(part) = encode(image, api, &format!("ds-{row}-{j}"), files) else { continue };
                let bucket = sizes.iter().position(|&s| s == (image.width, image.height)).unwrap_or(0);
                if let Some(p @ None) = probes.get_mut(bucket) {
                    *p = Some(part.clone());
                }
                buckets.push(bucket);
                parts.push(part);
                facts.images += 1;
                facts.pixels += u64::from(image.width) * u64::from(image.height);
                facts.media_bytes += image.bytes;
            }
            rows.push((parts, buckets, facts));
        }
        DatasetMedia { rows, probes }
    }

    /// The parts, their buckets and the facts (`body_bytes` still 0) of dataset prompt `pick`;
    /// `None` without images.
    pub fn row(&self, pick: usize) -> Option<(&[Bytes], &[usize], MediaFacts)> {
        let (parts, buckets, facts) = self.rows.get(pick)?;
        (!parts.is_empty()).then_some((&parts[..], &buckets[..], *facts))
    }

    /// An image of bucket `bucket` (`sizes` order), for a calibration probe.
    pub fn probe(&self, bucket: usize) -> Option<&Bytes> {
        self.probes.get(bucket)?.as_ref()
    }
}

fn encode(image: &DatasetImage, api: Api, name: &str, files: Option<&MediaFiles>) -> Option<Bytes> {
    let file = match std::fs::read(&image.path) {
        Ok(f) => f,
        Err(e) => {
            tracing::error!("the dataset image {} cannot be read any more: {e}; sent without it", image.path.display());
            return None;
        }
    };
    let (mime, ext) = match image.format {
        ImageFormat::Jpeg => ("image/jpeg", "jpg"),
        ImageFormat::Png => ("image/png", "png"),
    };
    Some(match files {
        Some(files) => {
            let name = format!("{name}.{ext}");
            let url = files.url(&name);
            files.insert(name, Bytes::from(file), mime);
            image_url_part(api, &url)
        }
        None => image_part(api, mime, &base64::engine::general_purpose::STANDARD.encode(&file)),
    })
}
